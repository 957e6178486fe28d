"""Hand-worked checks of the CSM pair quantities and the CSMAccumulator."""

from __future__ import annotations

import math

import pytest
import torch

from attnsim.stats.csm import CSMAccumulator
from attnsim.stats.distance import DistanceAccumulator
from attnsim.stats.pairs import PairView, context_similarity, high_pairs_top_fraction, high_pairs_zscore

# One layer, one head, T = 4, d_head = 2.
Z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
# CSM = Z Zᵀ with zero diagonal, worked by hand:
CSM = torch.tensor(
    [
        [0.0, 0.0, 1.0, 2.0],
        [0.0, 0.0, 1.0, 0.0],
        [1.0, 1.0, 0.0, 2.0],
        [2.0, 0.0, 2.0, 0.0],
    ]
)
# pairs i<j in triu order (0,1) (0,2) (0,3) (1,2) (1,3) (2,3); distances 1 2 3 1 2 1
VALUES = [0.0, 1.0, 2.0, 1.0, 0.0, 2.0]


class Cfg:
    short_range = 1


def batch_of(lengths, seq_len):
    """A batch whose window b has lengths[b] real tokens followed by padding."""
    mask = torch.zeros(len(lengths), seq_len, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    return {
        "attention_mask": mask,
        "special_mask": torch.zeros(len(lengths), seq_len, dtype=torch.bool),
        "input_ids": torch.arange(seq_len).repeat(len(lengths), 1),
        "sentence_ids": torch.zeros(len(lengths), seq_len, dtype=torch.long),
    }


def view_of(z_windows, lengths, seq_len, top_fraction=0.34):
    z = torch.zeros(1, len(z_windows), 1, seq_len, 2)
    for b, zw in enumerate(z_windows):
        z[0, b, 0, : len(zw)] = zw
    return PairView(z, batch_of(lengths, seq_len), top_fraction=top_fraction)


def test_context_similarity_matches_hand_worked_matrix():
    assert torch.equal(context_similarity(Z), CSM)


def test_cosine_normalisation():
    cos = context_similarity(Z, "cosine")
    assert cos[0, 3] == pytest.approx(1.0)
    assert cos[0, 2] == pytest.approx(1 / math.sqrt(2))
    assert cos[1, 1] == 0.0


def test_pair_values_and_top_fraction_high_pairs():
    view = view_of([Z], [4], 4)
    assert view.values[0, 0, 0].tolist() == VALUES
    assert view.distance.tolist() == [1, 2, 3, 1, 2, 1]
    # k = round(0.34 * 6) = 2: the two pairs with CSM 2, (0,3) and (2,3)
    assert view.high[0, 0, 0].tolist() == [False, False, True, False, False, True]


def test_top_fraction_counts_only_valid_pairs():
    values = torch.tensor([[[[5.0, 4.0, 3.0, 2.0, 1.0, 9.0]]]])  # (1, 1, 1, 6), T = 4
    pair_mask = torch.tensor([[True, True, False, True, False, False]])  # 3 valid pairs
    high = high_pairs_top_fraction(values, pair_mask, 0.5)  # round(1.5) = 2 of the 3 valid
    assert high[0, 0, 0].tolist() == [True, True, False, False, False, False]


def test_zscore_rule():
    values = torch.tensor([[[[0.0, 0.0, 0.0, 10.0]]]])
    pair_mask = torch.ones(1, 4, dtype=torch.bool)
    # mean 2.5, population std = sqrt((3 * 6.25 + 56.25) / 4) = 4.33; z of 10 = 1.73
    assert high_pairs_zscore(values, pair_mask, 1.5)[0, 0, 0].tolist() == [False, False, False, True]
    assert not high_pairs_zscore(values, pair_mask, 1.8).any()


def expected_hand_worked():
    return {
        "mean": 1.0,  # 6 / 6
        "std": math.sqrt(10 / 6 - 1),
    }


def expected_distance_hand_worked():
    """The distance scalars of the same window (the ``distance`` finding's, short_range = 1)."""
    return {
        "high_mean_distance": 2.0,  # high pairs at distances 3 and 1
        # chance by distance = k * n_d / n = 2 * (3, 2, 1) / 6
        "high_mean_distance_chance": (1 * 1 + 2 * 2 / 3 + 3 * 1 / 3) / 2,
        "short_range_share": 0.5,  # d <= 1: (2,3)
        "short_range_share_chance": 0.5,
        # long range: d >= T/2 = 2 -> (0,3) only; chance (2/3 + 1/3) / 2
        "long_range_share": 0.5,
        "long_range_share_chance": 0.5,
    }


def test_accumulator_hand_worked():
    acc = CSMAccumulator(1, 1, 4)
    acc.update(view_of([Z], [4], 4))
    out = acc.compute()
    for name, value in expected_hand_worked().items():
        assert out[name][0, 0].item() == pytest.approx(value), name
    # mean CSM by distance: d1 (0+1+2)/3, d2 (1+0)/2, d3 2
    assert out["distance_mean"][0, 0, 1:].tolist() == pytest.approx([1.0, 0.5, 2.0])
    # high / chance by distance: 1/1, 0/(2/3), 1/(1/3)
    assert out["distance_high_ratio"][0, 0, 1:].tolist() == pytest.approx([1.0, 0.0, 3.0])
    matrix = out["matrix"][0, 0]
    assert torch.isnan(matrix.diagonal()).all()
    off = ~torch.eye(4, dtype=torch.bool)
    assert torch.allclose(matrix[off], CSM.double()[off])
    distance = DistanceAccumulator(1, 1, 4, short_range=1)
    distance.update(view_of([Z], [4], 4))
    got = distance.compute()
    for name, value in expected_distance_hand_worked().items():
        assert got[name][0, 0].item() == pytest.approx(value), name
    assert torch.allclose(got["distance_high_ratio"], out["distance_high_ratio"], equal_nan=True)  # one profile, two tables


def test_distance_scalars_are_computed_once_by_the_distance_finding():
    """Issue 12: the csm finding computed the six distance scalars again; now only ``distance`` does."""
    from attnsim.findings.csm import CSMFinding
    from attnsim.findings.distance import DistanceFinding

    acc = CSMAccumulator(1, 1, 4)
    acc.update(view_of([Z], [4], 4))
    assert set(acc.compute()) == {"mean", "std", "matrix", "distance_mean", "distance_high_ratio"}
    assert CSMFinding.statistics == ("mean", "std")
    assert set(expected_distance_hand_worked()) <= set(DistanceFinding.statistics)


def test_padding_does_not_change_a_window():
    """Z padded to T = 6 and batched with a full window of random vectors: Z's own statistics are unchanged."""
    padded = CSMAccumulator(1, 1, 6)
    padded.update(view_of([Z], [4], 6))
    out = padded.compute()
    for name, value in expected_hand_worked().items():
        assert out[name][0, 0].item() == pytest.approx(value), name
    distance = DistanceAccumulator(1, 1, 6, short_range=1)
    distance.update(view_of([Z], [4], 6))
    got = distance.compute()
    for name, value in expected_distance_hand_worked().items():
        if not name.startswith("long_range"):  # long range is d >= T/2 of the padded length
            assert got[name][0, 0].item() == pytest.approx(value), name

    torch.manual_seed(0)
    other = torch.randn(6, 2)
    together = CSMAccumulator(1, 1, 6)
    together.update(view_of([Z, other], [4, 6], 6))
    alone_other = CSMAccumulator(1, 1, 6)
    alone_other.update(view_of([other], [6], 6))
    merged = padded.merge(alone_other).compute()
    for name, value in together.compute().items():
        assert torch.allclose(value, merged[name], equal_nan=True, atol=1e-6), name


def test_merge_two_halves_equals_whole():
    torch.manual_seed(1)
    windows = [torch.randn(8, 2) for _ in range(4)]
    lengths = [8, 6, 8, 5]
    whole = CSMAccumulator(1, 1, 8)
    whole.update(view_of(windows, lengths, 8, 0.1))
    first, second = CSMAccumulator(1, 1, 8), CSMAccumulator(1, 1, 8)
    first.update(view_of(windows[:2], lengths[:2], 8, 0.1))
    second.update(view_of(windows[2:], lengths[2:], 8, 0.1))
    merged = first.merge(second).compute()
    for name, value in whole.compute().items():
        assert torch.allclose(value, merged[name], equal_nan=True, atol=1e-6), name


def test_specials_excluded_when_configured():
    batch = batch_of([4], 4)
    batch["special_mask"][0, 0] = True
    z = Z.reshape(1, 1, 1, 4, 2)
    view = PairView(z, batch, include_special=False, top_fraction=0.34)
    # only pairs among tokens 1..3 remain: (1,2) (1,3) (2,3)
    assert view.pair_mask[0].tolist() == [False, False, False, True, True, True]
    acc = CSMAccumulator(1, 1, 4)
    acc.update(view)
    assert acc.compute()["mean"][0, 0].item() == pytest.approx((1 + 0 + 2) / 3)
