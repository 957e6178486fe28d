"""Each statistic's plain ``_update``/``_compute`` functions, called with hand-made tensors (no view, no model).

One window (B = 1), one layer, T = 4 unless said: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) are pair
indices 0..5 at distances 1 2 3 1 2 1; index 6 (P) is the sentinel of unused slots.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnsim.stats.anchors import _anchor_compute, _anchor_update
from attnsim.stats.attention_regions import _region_compute, _region_update
from attnsim.stats.distance import _distance_compute
from attnsim.stats.noise import _noise_compute, _noise_update
from attnsim.stats.pairs import pair_indices
from attnsim.stats.repetition import _repetition_compute, _repetition_update
from attnsim.stats.sentences import _sentence_compute, _sentence_update
from attnsim.stats.separators import _separator_compute, _separator_update

DISTANCE = torch.tensor([1, 2, 3, 1, 2, 1])
ONEHOT = torch.nn.functional.one_hot(DISTANCE, 4).float()  # (P, T)


def weights(same=(), cross=(), identical=()) -> torch.Tensor:
    """(1, 6, 5) pair classes of one window whose six pairs are all valid."""
    out = torch.zeros(1, 6, 5)
    out[0, :, 0] = 1
    for column, pairs in ((1, same), (2, cross), (3, identical)):
        out[0, list(pairs), column] = 1
    out[0, :, 4] = 1 - out[0, :, 3]
    return out


def tables(pair_weights: torch.Tensor) -> tuple:
    """(class_counts (1, 5), class_counts_by_distance (1, 5, T)) of :data:`CLASS_TABLES` from (1, 6, 5) pair classes."""
    valid, same, cross, identical = (pair_weights[..., i] for i in range(4))
    rows = torch.stack([valid, same, cross, identical, valid * (1 - same) * (1 - identical)], 1)  # (1, 5, P)
    return rows.sum(-1), rows @ ONEHOT


def approx(out: dict, want: dict) -> None:
    for key, value in want.items():
        assert float(out[key]) == pytest.approx(value, rel=1e-6), key


def test_repetition():
    # identical pairs (0,3) d=3 and (1,2) d=1; high pairs (0,3) and (2,3); long: d >= T/2 = 2
    class_sums = torch.tensor([0.0, 0.0, 0.0, 5.0, 3.0])[None, None, None]
    high_counts = torch.tensor([1.0, 1.0])[None, None, None]  # (B, L, H, 2): high pair 2 is identical and long
    state = _repetition_update(high_counts, torch.tensor([[[2]]]), *tables(weights(identical=(2, 3))), class_sums)
    approx(state, {"high_identical": 1, "high_long": 1, "chance_identical": 2 / 3, "chance_long": 1 / 3, "n_identical": 2, "n_long": 1, "n_other": 4})
    approx(
        _repetition_compute(state),
        {"identical_high_share": 0.5, "identical_high_share_chance": 1 / 3, "long_identical_high_share": 1.0, "repetition_score": 3.0, "identical_csm_mean": 2.5, "identical_csm_ratio": 10 / 3},
    )


def test_sentences():
    # sentence {0, 1, 2} and token 3 in another; high pairs (0,1) same d=1 and (0,3) cross d=3
    class_sums = torch.tensor([0.0, 6.0, 3.0, 0.0, 0.0])[None, None, None]
    # per head: same-sentence high pairs 1, their distance 1, distance-matched chance 2/3 (pair 0 at d = 1) + 0
    high_counts = torch.tensor([1.0, 1.0, 2 / 3])[None, None, None]
    state = _sentence_update(high_counts, torch.tensor([[[2]]]), *tables(weights(same=(0, 1, 3), cross=(2, 4, 5))), class_sums)
    # same-sentence share of valid pairs by distance: d1 2/3, d2 1/2, d3 0; mean same-sentence distance 4/3
    approx(state, {"high": 2, "high_same": 1, "chance_same": 1, "matched_same": 2 / 3, "high_same_distance": 1, "chance_same_distance": 4 / 3, "n_same": 3, "n_cross": 3})
    approx(
        _sentence_compute(state),
        {"same_sentence_share": 0.5, "same_sentence_preference": 0.0, "same_sentence_share_distance_matched": 1 / 3, "boundary_contrast": 1.5, "within_sentence_spread": 0.75, "csm_same_mean": 2.0, "csm_cross_mean": 1.0},
    )


def test_noise():
    # short (d <= 1): 0, 3, 5; same sentence: 0, 1, 3; identical: 2 -> unexplained by them: pair 4 only.
    # high pairs 2 (identical) and 4 (none); high-attention pairs 5 and (one slot unused) 6
    high_rules = torch.tensor([0.0, 0.0, 1.0, 1.0])[None, None, None]  # short, same, identical, rest of the high pairs
    no = torch.tensor([[[0.0]]])  # no high pair in the region; the region's pair 5 is short (not in the rest)
    state = _noise_update(high_rules, no, no, torch.tensor([[[2]]]), no, *tables(weights(same=(0, 1, 3), identical=(2,))), 1)
    approx(state, {"high": 2, "short": 0, "sentence": 0, "identical": 1, "attention": 0, "unexplained": 1, "unexplained_chance": 2 / 6})
    approx(_noise_compute(state), {"explained_identical": 0.5, "explained_attention": 0.0, "unexplained_share": 0.5, "unexplained_share_chance": 1 / 6})


def test_attention_regions():
    state = _region_update(torch.tensor([[[1.0]]]), torch.tensor([[[2]]]), torch.tensor([[[2.0]]]), torch.tensor([6.0]), torch.tensor([[[7.0]]]), torch.tensor([[[10.0]]]))
    # union 3; chance overlap E = 2 * 2 / 6; outside: CSM 3 over 4 pairs
    approx(
        _region_compute(state),
        {"jaccard": 1 / 3, "jaccard_chance": (2 / 3) / (4 - 2 / 3), "high_in_region_share": 0.5, "csm_inside_mean": 3.5, "csm_outside_mean": 0.75, "csm_inside_outside_ratio": 14 / 3},
    )


def test_separators():
    # [CLS] a [SEP], every token a query and a key; attention received per key 1.0, 0.5, 1.5
    ids, ones = torch.tensor([[101, 5, 102]]), torch.ones(1, 3)
    state = _separator_update(torch.tensor([1.0, 0.5, 1.5])[None, None, None], torch.tensor([[[1.2]]]), torch.tensor([[[2.4]]]), ids, ones, ones, [[101], [102]])
    out = _separator_compute(state, ("cls", "sep"))
    # uniform attention: 2 of 3 keys are separators; mean |i - j| per query 1, 2/3, 1
    approx(
        out,
        {
            "attention_cls": 1 / 3,
            "attention_sep": 0.5,
            "attention_separators": 2.5 / 3,
            "attention_separators_chance": 2 / 3,
            "attention_entropy": 0.4,
            "attention_entropy_chance": math.log(3),
            "attention_distance": 0.8,
            "attention_distance_chance": 8 / 9,
        },
    )


def test_anchors():
    # head 0: pairs (0,1) (0,2) -> anchor position 0; head 1: pairs (1,2) (2,3) -> anchor position 2
    high = torch.tensor([[0, 1], [3, 5]])[None, None]  # (B, L, H, S)
    state = _anchor_update(high, torch.tensor([[[2, 2]]]), pair_indices(4), torch.tensor([[7, 8, 9, 10]]), 12)
    assert state["anchor_cells"].tolist() == [7, 12 + 9]  # (layer 0, head 0, id 7) and (layer 0, head 1, id 9)
    counts = torch.zeros(1, 2, 12, dtype=torch.float64)
    counts.view(-1)[state["anchor_cells"]] += 1
    out = _anchor_compute(state["share_sum"], state["windows"], counts)
    assert out["top_anchor"].tolist() == [[7, 9]] and out["anchor_share"].tolist() == [[1.0, 1.0]]
    assert out["anchor_unique"].tolist() == [[1.0, 1.0]] and out["distinct_anchors"].tolist() == [[2.0, 2.0]]


def test_distance():
    high = torch.tensor([[[0.0, 1.0, 0.0, 1.0]]], dtype=torch.float64)  # high pairs at d = 1 and 3
    chance = torch.tensor([[[0.0, 1.0, 0.6, 0.4]]], dtype=torch.float64)
    out = _distance_compute(high, chance, 4, short_range=1)
    spread = math.log(2) / -(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2))
    approx(out, {"high_mean_distance": 2.0, "high_mean_distance_chance": 1.7, "short_range_share": 0.5, "long_range_share": 0.5, "long_range_share_chance": 0.5, "distance_spread": spread})
    assert out["distance_high_ratio"][0, 0, 1:].tolist() == [1.0, 0.0, 2.5]
