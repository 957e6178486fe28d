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
  where both positions hold valid tokens (i != j; diagonal NaN).
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
from attnsim.stats.pairs.blocks import POOL_ABOVE  # windows longer than this keep the mean matrix pooled

SCALARS = ("mean", "std", "tie_share", "degenerate_share", "degenerate")

DEGENERATE_TIE_SHARE = 0.1
"""A head is degenerate in a window where ties decide more than this share of its high pairs."""


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


def _csm_update(
    by_pair: torch.Tensor,
    sums: PairSums,
    valid: torch.Tensor,
    distance_onehot: torch.Tensor,
    high_by_distance: torch.Tensor,
    chance_by_distance: torch.Tensor,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`CSMAccumulator` states.

    Args:
        by_pair: (L, H, P) CSM of each pair summed over the batch's windows (invalid pairs 0).
        sums: the batch's :class:`~attnsim.stats.pairs.PairSums` (its shifted sums: ``shift``, ``shifted``, ``squares``,
            each (B, L, H)).
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
        **_moment_update(sums.shift, sums.shifted, sums.squares, valid.sum(-1)),
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
        **_moment_update(sums.shift, sums.shifted, sums.squares, valid_by_distance.sum(-1)),
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
    is symmetric; it is unfolded to T x T in :meth:`compute`), sums by distance
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
        self.fold(_tie_update(view.reduced(TieCounts).decided, view.high_count.transpose(0, 1)))
        if view.blockwise:
            self.fold(_csm_update_blocks(view, sums, self.cell))
            return
        valid = view.pair_weights[..., 0]  # (B, P)
        increments = _csm_update(sums.by_pair, sums, valid, view.distance_onehot, view.high_by_distance, view.chance_by_distance)
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
