"""Corpus-level statistics of Context Similarity Matrices (arXiv:2512.21956, Sec. 3).

Per layer l and head h, over every window and every valid pair i < j:

- ``mean``, ``std``: mean and population standard deviation of CSM values. The variance is summed from shifted
  sums (:class:`~attnsim.stats.pairs.PairSums`: per window w a shift K_w near its mean, S_w = Σ (x - K_w) and
  Q_w = Σ (x - K_w)² over its n_w valid pairs), never from E[x²] - E[x]² on raw values: with the window mean
  m_w = K_w + S_w / n_w and its centred sum C_w = Q_w - S_w² / n_w, the corpus variance is
  (Σ_w C_w + Σ_w n_w m_w² - (Σ_w n_w m_w)² / N) / N (Chan, Golub & LeVeque 1983, the pairwise update written as
  sums so that batches and ranks add). Only the between-window term subtracts, in float64: its relative error is
  about 1e-16 (mean / std)², 1e-12 for a sink head whose CSM is 100 spreads from 0.
- ``matrix``: the corpus-mean CSM (T x T): at (i, j), the mean over windows
  where both positions hold valid tokens (i != j; diagonal NaN). Windows longer than
  :data:`~attnsim.stats.pairs.geometry.MATRIX_CELLS` (128) tokens keep it by cells of ``c = ceil(T / 128)`` tokens
  (G x G, G <= 128): cell (a, b) is the mean CSM over every valid pair i != j with i // c = a and j // c = b, of
  every window (the figure, the matrix's only use, shows at most ``plots.max_tokens`` cells per axis).
- Distance profile, for d = j - i in 1..T-1: ``distance_mean[d]``, the mean CSM
  at distance d, and ``distance_high_ratio[d]``, the number of high pairs at
  distance d divided by its chance value. Chance: in a window with k high
  pairs among n valid pairs, of which n_d are at distance d, a uniform choice
  of k pairs puts k·n_d/n of them at distance d; chance values are summed
  over windows.

Ties and degenerate heads (:func:`~attnsim.stats.pairs.selection.tie_decided`): in a window whose CSM is nearly
constant (an attention-sink head: nearly every token's Z is the same vector), many pairs lie within the float32
precision of the model's products of the k-th value, and the tie rule (lowest pair index), not the model, picks
among them. Per head:

- ``tie_share``: the share of the head's high pairs, over all windows, that ties decided;
- ``degenerate_share``: the share of windows in which ties decided more than :data:`DEGENERATE_TIE_SHARE` of the
  head's high pairs (the head is *degenerate* in that window);
- ``degenerate``: 1 for a head degenerate in more than half of the windows, else 0. Its layer mean
  (``csm/degenerate/L03``) is the share of that layer's heads flagged: the layer means of every high-pair
  statistic include the flagged heads, and this key marks how many there are.

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
from attnsim.stats.pairs import PairSums, PairView, TieCounts
from attnsim.stats.pairs.geometry import (  # windows longer than MATRIX_CELLS keep the mean matrix pooled
    pool_cell,
)

SCALARS = ("mean", "std", "tie_share", "degenerate_share", "degenerate")

DEGENERATE_TIE_SHARE = 0.1
"""A head is degenerate in a window where ties decide more than this share of its high pairs."""


CSMPairSums = PairSums
"""The ``csm`` statistics' per-batch sums by pair (``by_pair``, ``squares``): the view's
:class:`~attnsim.stats.pairs.PairSums`, which its compiled CSM walk folds in its kernel."""


def _moment_update(shift: torch.Tensor, shifted: torch.Tensor, squares: torch.Tensor, count: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Increments of the mean and variance states from one batch's shifted sums (module docstring).

    Args:
        shift: (B, L, H) the shift K_w of each window; shifted: (B, L, H) Σ (x - K_w); squares: (B, L, H) Σ (x - K_w)²,
            both over the window's valid pairs.
        count: (B,) valid pairs n_w of each window.

    Returns:
        ``csm_window_sum`` Σ n_w m_w, ``csm_window_sq`` Σ n_w m_w² and ``csm_centred`` Σ C_w, each (L, H) float64.
    """
    n = count.double()[:, None, None]  # (B, 1, 1)
    some = n > 0
    safe = n.clamp_min(1)
    shifted, squares = shifted.double(), squares.double()
    mean = shift.double() + shifted / safe  # (B, L, H) window means
    centred = squares - shifted * shifted / safe  # the shifted data's own two-term form, with K_w close to m_w

    def total(x: torch.Tensor) -> torch.Tensor:
        return torch.where(some, x, torch.zeros_like(x)).sum(0)

    return {"csm_window_sum": total(n * mean), "csm_window_sq": total(n * mean * mean), "csm_centred": total(centred)}


def _tie_update(decided: torch.Tensor, selected: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Increments of the tie states from one batch.

    Args:
        decided: (B, L, H) high pairs that ties decided (:class:`~attnsim.stats.pairs.TieCounts`).
        selected: (B, L, H) high pairs of each window and head.

    Returns:
        ``tie_decided`` and ``tie_selected`` (L, H) sums, ``degenerate_windows`` (L, H) windows where ties decided more
        than :data:`DEGENERATE_TIE_SHARE` of the choice, ``tie_windows`` (L, H) windows with high pairs.
    """
    decided, selected = decided.double(), selected.double()
    chosen = selected > 0
    return {
        "tie_decided": decided.sum(0),
        "tie_selected": selected.sum(0),
        "degenerate_windows": (chosen & (decided > DEGENERATE_TIE_SHARE * selected)).double().sum(0),
        "tie_windows": chosen.double().sum(0),
    }


def pair_windows(tokens: torch.Tensor) -> torch.Tensor:
    """(P,) float64 number of windows in which each pair i < j is valid (both its tokens enter statistics).

    Args:
        tokens: (batch, T) bool tokens that enter statistics (:attr:`~attnsim.stats.pairs.PairView.tokens`).
    """
    both = tokens.double().t() @ tokens.double()  # (T, T) windows with both positions valid
    rows, cols = torch.triu_indices(tokens.shape[-1], tokens.shape[-1], 1, device=both.device)
    return both[rows, cols]


def _csm_update(
    sums: PairSums,
    class_counts: torch.Tensor,
    class_counts_by_distance: torch.Tensor,
    tokens: torch.Tensor,
    high_by_distance: torch.Tensor,
    chance_by_distance: torch.Tensor,
    cell: int = 1,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`CSMAccumulator` states (arXiv:2512.21956, Sec. 3).

    Args:
        sums: the batch's :class:`~attnsim.stats.pairs.PairSums`: ``by_pair`` (L, H, P) (or ``pool_sum`` (L, H, G, G)
            and ``pool_count`` (G, G) when ``cell`` > 1), ``distance_sum`` (L, H, T) and the shifted sums ``shift``,
            ``shifted``, ``squares`` (B, L, H).
        class_counts: (B, 5) pairs of each :data:`~attnsim.stats.pairs.CLASS_TABLES` row (row 0: valid pairs);
            class_counts_by_distance: (B, 5, T) the same at each distance.
        tokens: (B, T) bool tokens that enter statistics (:func:`pair_windows`).
        high_by_distance, chance_by_distance: (L, H, T) high pairs by distance and their chance value.
        cell: tokens per side of a cell of the corpus-mean matrix (:func:`~attnsim.stats.pairs.geometry.pool_cell`).

    Returns:
        State name -> float64 increment.
    """
    valid = class_counts[:, 0]  # (B,) valid pairs of each window
    out = {
        "pair_count": valid.sum().double(),
        **_moment_update(sums.shift, sums.shifted, sums.squares, valid),
        "distance_sum": sums.distance_sum.double(),
        "distance_count": class_counts_by_distance[:, 0].sum(0).double(),  # valid pairs at each distance
        "high_by_distance": high_by_distance.double(),
        "chance_by_distance": chance_by_distance.double(),
    }
    if cell == 1:
        out["matrix_sum"], out["matrix_count"] = sums.by_pair.double(), pair_windows(tokens)
    else:  # long windows: the matrix by cells of tokens
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
    count = state["pair_count"]
    mean = safe_divide(state["csm_window_sum"], count)
    between = state["csm_window_sq"] - state["csm_window_sum"] * mean  # Σ n_w m_w² - N mean² (module docstring)
    var = safe_divide(state["csm_centred"] + between, count).clamp_min(0)
    edges = distance_bins(seq_len)  # one bin per distance up to 512, logarithmic beyond
    high, chance = bin_profile(state["high_by_distance"], edges), bin_profile(state["chance_by_distance"], edges)
    degenerate_share = safe_divide(state["degenerate_windows"], state["tie_windows"])
    return {
        "mean": mean,
        "std": var.sqrt(),
        "tie_share": safe_divide(state["tie_decided"], state["tie_selected"]),
        "degenerate_share": degenerate_share,
        "degenerate": (degenerate_share > 0.5).double().masked_fill(degenerate_share.isnan(), float("nan")),
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

    States (all sums, float64): pair count (), the window-mean sums and the centred sums of the variance (L, H),
    the corpus-mean matrix's sum (L, H, P) and count (P,) in pair space (the matrix
    is symmetric; it is unfolded to T x T in :meth:`compute`), or above
    :data:`~attnsim.stats.pairs.geometry.MATRIX_CELLS` tokens its sum (L, H, G, G) and count (G, G) by cells of tokens, sums by distance
    (L, H, T) and count by distance (T,), high pairs by distance (L, H, T) and
    their chance (L, H, T).
    """

    reducers = (CSMPairSums, TieCounts)

    def __init__(self, n_layers: int, n_heads: int, seq_len: int):
        super().__init__()
        self.seq_len = seq_len
        self.cell = pool_cell(seq_len)
        n_pairs = seq_len * (seq_len - 1) // 2
        self.add_sum("pair_count")
        self.add_sum("csm_window_sum", n_layers, n_heads)
        self.add_sum("csm_window_sq", n_layers, n_heads)
        self.add_sum("csm_centred", n_layers, n_heads)
        if self.cell == 1:
            self.add_sum("matrix_sum", n_layers, n_heads, n_pairs)
            self.add_sum("matrix_count", n_pairs)
        else:  # long windows: the matrix by cells of tokens (README, "Long contexts")
            cells = -(-seq_len // self.cell)
            self.add_sum("pool_sum", n_layers, n_heads, cells, cells)
            self.add_sum("pool_count", cells, cells)
        for name in ("tie_decided", "tie_selected", "degenerate_windows", "tie_windows"):
            self.add_sum(name, n_layers, n_heads)
        self.add_sum("distance_sum", n_layers, n_heads, seq_len)
        self.add_sum("distance_count", seq_len)
        self.add_sum("high_by_distance", n_layers, n_heads, seq_len)
        self.add_sum("chance_by_distance", n_layers, n_heads, seq_len)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        sums = view.reduced(CSMPairSums)
        self.fold(_tie_update(view.reduced(TieCounts).decided, view.high_count))
        self.fold(_csm_update(sums, view.class_counts, view.class_counts_by_distance, view.tokens, view.high_by_distance, view.chance_by_distance, self.cell))

    def compute(self) -> Dict[str, torch.Tensor]:
        """Statistics as float64 tensors (see :func:`_csm_compute`); for pooled windows ``matrix`` is (L, H, G, G) by cells of tokens."""
        state = dict(self.metric_state)
        if self.cell > 1:
            total, count = state.pop("pool_sum"), state.pop("pool_count")
            # pairs i < j sit in cells (i // c, j // c): the symmetric matrix adds the transposed cells
            state["pooled_matrix"] = safe_divide(total + total.transpose(-1, -2), (count + count.t()).expand_as(total))
        return _csm_compute(state, self.seq_len)
