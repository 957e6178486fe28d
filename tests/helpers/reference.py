"""Dense reference code for the tests: every pair quantity recomputed from whole (T x T) matrices in float64.

The library never materialises a batch's CSM or attention in pair space (see
:mod:`attnsim.stats.pairs.view`); these functions do, in the plainest way, so that
the streaming view can be checked against them:

- :class:`HandView`: a :class:`~attnsim.stats.pairs.PairView` whose CSM is written by hand;
- :func:`pair_values`, :func:`attention_pair_values`: matrices gathered into pair space;
- :func:`top_fraction_pairs`, :func:`zscore_pairs`: the high-pair rules on dense values, with the tie
  rule (a tie at the k-th value goes to the lowest pair index) done by a stable sort;
- :func:`dense_reference`: every shared quantity of a view, from its inputs.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch

from attnsim.stats.pairs import PairView, context_similarity, pair_indices


class HandView(PairView):
    """A PairView whose CSM is ``csm`` (layer, batch, head, T, T) instead of z zᵀ (the statistics read
    CSM values, high pairs and the batch, never the vectors)."""

    def __init__(self, csm: torch.Tensor, batch: Dict[str, torch.Tensor], attention: Optional[torch.Tensor] = None, **settings):
        n_layers, batch_size, n_heads, seq_len, _ = csm.shape
        super().__init__(torch.zeros(n_layers, batch_size, n_heads, seq_len, 1), batch, attention, **settings)
        self.hand_csm = csm

    _narrow_csm = False  # the CSM is given, not a float32 product to certify

    def _csm_chunk(self, start: int, stop: int) -> torch.Tensor:
        return self.hand_csm.transpose(0, 1)[start:stop].float()


def pair_values(matrices: torch.Tensor) -> torch.Tensor:
    """(..., T, T) -> (..., P): the entries (i, j), i < j, in pair order."""
    pairs = pair_indices(matrices.shape[-1])
    return matrices[..., pairs[0], pairs[1]]


def attention_pair_values(attention: torch.Tensor) -> torch.Tensor:
    """(..., T, T) attention -> (..., P) ``max(A[i, j], A[j, i])`` of each pair i < j."""
    return torch.maximum(pair_values(attention), pair_values(attention.transpose(-1, -2)))


def top_fraction_pairs(values: torch.Tensor, valid: torch.Tensor, top_fraction: float) -> torch.Tensor:
    """(..., P) bool: the top ``max(1, floor(top_fraction * n + 0.5))`` valid pairs of each row by value,
    a tie at the k-th value to the lowest pair index.

    Args:
        values: (..., P); valid: bool broadcastable to ``values``.
    """
    valid = valid.expand_as(values)
    ranked = values.double().masked_fill(~valid, float("-inf"))
    order = torch.sort(ranked, dim=-1, descending=True, stable=True).indices  # equal values keep index order
    n = valid.sum(-1, keepdim=True)
    k = torch.where(n > 0, torch.floor(top_fraction * n.double() + 0.5).long().clamp_min(1), 0)
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(values.shape[-1]).expand_as(order))
    return (rank < k) & valid


def zscore_pairs(values: torch.Tensor, valid: torch.Tensor, threshold: float) -> torch.Tensor:
    """(..., P) bool: valid pairs whose z-score within their row (population std over valid pairs) exceeds ``threshold``."""
    valid = valid.expand_as(values)
    v = values.double()
    n = valid.sum(-1, keepdim=True).clamp_min(1)
    mean = torch.where(valid, v, 0.0).sum(-1, keepdim=True) / n
    std = (torch.where(valid, v - mean, 0.0) ** 2).sum(-1, keepdim=True).div(n).sqrt()
    return ((v - mean) / std.clamp_min(1e-12) > threshold) & valid


def pair_sums(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(layer, batch, head, P) values, (batch, P, K) weights -> (layer, batch, head, K) ``sum_p values * weights``."""
    return torch.einsum("lbhp,bpk->lbhk", values.double(), weights.double())


def centred_squares(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(L, B, H, P) pair values, (B, P) bool valid -> (L, B, H) Σ (x - mean)² over each window's valid pairs (two passes)."""
    weight = valid[None, :, None].double()
    mean = (values * weight).sum(-1, keepdim=True) / weight.sum(-1, keepdim=True).clamp_min(1)
    return (((values - mean) * weight) ** 2).sum(-1)


def dense_reference(
    vectors: torch.Tensor, batch: Dict[str, torch.Tensor], attention: torch.Tensor, top_fraction: float, include_special: bool = True
) -> Dict[str, torch.Tensor]:
    """Every shared quantity of a PairView (and the statistics' per-chunk sums), recomputed densely in float64.

    Args:
        vectors: (layer, batch, head, T, d); attention: (layer, batch, head, T, T).

    Returns:
        ``high`` and ``high_attention`` (L, B, H, P) bool; ``class_sums`` (L, B, H, 5); ``by_pair`` (L, H, P);
        ``squares`` (L, B, H) the valid values' squared deviations from their window's mean; ``inside`` (L, B, H) CSM over the high-attention pairs; ``key_mass`` (L, B, H, T),
        ``entropy`` and ``distance`` (L, B, H) attention sums over statistic queries and real keys.
    """
    seq_len = vectors.shape[-2]
    pairs = pair_indices(seq_len)
    real = batch["attention_mask"].bool()
    tokens = real & ~batch["special_mask"].bool() if not include_special else real
    valid = tokens[:, pairs[0]] & tokens[:, pairs[1]]  # (B, P)
    csm = context_similarity(vectors.double())
    values = torch.where(valid[None, :, None], pair_values(csm), 0.0)  # (L, B, H, P)
    first, second = batch["sentence_ids"][:, pairs[0]], batch["sentence_ids"][:, pairs[1]]
    content = real & ~batch["special_mask"].bool()
    if "unknown_mask" in batch:
        content = content & ~batch["unknown_mask"].bool()
    identical = (batch["input_ids"][:, pairs[0]] == batch["input_ids"][:, pairs[1]]) & content[:, pairs[0]] & content[:, pairs[1]] & valid
    classes = torch.stack(
        [valid, (first == second) & (first >= 0) & valid, (first != second) & (first >= 0) & (second >= 0) & valid, identical, valid & ~identical], -1
    )
    a = attention.double()
    high_attention = top_fraction_pairs(attention_pair_values(a), valid[None, :, None], top_fraction)
    queries, keys = tokens.double(), real.double()
    weight = queries[:, :, None] * keys[:, None, :]  # (B, T, T)
    position = torch.arange(seq_len, dtype=torch.float64)
    gap = (position[:, None] - position[None, :]).abs()
    plogp = torch.special.xlogy(a, a)
    return {
        "high": top_fraction_pairs(values, valid[None, :, None], top_fraction),
        "high_attention": high_attention,
        "class_sums": pair_sums(values, classes.double()),
        "by_pair": values.sum(1),
        "squares": centred_squares(values, valid),
        "inside": torch.where(high_attention, values, 0.0).sum(-1),
        "key_mass": torch.einsum("bi,lbhij->lbhj", queries, a),
        "entropy": -(plogp * weight[None, :, None]).sum((-1, -2)),
        "distance": (a * (weight * gap)[None, :, None]).sum((-1, -2)),
    }
