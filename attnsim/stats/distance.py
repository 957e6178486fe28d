"""Where high-CSM pairs lie in distance, per layer and head (arXiv:2512.21956, distance claims).

The paper's layer-wise claim: early layers pair tokens far apart and spread
over all distances; middle layers concentrate near the diagonal; final layers
spread over the tokens of one sentence. Per layer l and head h, over every
window and its high pairs (see :mod:`attnsim.stats.pairs`), with d = j - i:

- ``high_mean_distance``: mean d of high pairs (tokens).
- ``short_range_share``: share of high pairs with d <= ``short_range`` (default 4).
- ``long_range_share``: share of high pairs with d >= T/2, T the window length.
- ``distance_spread``: Shannon entropy of the distance distribution of high
  pairs divided by the entropy of the chance distribution; 1 means as spread
  over distances as a uniform choice of pairs, below 1 concentrated (e.g. near
  the diagonal), above 1 more even than chance.
- Chance (``*_chance``): in a window with k high pairs among n valid pairs,
  n_d of them at distance d, a uniform choice of k pairs puts k * n_d / n of
  them at distance d; these expectations are summed over windows.
- Profile ``distance_high_ratio[d]``: high pairs at d divided by chance at d.

The ``csm`` finding has no distance scalars of its own: the ``csm`` experiment
runs this finding beside it (its profile ``distance_high_ratio`` is the same
table as the ``csm`` finding's).
"""

from __future__ import annotations

import math
from typing import Dict

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView

SCALARS = (
    "high_mean_distance",
    "high_mean_distance_chance",
    "short_range_share",
    "short_range_share_chance",
    "long_range_share",
    "long_range_share_chance",
    "distance_spread",
)


LINEAR_DISTANCES = 512
"""Distances up to this are profiled one by one; beyond it, in logarithmic bins (:func:`distance_bins`)."""
BINS_PER_OCTAVE = 8


def distance_bins(seq_len: int) -> torch.Tensor:
    """(K,) int64 lower edges of the distance (or position) bins of a profile over 0..T-1.

    Up to :data:`LINEAR_DISTANCES` one bin per distance (so windows of at most 512 tokens keep every
    distance, K = T); beyond it :data:`BINS_PER_OCTAVE` logarithmic bins per doubling, edges
    ``ceil(512 * 2^(k/8))`` (a profile of 8,192 tokens has 545 bins, not 8,192).
    """
    edges = list(range(min(seq_len, LINEAR_DISTANCES + 1)))
    k = 1
    while True:
        edge = math.ceil(LINEAR_DISTANCES * 2 ** (k / BINS_PER_OCTAVE))
        if edge >= seq_len:
            break
        if edge > edges[-1]:
            edges.append(edge)
        k += 1
    return torch.tensor(edges, dtype=torch.long)


def bin_profile(values: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Sums of ``values`` (..., T) over the bins with lower ``edges`` (K,): (..., K)."""
    seq_len = values.shape[-1]
    which = torch.bucketize(torch.arange(seq_len, device=values.device), edges.to(values.device), right=True) - 1  # (T,) bin of each index
    out = torch.zeros(*values.shape[:-1], len(edges), dtype=values.dtype, device=values.device)
    return out.index_add_(-1, which, values)


def entropy(counts: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of the distributions ``counts / counts.sum(-1)`` along the last axis.

    Args:
        counts: (..., K) non-negative counts.

    Returns:
        (...,), NaN where a distribution has no mass; 0 log 0 = 0.
    """
    total = counts.sum(-1, keepdim=True)
    p = safe_divide(counts, total.expand_as(counts))
    return -torch.special.xlogy(p, p).sum(-1)


def _distance_update(high_by_distance: torch.Tensor, chance_by_distance: torch.Tensor) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`DistanceAccumulator` states.

    Args:
        high_by_distance, chance_by_distance: (layer, head, T) high pairs at each distance d = j - i summed
            over the batch, and their chance value (the view's shared
            :attr:`~attnsim.stats.pairs.PairView.high_by_distance` and
            :attr:`~attnsim.stats.pairs.PairView.chance_by_distance`, also read by the ``csm`` statistics).

    Returns:
        State name -> float64 increment.
    """
    return {"high_by_distance": high_by_distance.double(), "chance_by_distance": chance_by_distance.double()}


def _distance_compute(high: torch.Tensor, chance: torch.Tensor, seq_len: int, short_range: int) -> Dict[str, torch.Tensor]:
    """Scalars (layer, head) float64 and the profile ``distance_high_ratio`` (layer, head, T), index 0 NaN.

    Args:
        high, chance: (layer, head, T) high pairs by distance and their chance value, summed over windows.
        seq_len: T (long range is d >= T/2).
        short_range: largest distance counted as short range (tokens).
    """
    distances = torch.arange(seq_len, dtype=torch.float64, device=high.device)
    short = (distances >= 1) & (distances <= short_range)
    long = distances >= seq_len / 2
    n_high, n_chance = high.sum(-1), chance.sum(-1)
    return {
        "high_mean_distance": safe_divide((high * distances).sum(-1), n_high),
        "high_mean_distance_chance": safe_divide((chance * distances).sum(-1), n_chance),
        "short_range_share": safe_divide(high[..., short].sum(-1), n_high),
        "short_range_share_chance": safe_divide(chance[..., short].sum(-1), n_chance),
        "long_range_share": safe_divide(high[..., long].sum(-1), n_high),
        "long_range_share_chance": safe_divide(chance[..., long].sum(-1), n_chance),
        "distance_spread": safe_divide(entropy(high), entropy(chance)),
        # beyond 512 tokens the profile is binned logarithmically (sums per bin, then the ratio)
        "distance_high_ratio": safe_divide(bin_profile(high, distance_bins(seq_len)), bin_profile(chance, distance_bins(seq_len))),
        "distance_bins": distance_bins(seq_len).to(high.device),
    }


class DistanceAccumulator(Accumulator):
    """Streaming distance statistics of high-CSM pairs per layer and head (see module docstring).

    Args:
        n_layers, n_heads: model shape.
        seq_len: window length T (distances 0..T-1; long range is d >= T/2).
        short_range: largest distance counted as short range (tokens).

    States (float64 sums): high pairs by distance and their chance value, (L, H, T) each.
    """

    def __init__(self, n_layers: int, n_heads: int, seq_len: int, short_range: int = 4):
        super().__init__()
        self.seq_len = seq_len
        self.short_range = short_range
        self.add_sum("high_by_distance", n_layers, n_heads, seq_len)
        self.add_sum("chance_by_distance", n_layers, n_heads, seq_len)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        self.fold(_distance_update(view.high_by_distance, view.chance_by_distance))

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars (layer, head) float64 and the profile ``distance_high_ratio`` (layer, head, T), index 0 NaN."""
        return _distance_compute(self.high_by_distance, self.chance_by_distance, self.seq_len, self.short_range)
