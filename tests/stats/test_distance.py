"""attnsim.stats.distance: its functions on hand-made tensors.

Each statistic's plain ``_update``/``_compute`` functions, called with hand-made tensors (no view, no model).

One window (B = 1), one layer, T = 4 unless said: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) are pair
indices 0..5 at distances 1 2 3 1 2 1; index 6 (P) is the sentinel of unused slots.
"""

from __future__ import annotations

import math

import torch

from attnsim.stats.distance import DistanceAccumulator, _distance_compute, bin_profile, distance_bins, entropy
from tests.helpers.findings import CLS, SEP, batch_of, symmetric, view_from_csm
from tests.helpers.pairs import approx


def test_distance():
    high = torch.tensor([[[0.0, 1.0, 0.0, 1.0]]], dtype=torch.float64)  # high pairs at d = 1 and 3
    chance = torch.tensor([[[0.0, 1.0, 0.6, 0.4]]], dtype=torch.float64)
    out = _distance_compute(high, chance, 4, short_range=1)
    spread = math.log(2) / -(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2))
    approx(
        out,
        {
            "high_mean_distance": 2.0,
            "high_mean_distance_chance": 1.7,
            "short_range_share": 0.5,
            "long_range_share": 0.5,
            "long_range_share_chance": 0.5,
            "distance_spread": spread,
        },
    )
    assert out["distance_high_ratio"][0, 0, 1:].tolist() == [1.0, 0.0, 2.5]


def test_distance_statistics_by_hand():
    # T = 6, every token valid: 15 pairs, top_fraction 0.2 -> 3 high pairs (0,1) d=1, (0,5) d=5, (2,4) d=2
    T = 6
    csm = symmetric(T, {(0, 1): 9.0, (0, 5): 8.0, (2, 4): 7.0}, fill=1.0).expand(1, 1, 1, T, T).clone()
    view = view_from_csm(csm, batch_of(torch.tensor([[CLS, 5, 6, 7, 8, SEP]])), top_fraction=0.2)
    acc = DistanceAccumulator(1, 1, T, short_range=4)
    acc.update(view)
    out = {k: v.squeeze() for k, v in acc.compute().items()}
    # pairs at each distance d = 1..5: n_d = 5, 4, 3, 2, 1 (of 15); chance of d is n_d / 15
    assert math.isclose(out["high_mean_distance"], (1 + 5 + 2) / 3, rel_tol=1e-6)
    assert math.isclose(out["high_mean_distance_chance"], (1 * 5 + 2 * 4 + 3 * 3 + 4 * 2 + 5 * 1) / 15, rel_tol=1e-6)
    assert math.isclose(out["short_range_share"], 2 / 3, rel_tol=1e-6)  # d <= 4: (0,1), (2,4, rel_tol=1e-6)
    assert math.isclose(out["short_range_share_chance"], (5 + 4 + 3 + 2) / 15, rel_tol=1e-6)
    assert math.isclose(out["long_range_share"], 1 / 3, rel_tol=1e-6)  # d >= T/2 = 3: (0,5, rel_tol=1e-6)
    assert math.isclose(out["long_range_share_chance"], (3 + 2 + 1) / 15, rel_tol=1e-6)
    chance_entropy = -sum(n / 15 * math.log(n / 15) for n in (5, 4, 3, 2, 1))
    assert math.isclose(out["distance_spread"], math.log(3) / chance_entropy, rel_tol=1e-6)
    ratio = out["distance_high_ratio"]
    # high at d / (k * n_d / n) with k = 3: d=1 1/(3*5/15) = 1, d=2 1/(3*4/15) = 5/4, d=3 0, d=5 1/(3/15) = 5
    assert math.isnan(ratio[0])
    assert torch.allclose(ratio[1:], torch.tensor([1.0, 5 / 4, 0.0, 0.0, 5.0], dtype=torch.float64))


def test_entropy_is_nan_without_mass_and_zero_for_a_point():
    out = entropy(torch.tensor([[0.0, 0.0], [0.0, 3.0]], dtype=torch.float64))
    assert math.isnan(out[0]) and out[1] == 0.0


def test_padded_tail_window_keeps_the_long_range_cut_off_of_seq_len():
    # T = 8 (corpus.seq_len) but only 6 real tokens: the cut-off stays d >= 8/2 = 4, not 6/2 = 3
    T = 8
    csm = symmetric(T, {(0, 3): 9.0, (1, 5): 8.0, (2, 4): 7.0}, fill=1.0).expand(1, 1, 1, T, T).clone()
    view = view_from_csm(csm, batch_of(torch.tensor([[CLS, 5, 6, 7, 8, SEP, 0, 0]])), top_fraction=0.2)
    acc = DistanceAccumulator(1, 1, T, short_range=1)
    acc.update(view)
    out = {k: v.squeeze() for k, v in acc.compute().items()}
    # 15 valid pairs, k = 3 high pairs at d = 3, 4, 2: only (1,5) at d = 4 is long range
    assert math.isclose(out["long_range_share"], 1 / 3, rel_tol=1e-6)
    # chance: valid pairs at d >= 4 among the 6 real tokens: d=4 (2 pairs) + d=5 (1 pair) of 15
    assert math.isclose(out["long_range_share_chance"], 3 / 15, rel_tol=1e-6)


def test_distance_bins_are_every_distance_up_to_512_then_logarithmic():
    assert torch.equal(distance_bins(300), torch.arange(300))
    assert torch.equal(distance_bins(512), torch.arange(512))
    edges = distance_bins(8192)
    assert torch.equal(edges[:513], torch.arange(513))
    assert edges[513:].tolist()[:3] == [559, 609, 664]  # ceil(512 * 2^(k/8))
    assert bool((edges[1:] > edges[:-1]).all()) and int(edges[-1]) < 8192 and len(edges) == 513 + 32 - 1  # 4 octaves of 8 bins
    values = torch.ones(2, 8192)
    binned = bin_profile(values, edges)
    assert binned.sum().item() == 2 * 8192  # every distance in exactly one bin
    assert binned[0, 512].item() == 559 - 512 and binned[0, -1].item() == 8192 - int(edges[-1])
