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

from typing import Dict

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


def window_anchors(view: PairView) -> tuple:
    """Each window's anchor per layer and head.

    Returns:
        (position, token_id, share, has_anchor), each (layer, batch, head): the
        anchor's position (int64), its token id (int64), its degree / k
        (float32, NaN without high pairs) and whether the window has high pairs.
    """
    degree = token_degree(view.high_index, view.pairs, view.seq_len).transpose(0, 1)  # (L, B, H, T)
    top_degree, position = degree.max(-1)  # first maximum: ties go to the lowest position
    k = view.high_count.float()  # (L, B, H)
    ids = view.batch["input_ids"]  # (B, T)
    token = ids[torch.arange(ids.shape[0], device=ids.device)[None, :, None], position]  # (L, B, H)
    has = k > 0
    return position, token, safe_divide(top_degree, k), has


class AnchorAccumulator(Accumulator):
    """Streaming anchor-token statistics per layer and head (see module docstring).

    Args:
        n_layers, n_heads: model shape.
        vocab_size: number of token ids (the tokenizer's ``len``).

    States (float64 sums): anchor shares and windows with an anchor (L, H),
    anchor counts per token id (L, H, vocab).
    """

    def __init__(self, n_layers: int, n_heads: int, vocab_size: int):
        super().__init__()
        self.n_layers, self.n_heads, self.vocab_size = n_layers, n_heads, vocab_size
        self.add_sum("share_sum", n_layers, n_heads)
        self.add_sum("windows", n_layers, n_heads)
        self.add_sum("token_counts", n_layers, n_heads, vocab_size)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        if view.max_token_id >= self.vocab_size:  # read with the batch's other host numbers (one device sync)
            raise ValueError(f"token id {view.max_token_id} is outside the vocabulary of {self.vocab_size} ids given to the anchors accumulator")
        _, token, share, has = window_anchors(view)
        self.share_sum += share.nan_to_num(0.0).sum(1).double()
        self.windows += has.sum(1).double()
        layer = torch.arange(self.n_layers, device=token.device)[:, None, None]
        head = torch.arange(self.n_heads, device=token.device)[None, None, :]
        flat = ((layer * self.n_heads + head) * self.vocab_size + token)[has]  # (windows with an anchor,)
        self.token_counts.view(-1).index_add_(0, flat, torch.ones_like(flat, dtype=self.token_counts.dtype))

    def top_anchors(self, count: int = 5) -> tuple:
        """The ``count`` most frequent anchor token ids of each head.

        Returns:
            (ids, windows), each (layer, head, count): token ids (int64) and the
            number of windows with that anchor (float64), most frequent first;
            ties by lowest id.
        """
        counts = self.token_counts
        count = min(count, self.vocab_size)
        # a stable descending sort breaks ties by lowest id
        order = counts.argsort(dim=-1, descending=True, stable=True)[..., :count]
        return order, counts.gather(-1, order)

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64 (NaN for a head without windows), and
        ``top_anchor`` (layer, head) int64 (-1 without windows)."""
        ids, counts = self.top_anchors(1)
        top = torch.where(self.windows > 0, ids[..., 0], torch.full_like(ids[..., 0], -1))  # (L, H)
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
            "anchor_share": safe_divide(self.share_sum, self.windows),
            "anchor_consistency": safe_divide(counts[..., 0], self.windows),
            "anchor_unique": unique,
            "distinct_anchors": distinct,
            "top_anchor": top,
        }
