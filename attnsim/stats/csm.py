"""Corpus-level statistics of Context Similarity Matrices (arXiv:2512.21956, Sec. 3).

Per layer l and head h, over every window and every valid pair i < j:

- ``mean``, ``std``: mean and population standard deviation of CSM values.
- ``matrix``: the corpus-mean CSM (T x T): at (i, j), the mean over windows
  where both positions hold valid tokens (i != j; diagonal NaN).
- Distance profile, for d = j - i in 1..T-1: ``distance_mean[d]``, the mean CSM
  at distance d, and ``distance_high_ratio[d]``, the number of high pairs at
  distance d divided by its chance value. Chance: in a window with k high
  pairs among n valid pairs, of which n_d are at distance d, a uniform choice
  of k pairs puts k·n_d/n of them at distance d; chance values are summed
  over windows.
- Scalars from the profile, each beside its chance value (``*_chance``):
  ``high_mean_distance`` (mean d of high pairs, tokens), ``short_range_share``
  (share of high pairs with d <= short_range, default 4) and
  ``long_range_share`` (share with d >= T/2, T = window length).
"""

from __future__ import annotations

from typing import Dict

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView

SCALARS = (
    "mean",
    "std",
    "high_mean_distance",
    "high_mean_distance_chance",
    "short_range_share",
    "short_range_share_chance",
    "long_range_share",
    "long_range_share_chance",
)


class CSMAccumulator(Accumulator):
    """Streaming CSM statistics per layer and head (see module docstring).

    Args:
        n_layers, n_heads: model shape.
        seq_len: window length T.
        short_range: largest distance counted as short range (tokens).

    States (all sums, float64): pair count (), CSM sum and sum of squares (L, H),
    matrix sum (L, H, T, T) and count (T, T), sums by distance (L, H, T) and
    count by distance (T,), high pairs by distance (L, H, T) and their chance (L, H, T).
    """

    def __init__(self, n_layers: int, n_heads: int, seq_len: int, short_range: int = 4):
        super().__init__()
        self.seq_len = seq_len
        self.short_range = short_range
        self.add_sum("pair_count")
        self.add_sum("csm_sum", n_layers, n_heads)
        self.add_sum("csm_sq_sum", n_layers, n_heads)
        self.add_sum("matrix_sum", n_layers, n_heads, seq_len, seq_len)
        self.add_sum("matrix_count", seq_len, seq_len)
        self.add_sum("distance_sum", n_layers, n_heads, seq_len)
        self.add_sum("distance_count", seq_len)
        self.add_sum("high_by_distance", n_layers, n_heads, seq_len)
        self.add_sum("chance_by_distance", n_layers, n_heads, seq_len)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        weight = view.pair_mask.to(view.values.dtype)  # (B, P)
        masked = view.values * weight[None, :, None, :]  # (L, B, H, P)
        self.pair_count += weight.sum().double()
        self.csm_sum += masked.sum((1, 3)).double()
        self.csm_sq_sum += (masked * view.values).sum((1, 3)).double()
        onehot = view.distance_onehot  # (P, T)
        self.distance_sum += (masked.sum(1) @ onehot).double()  # (L, H, P) @ (P, T)
        pairs_by_distance = weight @ onehot  # (B, T): valid pairs of each window at each distance
        self.distance_count += pairs_by_distance.sum(0).double()
        self.high_by_distance += (view.high.sum(1).to(onehot.dtype) @ onehot).double()
        n_pairs = weight.sum(-1, keepdim=True)  # (B, 1)
        share = safe_divide(pairs_by_distance, n_pairs).nan_to_num(0.0)  # (B, T): n_d / n
        self.chance_by_distance += torch.einsum("lbh,bt->lht", view.high_count.to(share.dtype), share).double()
        tokens = view.tokens.to(view.csm.dtype)  # (B, T)
        valid = tokens[:, :, None] * tokens[:, None, :]  # (B, T, T)
        valid.diagonal(dim1=-2, dim2=-1).zero_()
        self.matrix_sum += torch.einsum("lbhij,bij->lhij", view.csm, valid).double()
        self.matrix_count += valid.sum(0).double()

    def compute(self) -> Dict[str, torch.Tensor]:
        """Statistics as float64 tensors: scalars (L, H), ``matrix`` (L, H, T, T),
        ``distance_mean`` and ``distance_high_ratio`` (L, H, T) indexed by distance (index 0 is NaN)."""
        mean = safe_divide(self.csm_sum, self.pair_count)
        var = (safe_divide(self.csm_sq_sum, self.pair_count) - mean**2).clamp_min(0)
        distances = torch.arange(self.seq_len, dtype=torch.float64, device=mean.device)
        short = (distances >= 1) & (distances <= self.short_range)
        long = distances >= self.seq_len / 2
        high, chance = self.high_by_distance, self.chance_by_distance
        n_high, n_chance = high.sum(-1), chance.sum(-1)
        return {
            "mean": mean,
            "std": var.sqrt(),
            "high_mean_distance": safe_divide((high * distances).sum(-1), n_high),
            "high_mean_distance_chance": safe_divide((chance * distances).sum(-1), n_chance),
            "short_range_share": safe_divide(high[..., short].sum(-1), n_high),
            "short_range_share_chance": safe_divide(chance[..., short].sum(-1), n_chance),
            "long_range_share": safe_divide(high[..., long].sum(-1), n_high),
            "long_range_share_chance": safe_divide(chance[..., long].sum(-1), n_chance),
            "matrix": safe_divide(self.matrix_sum, self.matrix_count),
            "distance_mean": safe_divide(self.distance_sum, self.distance_count),
            "distance_high_ratio": safe_divide(high, chance),
        }
