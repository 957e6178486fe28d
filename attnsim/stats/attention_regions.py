"""Attention-delineated regions of the CSM, per layer and head (arXiv:2512.21956).

The paper reads high-CSM regions against the attention map. Per window, layer
and head, the *high-attention region* is the set of the top ``k`` valid
pairs (i < j) by ``max(A[i, j], A[j, i])``, the attention probability between
the two tokens in either direction, with the same ``k = max(1,
floor(top_fraction * n + 0.5))`` (rounded half up) as the top-fraction rule for high-CSM pairs (see
:mod:`attnsim.stats.pairs`). Per layer l and head h:

- ``jaccard``: mean over windows of |C ∩ R| / |C ∪ R|, C the high-CSM pairs and
  R the high-attention pairs of the window (windows where both are empty are left out).
- ``jaccard_chance``: the mean over windows of E / (|C| + |R| - E), with
  E = |C| |R| / n the expected overlap of two uniform random subsets of the n
  valid pairs (a ratio of expectations, close to the expected Jaccard for large n).
- ``high_in_region_share``: share of high-CSM pairs inside R, pooled over windows.
- ``csm_inside_mean``, ``csm_outside_mean``: mean CSM of valid pairs inside and
  outside R (CSM units); ``csm_inside_outside_ratio`` their ratio (NaN when
  the outside mean is 0).

Causal (decoder) models: a query never attends to a later key (A[i, j] = 0 for
i < j), so ``max(A[i, j], A[j, i]) = A[j, i]``: a pair's attention is the
*later* token's attention to the earlier one, the only direction that exists.
The region is then the pairs the later token reads most; the statistics need
no other change (CSM is symmetric and defined for every pair).
"""

from __future__ import annotations

from typing import Dict, Mapping

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import ChunkReducer, PairView, Piece

SCALARS = (
    "jaccard",
    "jaccard_chance",
    "high_in_region_share",
    "csm_inside_mean",
    "csm_outside_mean",
    "csm_inside_outside_ratio",
)


class RegionInsideSums(ChunkReducer):
    """CSM summed over each window's high-attention region, folded piece by piece in the view's CSM walk.

    Written once for every path: a piece holds the CSM of one contiguous range of pairs (all of them on the dense
    path, those of one block of rows on the blockwise path); the region's pairs in that range are gathered from it.

    Attributes:
        inside: (batch, layer, head) float64 sum of the (float32) CSM over the high-attention pairs (valid pairs
            only). Summed in float64 so that a window's sum does not depend on its batch: a float32 sum's rounding
            follows the batch's largest region (the padded length of ``attention_index``), and means of CSM values
            that cancel showed it (1.6e-6 relative between batch sizes 1 and 2).

    Raises:
        ValueError: the batch was captured without attention probabilities.
    """

    source = "csm"

    def __init__(self, view: PairView) -> None:
        self.region = view.attention_index  # (B, L, H, S) with the sentinel P in unused slots
        self.inside = torch.zeros(view.batch_size, view.n_layers, view.n_heads, dtype=torch.float64, device=view.device)

    def update(self, view: PairView, piece: Piece) -> None:
        (p0, p1), values = piece.pairs, piece.values  # values (c, l, H, p1 - p0)
        if p1 <= p0:
            return
        region = self.region[piece.windows, piece.layers]  # (c, l, H, S) ascending, the sentinel P after the pairs
        # the region's pairs in the piece's range are one run of slots per head, found by bisection: a blockwise
        # walk reads each listed pair once over its blocks (bounded memory at long T), the dense walk every slot
        ends = torch.tensor([p0, p1], dtype=region.dtype, device=region.device).expand(*region.shape[:-1], 2).contiguous()
        first, last = torch.searchsorted(region.contiguous(), ends).unbind(-1)  # (c, l, H)
        width = int((last - first).max())
        if width == 0:
            return
        run = torch.arange(width, device=region.device)
        slots = (first[..., None] + run).clamp_max(region.shape[-1] - 1)  # (c, l, H, width)
        held = run < (last - first)[..., None]
        local = (region.gather(-1, slots).long() - p0).clamp(0, p1 - p0 - 1)
        picked = values.gather(-1, local)
        self.inside[piece.windows, piece.layers] += torch.where(held, picked, 0.0).sum(-1, dtype=torch.float64)


def _region_update(
    both: torch.Tensor,
    high_count: torch.Tensor,
    region_count: torch.Tensor,
    valid: torch.Tensor,
    inside: torch.Tensor,
    valid_sums: torch.Tensor,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`AttentionRegionAccumulator` states.

    Args:
        both: (B, L, H) number of pairs both high-CSM and high-attention.
        high_count: (B, L, H) number of high-CSM pairs; region_count: (B, L, H) of high-attention pairs.
        valid: (B,) number of valid pairs of each window.
        inside: (B, L, H) CSM summed over the high-attention pairs (float64); valid_sums: (B, L, H) over all valid pairs.

    Returns:
        State name -> float64 increment, each (L, H).
    """
    k_csm = high_count.float()  # (B, L, H)
    n = valid.float()  # (B,) valid pairs
    union = k_csm + region_count - both
    counted = union > 0
    expected = safe_divide(k_csm * region_count, n[:, None, None].expand_as(k_csm)).nan_to_num(0.0)
    return {
        # per-window values summed over the batch in float64, so that the sums do not depend on how windows are batched
        "jaccard_sum": safe_divide(both, union).nan_to_num(0.0).double().sum(0),
        "jaccard_chance_sum": safe_divide(expected, k_csm + region_count - expected).nan_to_num(0.0).double().sum(0),
        "windows": counted.sum(0).double(),
        "high_inside": both.sum(0).double(),
        "high": k_csm.sum(0).double(),
        "csm_inside_sum": inside.sum(0),
        "csm_outside_sum": (valid_sums.double() - inside).sum(0),
        "n_inside": region_count.sum(0).double(),
        "n_outside": (n[:, None, None] - region_count).sum(0).double(),
    }


def _region_compute(state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Scalars from the :class:`AttentionRegionAccumulator` states, each (layer, head) float64; NaN where undefined."""
    inside = safe_divide(state["csm_inside_sum"], state["n_inside"])
    outside = safe_divide(state["csm_outside_sum"], state["n_outside"])
    return {
        "jaccard": safe_divide(state["jaccard_sum"], state["windows"]),
        "jaccard_chance": safe_divide(state["jaccard_chance_sum"], state["windows"]),
        "high_in_region_share": safe_divide(state["high_inside"], state["high"]),
        "csm_inside_mean": inside,
        "csm_outside_mean": outside,
        "csm_inside_outside_ratio": safe_divide(inside, outside),
    }


class AttentionRegionAccumulator(Accumulator):
    """Streaming overlap of high-attention and high-CSM pairs per layer and head (see module docstring).

    Args:
        n_layers, n_heads: model shape.

    States (float64 sums, (L, H)): per-window Jaccard indices and their chance,
    windows counted, high pairs inside the region, high pairs, CSM sums and
    pair counts inside and outside the region.
    """

    reducers = (RegionInsideSums,)

    def __init__(self, n_layers: int, n_heads: int):
        super().__init__()
        for name in ("jaccard_sum", "jaccard_chance_sum", "windows", "high_inside", "high", "csm_inside_sum", "csm_outside_sum", "n_inside", "n_outside"):
            self.add_sum(name, n_layers, n_heads)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        inside = view.reduced(RegionInsideSums).inside  # (B, L, H)
        total = view.class_value_sums[..., 0]  # (B, L, H) CSM summed over valid pairs, shared with other statistics
        self.fold(_region_update(view.high_in_attention, view.high_count, view.high_attention_count, view.class_counts[:, 0], inside, total))

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64; NaN where undefined."""
        return _region_compute(self.metric_state)
