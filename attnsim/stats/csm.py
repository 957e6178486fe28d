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

The scalars of where high pairs lie in distance (``high_mean_distance``,
``short_range_share``, ``long_range_share`` and their chance values) are the
``distance`` finding's (:mod:`attnsim.stats.distance`), computed there once;
the ``csm`` experiment runs both findings.
"""

from __future__ import annotations

from typing import Dict

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView

SCALARS = ("mean", "std")


class CSMAccumulator(Accumulator):
    """Streaming CSM statistics per layer and head (see module docstring).

    Args:
        n_layers, n_heads: model shape.
        seq_len: window length T.

    States (all sums, float64): pair count (), CSM sum and sum of squares (L, H),
    the corpus-mean matrix's sum (L, H, P) and count (P,) in pair space (the matrix
    is symmetric; it is unfolded to T x T in :meth:`compute`), sums by distance
    (L, H, T) and count by distance (T,), high pairs by distance (L, H, T) and
    their chance (L, H, T).
    """

    def __init__(self, n_layers: int, n_heads: int, seq_len: int):
        super().__init__()
        self.seq_len = seq_len
        n_pairs = seq_len * (seq_len - 1) // 2
        self.add_sum("pair_count")
        self.add_sum("csm_sum", n_layers, n_heads)
        self.add_sum("csm_sq_sum", n_layers, n_heads)
        self.add_sum("matrix_sum", n_layers, n_heads, n_pairs)
        self.add_sum("matrix_count", n_pairs)
        self.add_sum("distance_sum", n_layers, n_heads, seq_len)
        self.add_sum("distance_count", seq_len)
        self.add_sum("high_by_distance", n_layers, n_heads, seq_len)
        self.add_sum("chance_by_distance", n_layers, n_heads, seq_len)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        valid = view.pair_weights[..., 0]  # (B, P)
        by_pair = view.value_by_pair  # (L, H, P): this batch's CSM summed over windows (invalid pairs add 0)
        self.pair_count += valid.sum().double()
        self.matrix_sum += by_pair.double()
        self.matrix_count += valid.sum(0).double()
        self.csm_sum += by_pair.sum(-1).double()
        self.csm_sq_sum += view.value_squares.sum(1).double()
        onehot = view.distance_onehot  # (P, T)
        self.distance_sum += (by_pair @ onehot).double()  # (L, H, P) @ (P, T)
        self.distance_count += (valid.sum(0) @ onehot).double()  # valid pairs at each distance
        self.high_by_distance += view.high_by_distance.double()
        self.chance_by_distance += view.chance_by_distance.double()

    def matrix(self) -> torch.Tensor:
        """(L, H, T, T) float64 corpus-mean CSM: the pair-space means written at (i, j) and (j, i); NaN on
        the diagonal and wherever no window had both positions valid."""
        mean = safe_divide(self.matrix_sum, self.matrix_count.expand_as(self.matrix_sum))  # (L, H, P)
        rows, cols = torch.triu_indices(self.seq_len, self.seq_len, 1, device=mean.device)
        matrix = torch.full((*mean.shape[:-1], self.seq_len, self.seq_len), float("nan"), dtype=mean.dtype, device=mean.device)
        matrix[..., rows, cols] = mean
        matrix[..., cols, rows] = mean
        return matrix

    def compute(self) -> Dict[str, torch.Tensor]:
        """Statistics as float64 tensors: ``mean`` and ``std`` (L, H), ``matrix`` (L, H, T, T),
        ``distance_mean`` and ``distance_high_ratio`` (L, H, T) indexed by distance (index 0 is NaN)."""
        mean = safe_divide(self.csm_sum, self.pair_count)
        var = (safe_divide(self.csm_sq_sum, self.pair_count) - mean**2).clamp_min(0)
        return {
            "mean": mean,
            "std": var.sqrt(),
            "matrix": self.matrix(),
            "distance_mean": safe_divide(self.distance_sum, self.distance_count),
            "distance_high_ratio": safe_divide(self.high_by_distance, self.chance_by_distance),
        }
