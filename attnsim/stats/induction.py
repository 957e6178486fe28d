"""Induction and previous-token heads, per layer and head (Olsson et al. 2022).

Source: Olsson, Elhage, Nanda, et al., "In-context learning and induction heads",
Transformer Circuits Thread 2022. On a sequence of random tokens repeated (corpus
``repeated_tokens``, :mod:`attnsim.data.repeated`), an *induction head* attends from a
token of a later copy to the token that *followed* that token's earlier occurrence
(it looks back for "[A][B] ... [A]" and attends to [B]); a *previous-token head*
attends from each token to the one just before it (the other half of the circuit).

Definitions, for layer l, head h, one window with attention probabilities A (query_pos
x key_pos), its real tokens (attention mask) and its *statistic tokens* (real tokens;
special tokens unless ``stats.include_special=false``):

- *Earlier occurrences* of token i: the positions e < i holding the same token. A batch
  from ``repeated_tokens`` carries ``earlier_position`` (the most recent one, -1 if none);
  any other batch gets it from the token ids among real, non-special tokens that are not
  the tokenizer's [UNK] (:func:`earlier_positions`). Following the links gives every
  earlier occurrence (copies 1..c-1 for a token of copy c).
- *Allowed keys* of row i: what the model can attend to. An encoder's rows see every real
  token; a causal model's row i sees the real tokens 0..i. Which holds is read, per window
  and head, from the attention itself: a head whose rows put exactly 0 on every real key
  after the query is causal (a decoder's mask gives exact zeros; an encoder's softmax does
  not), so decoders need no setting.
- ``induction_score``: mean over *induction queries* (statistic tokens with an earlier
  occurrence) of ``sum_t A[i, t]`` over the *targets* t = e + 1 of every earlier occurrence
  e (the token after it; t <= i, so always allowed). ``induction_score_chance``: the same
  for uniform attention over the row's allowed keys, ``n_targets(i) / n_allowed(i)``.
- ``prev_token_score``: mean over *previous-token queries* (statistic tokens i >= 1 whose
  position i - 1 holds a real token) of ``A[i, i - 1]``; ``prev_token_score_chance``:
  ``1 / n_allowed(i)`` averaged the same way.
- ``earlier_csm_mean``: mean CSM (arXiv:2512.21956: ``Z Zᵀ`` of the head's outputs, in CSM
  units, as ``stats.normalise`` sets) over the valid pairs (e, i) of a token and each of
  its earlier occurrences. ``earlier_csm_chance``: the mean CSM of the rows those entries
  sit in, ``sum_{j != i} CSM[i, j] / m(i)`` over the row's m(i) valid partners, weighted
  like the score (one term per earlier-occurrence entry). ``earlier_csm_ratio``: their
  ratio (above 1: a token's vector is closer to its earlier occurrence than to the rest of
  its row; meaningful when CSM values are positive; NaN when the chance is 0). Causality
  does not change which pairs exist: Z exists for every token.

Every score is a ratio of corpus sums (numerator and count summed over windows), so an
accumulator merges exactly; NaN where no query exists (e.g. no repeated token).
"""

from __future__ import annotations

from typing import Dict, Mapping

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import ChunkReducer, PairView, Piece

SCALARS = (
    "induction_score",
    "induction_score_chance",
    "prev_token_score",
    "prev_token_score_chance",
    "earlier_csm_mean",
    "earlier_csm_chance",
    "earlier_csm_ratio",
)


def earlier_positions(input_ids: torch.Tensor, content: torch.Tensor) -> torch.Tensor:
    """Position of each token's most recent earlier occurrence (same id) among ``content`` tokens.

    Args:
        input_ids: (batch, pos) token ids.
        content: (batch, pos) bool tokens that may repeat (real, not special, not [UNK]).

    Returns:
        (batch, pos) int64: the largest e < i with ``input_ids[e] == input_ids[i]``, both content; -1 if none.
    """
    seq_len = input_ids.shape[-1]
    position = torch.arange(seq_len, device=input_ids.device)
    same = (input_ids[:, :, None] == input_ids[:, None, :]) & content[:, :, None] & content[:, None, :]
    same &= position[None, None, :] < position[None, :, None]  # key e before query i
    # (B, T, T): e + 1 where an earlier occurrence, 0 elsewhere; the max is the most recent
    return (same.long() * (position + 1)).amax(-1) - 1


def earlier_occurrences(earlier: torch.Tensor) -> torch.Tensor:
    """Every earlier occurrence, by following the most-recent links.

    Args:
        earlier: (batch, pos) int64 most recent earlier occurrence of each token, -1 if none
            (links not strictly before their token are ignored).

    Returns:
        (batch, pos, pos) bool: ``[b, i, e]`` True when e is an earlier occurrence of i.
    """
    batch, seq_len = earlier.shape
    position = torch.arange(seq_len, device=earlier.device)
    earlier = torch.where((earlier >= 0) & (earlier < position), earlier, -1)
    found = torch.zeros(batch, seq_len, seq_len, dtype=torch.bool, device=earlier.device)
    current = earlier
    for _ in range(seq_len):  # each step goes strictly back, so at most T steps
        has = current >= 0
        if not bool(has.any()):
            break
        rows, queries = has.nonzero(as_tuple=True)
        found[rows, queries, current[rows, queries]] = True
        current = torch.where(has, earlier.gather(1, current.clamp_min(0)), -1)
    return found


def induction_weights(earlier: torch.Tensor, real: torch.Tensor, queries: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Per-window cells and counts the attention statistics read (see the module docstring).

    Args:
        earlier: (batch, pos) int64 most recent earlier occurrence, -1 if none.
        real: (batch, pos) bool real tokens (keys the model can attend to).
        queries: (batch, pos) bool statistic tokens.

    Returns:
        ``cells``: (batch, pos * pos, 3) float32 query-major 0/1 weights of the induction targets,
        the previous token and the cells after the query (``j > i``, real query and key, to detect
        causal heads); ``chance``: (batch, 2, 2) float32 summed chance of [induction, previous] under
        [encoder, causal] allowed keys; ``counts``: (batch, 2) float32 induction and previous-token queries.
    """
    batch, seq_len = real.shape
    position = torch.arange(seq_len, device=real.device)
    occurrences = earlier_occurrences(earlier)  # (B, T, T) [b, i, e]
    targets = torch.zeros_like(occurrences)
    targets[..., 1:] = occurrences[..., :-1]  # t = e + 1
    targets &= real[:, None, :] & queries[:, :, None]
    ind_query = targets.any(-1)  # (B, T)
    prev_query = queries.clone()
    prev_query[:, 0] = False
    prev_query[:, 1:] &= real[:, :-1]
    previous = torch.zeros_like(targets)
    previous[:, position[1:], position[:-1]] = True
    previous &= prev_query[:, :, None]
    after = (position[None, :] > position[:, None])[None] & real[:, :, None] & real[:, None, :]
    cells = torch.stack([targets, previous, after], -1).float().reshape(batch, seq_len * seq_len, 3)
    n_encoder = real.sum(-1, keepdim=True).float().expand(batch, seq_len)  # every real key
    n_causal = real.long().cumsum(-1).float()  # real keys 0..i
    n_targets = targets.sum(-1).float()
    chance = torch.stack(
        [
            torch.stack([(n_targets / n_encoder.clamp_min(1)).sum(-1), (n_targets / n_causal.clamp_min(1)).sum(-1)], -1),
            torch.stack([(prev_query / n_encoder.clamp_min(1)).sum(-1), (prev_query / n_causal.clamp_min(1)).sum(-1)], -1),
        ],
        1,
    )  # (B, 2 stats, 2 kinds)
    counts = torch.stack([ind_query.sum(-1), prev_query.sum(-1)], -1).float()
    return {"cells": cells, "chance": chance, "counts": counts}


def earlier_pair_weights(earlier: torch.Tensor, pair_mask: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """(batch, P, 2) float32 pair weights of the CSM statistics: [earlier-occurrence pairs, row-mean weights].

    Args:
        earlier: (batch, pos) int64 most recent earlier occurrence, -1 if none.
        pair_mask: (batch, P) bool valid pairs.
        pairs: (2, P) rows a and columns b (a < b) of the pairs.

    The row-mean weight of pair (a, b) is ``q(a) / m(a) + q(b) / m(b)``: q(x) the earlier-occurrence
    pairs of token x (as the later token), m(x) the valid pairs holding x; the CSM summed with it is
    ``sum_x q(x) * (mean CSM of row x)``.
    """
    occurrences = earlier_occurrences(earlier)  # [b, i, e], e < i
    scored = occurrences[:, pairs[1], pairs[0]] & pair_mask  # pair (a, b) = (e, i)
    q = torch.zeros(earlier.shape, device=earlier.device)
    q.index_add_(1, pairs[1], scored.float())
    m = torch.zeros(earlier.shape, device=earlier.device)
    valid = pair_mask.float()
    m.index_add_(1, pairs[0], valid)
    m.index_add_(1, pairs[1], valid)
    share = q / m.clamp_min(1)  # (B, T)
    row_mean = (share[:, pairs[0]] + share[:, pairs[1]]) * valid
    return torch.stack([scored.float(), row_mean], -1)


def view_earlier(view: PairView) -> torch.Tensor:
    """(batch, pos) int64 most recent earlier occurrence of each token of a view's batch: the batch's
    ``earlier_position`` when given, else :func:`earlier_positions` over real, non-special, non-[UNK] tokens."""
    given = view.batch.get("earlier_position")
    if given is not None:
        return given.to(view.device).long()
    batch = view.batch
    content = batch["attention_mask"].bool() & ~batch["special_mask"].bool()
    if "unknown_mask" in batch:
        content &= ~batch["unknown_mask"].bool()
    return earlier_positions(batch["input_ids"], content)


class InductionAttentionSums(ChunkReducer):
    """Attention sums of the induction and previous-token scores (Olsson et al. 2022), folded piece by piece in the
    view's attention walk (written once: a piece's query rows and keys select the cells it holds).

    Attributes:
        mass: (batch, layer * head, 2) float32 attention summed over [induction targets, previous token].
        chance: (batch, layer * head, 2) float32 the same for uniform attention over the allowed keys
            (encoder or causal, as the head's attention shows).
        counts: (batch, 2) float32 induction and previous-token queries.
    """

    source = "attention"

    def __init__(self, view: PairView) -> None:
        weights = induction_weights(view_earlier(view), view.batch["attention_mask"].bool(), view.tokens)
        self.cells, self.window_chance, self.counts = weights["cells"], weights["chance"], weights["counts"]
        self.seq_len, self.n_heads = view.seq_len, view.n_heads
        # (B, L*H, 3): attention on [induction targets, previous token, cells after the query]
        self.sums = torch.zeros(view.batch_size, view.n_layers * view.n_heads, 3, device=view.device)

    def update(self, view: PairView, piece: Piece) -> None:
        values, (r0, r1), keys = piece.values, piece.rows, piece.keys  # values (c, l, H, rows, K)
        count, heads = piece.stop - piece.start, values.shape[1] * values.shape[2]
        cells = self.cells[piece.windows].view(count, self.seq_len, self.seq_len, 3)[:, r0:r1, :keys]  # (c, rows, K, 3)
        sums = torch.bmm(values.reshape(count, heads, -1), cells.reshape(count, -1, 3))  # (c, l*H, 3)
        self.sums[piece.windows, piece.layer * self.n_heads : piece.layer * self.n_heads + heads] += sums

    def finish(self, view: PairView) -> None:
        """The masses, and the chance of each head from whether it attends after the query (causal or not)."""
        self.mass = self.sums[..., :2]
        causal = (self.sums[..., 2] == 0)[..., None]  # (B, L*H, 1): no attention after the query
        chance = self.window_chance  # (B, 2, 2) [statistic, encoder/causal]
        self.chance = torch.where(causal, chance[:, None, :, 1], chance[:, None, :, 0])


class EarlierCSMSums(ChunkReducer):
    """CSM sums at earlier occurrences and of their rows, folded piece by piece in the view's CSM walk (written once:
    a piece's pair range selects the pair weights it meets).

    Attributes:
        sums: (batch, layer * head, 2) float32 CSM summed over [earlier-occurrence pairs, row-mean weights].
        pairs: (batch,) float32 earlier-occurrence pairs.
    """

    source = "csm"

    def __init__(self, view: PairView) -> None:
        rows, cols, _ = view.pair_ends(torch.arange(view.n_pairs, device=view.device))  # (P,) each: the pair table
        valid = view.tokens[:, rows] & view.tokens[:, cols]  # (B, P) valid pairs
        self.weights = earlier_pair_weights(view_earlier(view), valid, torch.stack([rows, cols]))  # (B, P, 2)
        self.pairs = self.weights[..., 0].sum(-1)
        self.n_heads = view.n_heads
        self.sums = torch.zeros(view.batch_size, view.n_layers * view.n_heads, 2, device=view.device)

    def update(self, view: PairView, piece: Piece) -> None:
        (p0, p1), values = piece.pairs, piece.values  # values (c, l, H, p1 - p0)
        count, heads = piece.stop - piece.start, values.shape[1] * values.shape[2]
        flat = values.reshape(count, heads, p1 - p0)
        first = piece.layer * self.n_heads
        self.sums[piece.windows, first : first + heads] += torch.bmm(flat, self.weights[piece.windows, p0:p1])


def _induction_update(
    attention_mass: torch.Tensor,
    attention_chance: torch.Tensor,
    query_counts: torch.Tensor,
    csm_sums: torch.Tensor,
    csm_pairs: torch.Tensor,
    n_layers: int,
    n_heads: int,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`InductionAccumulator` states.

    Args:
        attention_mass, attention_chance: (B, L*H, 2) [induction, previous-token] attention sums and chance sums.
        query_counts: (B, 2) induction and previous-token queries.
        csm_sums: (B, L*H, 2) CSM summed over earlier-occurrence pairs and with the row-mean weights.
        csm_pairs: (B,) earlier-occurrence pairs.

    Returns:
        State name -> float64 increment.
    """

    def per_head(x: torch.Tensor) -> torch.Tensor:
        return x.sum(0).reshape(n_layers, n_heads).double()

    return {
        "induction_mass": per_head(attention_mass[..., 0]),
        "induction_chance": per_head(attention_chance[..., 0]),
        "prev_mass": per_head(attention_mass[..., 1]),
        "prev_chance": per_head(attention_chance[..., 1]),
        "csm_earlier": per_head(csm_sums[..., 0]),
        "csm_row": per_head(csm_sums[..., 1]),
        "n_induction": query_counts[:, 0].sum().double(),
        "n_prev": query_counts[:, 1].sum().double(),
        "n_earlier": csm_pairs.sum().double(),
    }


def _induction_compute(state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Scalars from the :class:`InductionAccumulator` states, each (layer, head) float64; NaN where undefined."""

    def mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        return safe_divide(total, count.expand_as(total))

    csm_mean = mean(state["csm_earlier"], state["n_earlier"])
    csm_chance = mean(state["csm_row"], state["n_earlier"])
    return {
        "induction_score": mean(state["induction_mass"], state["n_induction"]),
        "induction_score_chance": mean(state["induction_chance"], state["n_induction"]),
        "prev_token_score": mean(state["prev_mass"], state["n_prev"]),
        "prev_token_score_chance": mean(state["prev_chance"], state["n_prev"]),
        "earlier_csm_mean": csm_mean,
        "earlier_csm_chance": csm_chance,
        "earlier_csm_ratio": safe_divide(csm_mean, csm_chance),
    }


class InductionAccumulator(Accumulator):
    """Streaming induction, previous-token and earlier-occurrence CSM statistics (module docstring).

    Args:
        n_layers, n_heads: model shape.

    States (float64 sums): attention mass and chance of both scores, CSM at earlier occurrences and
    of their rows (L, H); the numbers of induction queries, previous-token queries and
    earlier-occurrence pairs ().
    """

    reducers = (InductionAttentionSums, EarlierCSMSums)

    def __init__(self, n_layers: int, n_heads: int):
        super().__init__()
        self.n_layers, self.n_heads = n_layers, n_heads
        for name in ("induction_mass", "induction_chance", "prev_mass", "prev_chance", "csm_earlier", "csm_row"):
            self.add_sum(name, n_layers, n_heads)
        for name in ("n_induction", "n_prev", "n_earlier"):
            self.add_sum(name)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        attention = view.reduced(InductionAttentionSums)
        csm = view.reduced(EarlierCSMSums)
        self.fold(_induction_update(attention.mass, attention.chance, attention.counts, csm.sums, csm.pairs, self.n_layers, self.n_heads))

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64; NaN where undefined (e.g. no repeated token)."""
        return _induction_compute(self.metric_state)


__all__ = [
    "SCALARS",
    "InductionAccumulator",
    "InductionAttentionSums",
    "EarlierCSMSums",
    "earlier_positions",
    "earlier_occurrences",
    "induction_weights",
    "earlier_pair_weights",
]
