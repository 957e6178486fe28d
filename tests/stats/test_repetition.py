"""attnsim.stats.repetition: its functions on hand-made tensors.

Each statistic's plain ``_update``/``_compute`` functions, called with hand-made tensors (no view, no model).

One window (B = 1), one layer, T = 4 unless said: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) are pair
indices 0..5 at distances 1 2 3 1 2 1; index 6 (P) is the sentinel of unused slots.
"""

from __future__ import annotations

import math

import torch

from attnsim.stats.repetition import RepetitionAccumulator, _repetition_compute, _repetition_update
from tests.helpers.findings import CLS, SEP, batch_of, symmetric, view_from_csm
from tests.helpers.pairs import approx, tables, weights


def test_repetition():
    # identical pairs (0,3) d=3 and (1,2) d=1; high pairs (0,3) and (2,3); long: d >= T/2 = 2
    class_sums = torch.tensor([0.0, 0.0, 0.0, 5.0, 3.0])[None, None, None]
    high_counts = torch.tensor([1.0, 1.0])[None, None, None]  # (B, L, H, 2): high pair 2 is identical and long
    state = _repetition_update(high_counts, torch.tensor([[[2]]]), *tables(weights(identical=(2, 3))), class_sums)
    approx(state, {"high_identical": 1, "high_long": 1, "chance_identical": 2 / 3, "chance_long": 1 / 3, "n_identical": 2, "n_long": 1, "n_other": 4})
    approx(
        _repetition_compute(state),
        {
            "identical_high_share": 0.5,
            "identical_high_share_chance": 1 / 3,
            "long_identical_high_share": 1.0,
            "repetition_score": 3.0,
            "identical_csm_mean": 2.5,
            "identical_csm_ratio": 10 / 3,
        },
    )


def test_repetition_statistics_by_hand():
    # positions 0..7; token 5 at 1, 3, 6 and token 6 at 2, 5: identical pairs (1,3) (1,6) (3,6) (2,5)
    ids = torch.tensor([[CLS, 5, 6, 5, 7, 6, 5, SEP]])
    # 28 valid pairs, top_fraction 0.1 -> 3 high pairs: (1,6), (2,5), (0,7); every other pair 1
    csm = symmetric(8, {(1, 6): 10.0, (2, 5): 9.0, (0, 7): 8.0, (1, 3): 3.0, (3, 6): 2.0}, fill=1.0)[None, None, None]
    acc = RepetitionAccumulator(1, 1)
    acc.update(view_from_csm(csm, batch_of(ids), top_fraction=0.1))
    out = {k: float(v) for k, v in acc.compute().items()}
    assert math.isclose(out["identical_high_share"], 2 / 4, rel_tol=1e-6)
    assert math.isclose(out["identical_high_share_chance"], 3 / 28, rel_tol=1e-6)
    # long: j - i >= T/2 = 4, only (1,6)
    assert math.isclose(out["long_identical_high_share"], 1.0, rel_tol=1e-6)
    assert math.isclose(out["long_identical_high_share_chance"], 3 / 28, rel_tol=1e-6)
    assert math.isclose(out["repetition_score"], 28 / 3, rel_tol=1e-6)
    assert math.isclose(out["identical_csm_mean"], (10 + 9 + 3 + 2) / 4, rel_tol=1e-6)
    assert math.isclose(out["other_csm_mean"], (8 + 23 * 1) / 24, rel_tol=1e-6)
    assert math.isclose(out["identical_csm_ratio"], 6 / (31 / 24), rel_tol=1e-6)


def test_no_identical_pairs_is_undefined():
    ids = torch.tensor([[CLS, 5, 6, 7, SEP]])
    acc = RepetitionAccumulator(1, 1)
    acc.update(view_from_csm(torch.rand(1, 1, 1, 5, 5), batch_of(ids), top_fraction=0.2))
    out = acc.compute()
    assert math.isnan(float(out["identical_high_share"])) and math.isnan(float(out["repetition_score"]))
    assert math.isfinite(float(out["other_csm_mean"]))
