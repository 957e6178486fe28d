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
"""

from __future__ import annotations

from typing import Dict

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView

SCALARS = (
    "jaccard",
    "jaccard_chance",
    "high_in_region_share",
    "csm_inside_mean",
    "csm_outside_mean",
    "csm_inside_outside_ratio",
)


class AttentionRegionAccumulator(Accumulator):
    """Streaming overlap of high-attention and high-CSM pairs per layer and head (see module docstring).

    Args:
        n_layers, n_heads: model shape.

    States (float64 sums, (L, H)): per-window Jaccard indices and their chance,
    windows counted, high pairs inside the region, high pairs, CSM sums and
    pair counts inside and outside the region.
    """

    def __init__(self, n_layers: int, n_heads: int):
        super().__init__()
        for name in ("jaccard_sum", "jaccard_chance_sum", "windows", "high_inside", "high", "csm_inside_sum", "csm_outside_sum", "n_inside", "n_outside"):
            self.add_sum(name, n_layers, n_heads)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        both = view.high_in_attention  # (L, B, H)
        k_csm = view.high_count.float()  # (L, B, H)
        k_region = view.high_attention_count  # (L, B, H)
        n = view.pair_weights[..., 0].sum(-1)  # (B,) valid pairs
        union = k_csm + k_region - both
        counted = union > 0
        expected = safe_divide(k_csm * k_region, n[None, :, None].expand_as(k_csm)).nan_to_num(0.0)
        self.jaccard_sum += safe_divide(both, union).nan_to_num(0.0).sum(1).double()
        self.jaccard_chance_sum += safe_divide(expected, k_csm + k_region - expected).nan_to_num(0.0).sum(1).double()
        self.windows += counted.sum(1).double()
        self.high_inside += both.sum(1).double()
        self.high += k_csm.sum(1).double()
        inside = view.attention_value_sums  # (L, B, H) CSM summed over the region (valid pairs only)
        total = view.class_value_sums[..., 0]  # (L, B, H) CSM summed over valid pairs
        self.csm_inside_sum += inside.sum(1).double()
        self.csm_outside_sum += (total - inside).sum(1).double()
        self.n_inside += k_region.sum(1).double()
        self.n_outside += (n[None, :, None] - k_region).sum(1).double()

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64; NaN where undefined."""
        inside = safe_divide(self.csm_inside_sum, self.n_inside)
        outside = safe_divide(self.csm_outside_sum, self.n_outside)
        return {
            "jaccard": safe_divide(self.jaccard_sum, self.windows),
            "jaccard_chance": safe_divide(self.jaccard_chance_sum, self.windows),
            "high_in_region_share": safe_divide(self.high_inside, self.high),
            "csm_inside_mean": inside,
            "csm_outside_mean": outside,
            "csm_inside_outside_ratio": safe_divide(inside, outside),
        }
