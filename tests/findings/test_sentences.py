"""Same-sentence statistics of high-CSM pairs, worked by hand on a 7-token window."""

from __future__ import annotations

import math

import torch

from attnsim.findings.sentences import SentencesFinding
from attnsim.stats.sentences import SentenceAccumulator
from tests.helpers.findings import CLS, SEP, batch_of, symmetric, view_from_csm

# positions 0..6: [CLS] a b c d e [SEP]; sentence 0 = {1, 2, 3}, sentence 1 = {4, 5}
IDS = torch.tensor([[CLS, 5, 6, 7, 8, 9, SEP]])
SENTENCES = torch.tensor([[-1, 0, 0, 0, 1, 1, -1]])
# high pairs (top 3 of 21): (1,3) same d=2, (3,4) cross d=1, (4,5) same d=1
CSM = {(1, 3): 10.0, (3, 4): 9.0, (4, 5): 8.0, (1, 2): 2.0, (2, 3): 4.0, (1, 4): 1.0, (2, 4): 3.0, (2, 5): -1.0}


def hand_view():
    csm = symmetric(7, CSM).expand(1, 1, 1, 7, 7).clone()
    return view_from_csm(csm, batch_of(IDS, SENTENCES), top_fraction=0.15)  # round(0.15 * 21) = 3


def test_sentence_statistics_by_hand():
    acc = SentenceAccumulator(1, 1)
    acc.update(hand_view())
    out = {k: float(v) for k, v in acc.compute().items()}
    # same-sentence pairs: (1,2) (1,3) (2,3) (4,5): 4 of 21 valid pairs
    assert math.isclose(out["same_sentence_share"], 2 / 3, rel_tol=1e-6)
    assert math.isclose(out["same_sentence_share_chance"], 4 / 21, rel_tol=1e-6)
    assert math.isclose(out["same_sentence_preference"], 2 / 3 - 4 / 21, rel_tol=1e-6)
    assert math.isclose(out["same_sentence_ratio"], (2 / 3) / (4 / 21), rel_tol=1e-6)
    # at d=1, 3 of 6 pairs are same-sentence; at d=2, 1 of 5: matched = (1/5 + 1/2 + 1/2) / 3
    assert math.isclose(out["same_sentence_share_distance_matched"], (1 / 5 + 1 / 2 + 1 / 2) / 3, rel_tol=1e-6)
    assert math.isclose(out["boundary_contrast"], (2 / 3) / ((1 / 5 + 1) / 3), rel_tol=1e-6)
    # same-sentence high pairs at d = 2 and 1; the window's same-sentence pairs have mean distance (1+2+1+1)/4
    assert math.isclose(out["within_sentence_spread"], (2 + 1) / (2 * 5 / 4), rel_tol=1e-6)
    assert math.isclose(out["csm_same_mean"], (2 + 10 + 4 + 8) / 4, rel_tol=1e-6)
    # cross-sentence pairs: {1,2,3} x {4,5}
    assert math.isclose(out["csm_cross_mean"], (1 + 0 + 3 - 1 + 9 + 0) / 6, rel_tol=1e-6)


def test_finding_summary_has_every_statistic_per_layer_and_head():
    from attnsim.config import StatsConfig

    finding = SentencesFinding(1, 1, 7, StatsConfig())
    finding.update(hand_view())
    summary = finding.summarise()
    assert set(summary.scalars) == set(SentencesFinding.statistics)
    assert all(v.shape == (1, 1) for v in summary.scalars.values())
    assert summary.windows == 1
