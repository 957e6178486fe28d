"""Anchor ("most common") tokens of high-CSM pairs, per layer and head (arXiv:2512.21956).

Per window, layer and head, a token's *degree* is the number of the window's
high pairs it takes part in (as i or j). The window's *anchor* is the
position of highest degree (ties: the lowest position); its *anchor share* is
its degree divided by the window's number of high pairs k (windows with k = 0
have no anchor). Over the corpus, per layer l and head h:

- ``anchor_share``: mean anchor share over windows.
- token counts: how many windows had each token id (vocabulary entry) as
  anchor, a dense (layer, head, vocab) count tensor; the head's *top anchor*
  is its most frequent anchor token id (ties: the lowest id).
- ``anchor_consistency``: share of windows whose anchor is the head's top
  anchor token.
- ``anchor_unique``: 1 when no other head of the same layer has the same top
  anchor, else 0 (its layer mean is the share of heads with an anchor of their own).
- ``distinct_anchors``: number of distinct top anchors among the heads of the
  layer (the same value for every head of a layer, so that its layer mean is that number).
"""

from __future__ import annotations

from typing import Any, Dict

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView

SCALARS = ("anchor_share", "anchor_consistency", "anchor_unique", "distinct_anchors")


def token_degree(index: torch.Tensor, pairs: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Number of high pairs each token takes part in.

    Args:
        index: (..., S) int64 pair indices of the high pairs, P (the sentinel) in unused slots
            (e.g. :attr:`PairView.high_index`, (batch, layer, head, S)).
        pairs: (2, P) rows and columns of the pairs i < j.
        seq_len: T.

    Returns:
        (..., T) float32.
    """
    # the sentinel pair P joins a dummy position T, cut off at the end
    dummy = pairs.new_full((2, 1), seq_len)
    ends = torch.cat([pairs, dummy], 1)  # (2, P+1)
    ones = torch.ones(index.shape, dtype=torch.float32, device=index.device)
    degree = torch.zeros(*index.shape[:-1], seq_len + 1, dtype=torch.float32, device=index.device)
    degree.scatter_add_(-1, ends[0][index], ones)
    degree.scatter_add_(-1, ends[1][index], ones)
    return degree[..., :seq_len]


def degree_from_ends(rows: torch.Tensor, cols: torch.Tensor, listed: torch.Tensor, seq_len: int) -> torch.Tensor:
    """:func:`token_degree` from the pairs' two tokens (``rows``, ``cols``, (..., S) int64) and which slots hold
    a pair (``listed``, bool): (..., T) float32 (the blockwise view decodes pair indices without a pair table)."""
    ones = listed.float()
    degree = torch.zeros(*rows.shape[:-1], seq_len, dtype=torch.float32, device=rows.device)
    degree.scatter_add_(-1, rows, ones)
    degree.scatter_add_(-1, cols, ones)
    return degree


def window_anchors(high_index: torch.Tensor, high_count: torch.Tensor, pairs: Any, input_ids: torch.Tensor) -> tuple:
    """Each window's anchor per layer and head: the token that takes part in the most of its high pairs
    (arXiv:2512.21956, the "most common" token).

    Args:
        high_index: (batch, layer, head, S) int pair indices of the high pairs, P in unused slots.
        high_count: (batch, layer, head) number of high pairs k.
        pairs: a function of pair indices returning ``(rows, cols, listed)``
            (:meth:`~attnsim.stats.pairs.PairView.pair_ends`, on every path), or a (2, P) table of the pairs' rows
            and columns (hand-made cases).
        input_ids: (batch, T) token ids.

    Returns:
        (position, token_id, share, has_anchor), each (batch, layer, head): the
        anchor's position (int64), its token id (int64), its degree / k
        (float32, NaN without high pairs) and whether the window has high pairs.
    """
    if not callable(pairs):
        n_pairs = pairs.shape[1]
        table = torch.cat([pairs, pairs.new_zeros(2, 1)], 1)  # (2, P + 1): the sentinel slot reads pair 0, unlisted

        def ends(index: torch.Tensor) -> tuple:
            return table[0][index], table[1][index], index < n_pairs

        pairs = ends
    # one layer's k pairs per head at a time (bounded memory at long T)
    degree = torch.stack([degree_from_ends(*pairs(high_index[:, layer]), input_ids.shape[-1]) for layer in range(high_index.shape[1])], 1)  # (B, L, H, T)
    top_degree, position = degree.max(-1)  # first maximum: ties go to the lowest position
    k = high_count.float()  # (B, L, H)
    token = input_ids[torch.arange(input_ids.shape[0], device=input_ids.device)[:, None, None], position]  # (B, L, H)
    has = k > 0
    return position, token, safe_divide(top_degree, k), has


def _anchor_update(high_index: torch.Tensor, high_count: torch.Tensor, pairs: Any, input_ids: torch.Tensor, vocab_size: int) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`AnchorAccumulator` states.

    Args: as :func:`window_anchors`; ``vocab_size`` is the number of token ids counted (every id must be below it).

    Returns:
        ``share_sum`` and ``windows`` (L, H) float64 increments, and ``anchor_cells`` (N,) int64: for each of
        the N windows and heads with an anchor, its cell ``(layer * H + head) * vocab_size + token id`` of the
        flattened ``token_counts`` state, which gains 1 per listed cell (a sparse increment: the dense one
        would be a (L, H, vocab) tensor per batch).
    """
    _, token, share, has = window_anchors(high_index, high_count, pairs, input_ids)
    _, n_layers, n_heads = token.shape
    layer = torch.arange(n_layers, device=token.device)[None, :, None]
    head = torch.arange(n_heads, device=token.device)[None, None, :]
    cells = ((layer * n_heads + head) * vocab_size + token)[has]  # (windows with an anchor,)
    return {"share_sum": share.nan_to_num(0.0).sum(0).double(), "windows": has.sum(0).double(), "anchor_cells": cells}


def _anchor_compute(share_sum: torch.Tensor, windows: torch.Tensor, token_counts: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Scalars from the :class:`AnchorAccumulator` states, each (layer, head) float64 (NaN for a head
    without windows), and ``top_anchor`` (layer, head) int64 (-1 without windows)."""
    ids, counts = top_anchors(token_counts, 1)
    top = torch.where(windows > 0, ids[..., 0], torch.full_like(ids[..., 0], -1))  # (L, H)
    defined = top >= 0
    same = (top[:, :, None] == top[:, None, :]) & defined[:, :, None] & defined[:, None, :]  # (L, H, H)
    unique = (same.sum(-1) == 1).double().masked_fill(~defined, float("nan"))
    # distinct defined ids per layer: sort, then count changes of value
    ordered = top.sort(-1).values
    changes = ((ordered[:, 1:] != ordered[:, :-1]) & (ordered[:, 1:] >= 0)).sum(-1)
    distinct = changes + (ordered[:, :1] >= 0).squeeze(-1).long()  # (L,)
    distinct = distinct.double()[:, None].expand_as(unique).clone()
    distinct = distinct.masked_fill(~defined.any(-1, keepdim=True).expand_as(distinct), float("nan"))
    return {
        "anchor_share": safe_divide(share_sum, windows),
        "anchor_consistency": safe_divide(counts[..., 0], windows),
        "anchor_unique": unique,
        "distinct_anchors": distinct,
        "top_anchor": top,
    }


def top_anchors(token_counts: torch.Tensor, count: int = 5) -> tuple:
    """The ``count`` most frequent anchor token ids of each head.

    Args:
        token_counts: (layer, head, vocab) windows with each token id as anchor.
        count: ids per head (at most the vocabulary size).

    Returns:
        (ids, windows), each (layer, head, count): token ids (int64) and the
        number of windows with that anchor (float64), most frequent first;
        ties by lowest id.
    """
    count = min(count, token_counts.shape[-1])
    # a stable descending sort breaks ties by lowest id; one layer at a time, so that no (layer, head, vocab) index
    # tensor is made (int64: 106 MiB for SmolLM2's 270 heads and 49,152 ids)
    order = (
        torch.stack([counts.argsort(dim=-1, descending=True, stable=True)[..., :count] for counts in token_counts.unbind(0)])
        if len(token_counts)
        else token_counts.new_zeros((*token_counts.shape[:-1], count), dtype=torch.long)
    )
    return order, token_counts.gather(-1, order).double()


class AnchorAccumulator(Accumulator):
    """Streaming anchor-token statistics per layer and head (see module docstring).

    Args:
        n_layers, n_heads: model shape.
        vocab_size: number of token ids (the tokenizer's ``len``).

    States: anchor shares and windows with an anchor (L, H) float64 sums, anchor counts per token id
    (L, H, vocab) int32 (whole windows: exact up to 2^31 - 1 of them).
    """

    def __init__(self, n_layers: int, n_heads: int, vocab_size: int):
        super().__init__()
        self.n_layers, self.n_heads, self.vocab_size = n_layers, n_heads, vocab_size
        self.add_sum("share_sum", n_layers, n_heads)
        self.add_sum("windows", n_layers, n_heads)
        self.add_sum("token_counts", n_layers, n_heads, vocab_size, dtype=torch.int32)  # window counts: exact below 2^31 windows, half of float64's memory

    def update(self, view: PairView) -> None:  # type: ignore[override]
        if view.max_token_id >= self.vocab_size:  # read with the batch's other host numbers (one device sync)
            raise ValueError(f"token id {view.max_token_id} is outside the vocabulary of {self.vocab_size} ids given to the anchors accumulator")
        increments = _anchor_update(view.high_index, view.high_count, view.pair_ends, view.batch["input_ids"], self.vocab_size)
        cells = increments.pop("anchor_cells")
        self.fold(increments)
        self.token_counts.view(-1).index_add_(0, cells, torch.ones_like(cells, dtype=self.token_counts.dtype))

    def top_anchors(self, count: int = 5) -> tuple:
        """The ``count`` most frequent anchor token ids of each head (see :func:`top_anchors`)."""
        return top_anchors(self.token_counts, count)

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64 (NaN for a head without windows), and
        ``top_anchor`` (layer, head) int64 (-1 without windows)."""
        return _anchor_compute(self.share_sum, self.windows, self.token_counts)
