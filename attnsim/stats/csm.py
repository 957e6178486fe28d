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

from typing import Dict, Mapping

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.distance import bin_profile, distance_bins
from attnsim.stats.pairs import PairSums, PairView
from attnsim.stats.pairs.blocks import POOL_ABOVE  # windows longer than this keep the mean matrix pooled

SCALARS = ("mean", "std")


CSMPairSums = PairSums
"""The ``csm`` statistics' per-batch sums by pair (``by_pair``, ``squares``): the view's
:class:`~attnsim.stats.pairs.PairSums`, which its compiled CSM walk folds in its kernel."""


def pool_cell(seq_len: int) -> int:
    """Tokens per side of a cell of the corpus-mean matrix: 1 up to :data:`POOL_ABOVE` tokens, else ``ceil(T / 512)``."""
    return 1 if seq_len <= POOL_ABOVE else -(-seq_len // POOL_ABOVE)


def _pool_pairs(values: torch.Tensor, pairs: torch.Tensor, seq_len: int, cell: int) -> torch.Tensor:
    """(..., P) pair values summed into (..., G, G) cells of ``cell`` tokens (pair (i, j) in cell (i // c, j // c))."""
    cells = -(-seq_len // cell)
    target = (pairs[0] // cell) * cells + pairs[1] // cell  # (P,)
    flat = values.reshape(-1, values.shape[-1]).double()
    out = torch.zeros(flat.shape[0], cells * cells, dtype=torch.float64, device=values.device)
    out.index_add_(1, target, flat)
    return out.reshape(*values.shape[:-1], cells, cells)


def _csm_update(
    by_pair: torch.Tensor,
    squares: torch.Tensor,
    valid: torch.Tensor,
    distance_onehot: torch.Tensor,
    high_by_distance: torch.Tensor,
    chance_by_distance: torch.Tensor,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`CSMAccumulator` states.

    Args:
        by_pair: (L, H, P) CSM of each pair summed over the batch's windows (invalid pairs 0).
        squares: (L, B, H) sum of squared CSM values over each window's valid pairs.
        valid: (B, P) float 0/1 valid pairs.
        distance_onehot: (P, T) one-hot of each pair's distance.
        high_by_distance, chance_by_distance: (L, H, T) high pairs by distance and their chance value.

    Returns:
        State name -> float64 increment.
    """
    return {
        "pair_count": valid.sum().double(),
        "matrix_sum": by_pair.double(),
        "matrix_count": valid.sum(0).double(),
        "csm_sum": by_pair.sum(-1).double(),
        "csm_sq_sum": squares.sum(1).double(),
        "distance_sum": (by_pair @ distance_onehot).double(),  # (L, H, P) @ (P, T)
        "distance_count": (valid.sum(0) @ distance_onehot).double(),  # valid pairs at each distance
        "high_by_distance": high_by_distance.double(),
        "chance_by_distance": chance_by_distance.double(),
    }


def _csm_update_blocks(view: PairView, sums: CSMPairSums, cell: int) -> Dict[str, torch.Tensor]:
    """:func:`_csm_update` from a :class:`~attnsim.stats.pairs.blocks.BlockPairView`: the same increments, from its
    walk's sums and its valid pairs counted by distance (no pair-space tensor unless the matrix is kept per pair)."""
    valid_by_distance = view.by_distance[:, 0]  # (B, T) float64
    out = {
        "pair_count": valid_by_distance.sum(),
        "csm_sum": view.class_value_sums[..., 0].double().sum(1),
        "csm_sq_sum": sums.squares.sum(0).double(),
        "distance_sum": sums.distance_sum,
        "distance_count": valid_by_distance.sum(0),
        "high_by_distance": view.high_by_distance.double(),
        "chance_by_distance": view.chance_by_distance.double(),
    }
    if cell == 1:
        tokens = view.tokens.double()  # (B, T): a pair is valid in a window where both its tokens are
        both = tokens.t() @ tokens  # (T, T) windows with both positions valid
        rows, cols = torch.triu_indices(view.seq_len, view.seq_len, 1, device=both.device)
        out["matrix_sum"] = sums.by_pair.double()
        out["matrix_count"] = both[rows, cols]
    else:
        out["pool_sum"], out["pool_count"] = sums.pool_sum, sums.pool_count
    return out


def _csm_matrix(matrix_sum: torch.Tensor, matrix_count: torch.Tensor, seq_len: int) -> torch.Tensor:
    """(L, H, T, T) float64 corpus-mean CSM from its pair-space sums (L, H, P) and counts (P,): written at
    (i, j) and (j, i); NaN on the diagonal and wherever no window had both positions valid."""
    mean = safe_divide(matrix_sum, matrix_count.expand_as(matrix_sum))  # (L, H, P)
    rows, cols = torch.triu_indices(seq_len, seq_len, 1, device=mean.device)
    matrix = torch.full((*mean.shape[:-1], seq_len, seq_len), float("nan"), dtype=mean.dtype, device=mean.device)
    matrix[..., rows, cols] = mean
    matrix[..., cols, rows] = mean
    return matrix


def _csm_compute(state: Mapping[str, torch.Tensor], seq_len: int) -> Dict[str, torch.Tensor]:
    """Statistics from the :class:`CSMAccumulator` states: ``mean`` and ``std`` (L, H), ``matrix`` (L, H, T, T),
    ``distance_mean`` and ``distance_high_ratio`` (L, H, T) indexed by distance (index 0 is NaN); float64."""
    mean = safe_divide(state["csm_sum"], state["pair_count"])
    var = (safe_divide(state["csm_sq_sum"], state["pair_count"]) - mean**2).clamp_min(0)
    edges = distance_bins(seq_len)  # one bin per distance up to 512, logarithmic beyond
    high, chance = bin_profile(state["high_by_distance"], edges), bin_profile(state["chance_by_distance"], edges)
    return {
        "mean": mean,
        "std": var.sqrt(),
        "matrix": state["pooled_matrix"] if "pooled_matrix" in state else _csm_matrix(state["matrix_sum"], state["matrix_count"], seq_len),
        "distance_mean": safe_divide(bin_profile(state["distance_sum"], edges), bin_profile(state["distance_count"], edges)),
        "distance_high_ratio": safe_divide(high, chance),
        "distance_bins": edges.to(high.device),
    }


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

    reducers = (CSMPairSums,)

    def __init__(self, n_layers: int, n_heads: int, seq_len: int):
        super().__init__()
        self.seq_len = seq_len
        self.cell = pool_cell(seq_len)
        n_pairs = seq_len * (seq_len - 1) // 2
        self.add_sum("pair_count")
        self.add_sum("csm_sum", n_layers, n_heads)
        self.add_sum("csm_sq_sum", n_layers, n_heads)
        if self.cell == 1:
            self.add_sum("matrix_sum", n_layers, n_heads, n_pairs)
            self.add_sum("matrix_count", n_pairs)
        else:  # long windows: the matrix by cells of tokens (README, "Long contexts")
            cells = -(-seq_len // self.cell)
            self.add_sum("pool_sum", n_layers, n_heads, cells, cells)
            self.add_sum("pool_count", cells, cells)
        self.add_sum("distance_sum", n_layers, n_heads, seq_len)
        self.add_sum("distance_count", seq_len)
        self.add_sum("high_by_distance", n_layers, n_heads, seq_len)
        self.add_sum("chance_by_distance", n_layers, n_heads, seq_len)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        sums = view.reduced(CSMPairSums)
        if view.blockwise:
            self.fold(_csm_update_blocks(view, sums, self.cell))
            return
        valid = view.pair_weights[..., 0]  # (B, P)
        increments = _csm_update(sums.by_pair, sums.squares.transpose(0, 1), valid, view.distance_onehot, view.high_by_distance, view.chance_by_distance)
        if self.cell > 1:  # a long window on the dense path: pool its pair-space sums
            increments["pool_sum"] = _pool_pairs(increments.pop("matrix_sum"), view.pairs, view.seq_len, self.cell)
            increments["pool_count"] = _pool_pairs(increments.pop("matrix_count"), view.pairs, view.seq_len, self.cell)
        self.fold(increments)

    def compute(self) -> Dict[str, torch.Tensor]:
        """Statistics as float64 tensors (see :func:`_csm_compute`); for pooled windows ``matrix`` is (L, H, G, G) by cells of tokens."""
        state = dict(self.metric_state)
        if self.cell > 1:
            total, count = state.pop("pool_sum"), state.pop("pool_count")
            # pairs i < j sit in cells (i // c, j // c): the symmetric matrix adds the transposed cells
            state["pooled_matrix"] = safe_divide(total + total.transpose(-1, -2), (count + count.t()).expand_as(total))
        return _csm_compute(state, self.seq_len)
