"""attnsim.stats.attention_regions: its functions on hand-made tensors.

Each statistic's plain ``_update``/``_compute`` functions, called with hand-made tensors (no view, no model).

One window (B = 1), one layer, T = 4 unless said: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) are pair
indices 0..5 at distances 1 2 3 1 2 1; index 6 (P) is the sentinel of unused slots.
"""

from __future__ import annotations

import math

import torch

from attnsim.stats.attention_regions import AttentionRegionAccumulator, _region_compute, _region_update
from tests.helpers.findings import CLS, SEP, batch_of, symmetric, view_from_csm
from tests.helpers.pairs import approx


def test_attention_regions():
    state = _region_update(
        torch.tensor([[[1.0]]]), torch.tensor([[[2]]]), torch.tensor([[[2.0]]]), torch.tensor([6.0]), torch.tensor([[[7.0]]]), torch.tensor([[[10.0]]])
    )
    # union 3; chance overlap E = 2 * 2 / 6; outside: CSM 3 over 4 pairs
    approx(
        _region_compute(state),
        {
            "jaccard": 1 / 3,
            "jaccard_chance": (2 / 3) / (4 - 2 / 3),
            "high_in_region_share": 0.5,
            "csm_inside_mean": 3.5,
            "csm_outside_mean": 0.75,
            "csm_inside_outside_ratio": 14 / 3,
        },
    )


def test_attention_region_statistics_by_hand():
    # T = 5, 10 valid pairs, top_fraction 0.2 -> 2 high-CSM pairs (0,1) (2,4) and 2 high-attention pairs
    csm = symmetric(5, {(0, 1): 10, (2, 4): 9, (1, 2): 4, (0, 2): 1, (0, 3): 2, (0, 4): 3, (1, 3): 1, (1, 4): 0, (2, 3): 5, (3, 4): 3})
    attention = torch.full((5, 5), 0.01)
    attention[1, 0] = 0.7  # pair (0, 1), from query 1 to key 0
    attention[1, 2] = 0.6  # pair (1, 2)
    view = view_from_csm(csm[None, None, None], batch_of(torch.tensor([[CLS, 5, 6, 7, SEP]])), attention[None, None, None], top_fraction=0.2)
    acc = AttentionRegionAccumulator(1, 1)
    acc.update(view)
    out = {k: float(v) for k, v in acc.compute().items()}
    assert math.isclose(out["jaccard"], 1 / 3, rel_tol=1e-6)  # {(0,1),(2,4)} vs {(0,1),(1,2)}
    assert math.isclose(out["jaccard_chance"], 0.4 / (4 - 0.4), rel_tol=1e-6)  # E = 2 * 2 / 10
    assert math.isclose(out["high_in_region_share"], 1 / 2, rel_tol=1e-6)
    assert math.isclose(out["csm_inside_mean"], (10 + 4) / 2, rel_tol=1e-6)
    assert math.isclose(out["csm_outside_mean"], (9 + 1 + 2 + 3 + 1 + 0 + 5 + 3) / 8, rel_tol=1e-6)
    assert math.isclose(out["csm_inside_outside_ratio"], 7 / 3, rel_tol=1e-6)
