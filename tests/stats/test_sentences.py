"""attnsim.stats.sentences: its functions on hand-made tensors.

Each statistic's plain ``_update``/``_compute`` functions, called with hand-made tensors (no view, no model).

One window (B = 1), one layer, T = 4 unless said: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) are pair
indices 0..5 at distances 1 2 3 1 2 1; index 6 (P) is the sentinel of unused slots.
"""

from __future__ import annotations

import math

import torch

from attnsim.stats.sentences import SentenceAccumulator, _sentence_compute, _sentence_update
from tests.helpers.findings import CLS, SEP, batch_of, view_from_csm
from tests.helpers.pairs import approx, tables, weights


def test_sentences():
    # sentence {0, 1, 2} and token 3 in another; high pairs (0,1) same d=1 and (0,3) cross d=3
    class_sums = torch.tensor([0.0, 6.0, 3.0, 0.0, 0.0])[None, None, None]
    # per head: same-sentence high pairs 1, their distance 1, distance-matched chance 2/3 (pair 0 at d = 1) + 0
    high_counts = torch.tensor([1.0, 1.0, 2 / 3])[None, None, None]
    state = _sentence_update(high_counts, torch.tensor([[[2]]]), *tables(weights(same=(0, 1, 3), cross=(2, 4, 5))), class_sums)
    # same-sentence share of valid pairs by distance: d1 2/3, d2 1/2, d3 0; mean same-sentence distance 4/3
    approx(
        state,
        {"high": 2, "high_same": 1, "chance_same": 1, "matched_same": 2 / 3, "high_same_distance": 1, "chance_same_distance": 4 / 3, "n_same": 3, "n_cross": 3},
    )
    approx(
        _sentence_compute(state),
        {
            "same_sentence_share": 0.5,
            "same_sentence_preference": 0.0,
            "same_sentence_share_distance_matched": 1 / 3,
            "boundary_contrast": 1.5,
            "within_sentence_spread": 0.75,
            "csm_same_mean": 2.0,
            "csm_cross_mean": 1.0,
        },
    )


def test_window_without_sentences_is_undefined_not_zero():
    ids = torch.tensor([[CLS, 5, 6, SEP]])
    view = view_from_csm(torch.rand(1, 1, 1, 4, 4), batch_of(ids, torch.full((1, 4), -1)), top_fraction=0.2)
    acc = SentenceAccumulator(1, 1)
    acc.update(view)
    out = acc.compute()
    assert float(out["same_sentence_share"]) == 0.0 and float(out["same_sentence_share_chance"]) == 0.0
    assert math.isnan(float(out["same_sentence_ratio"]))  # 0 / 0
    assert math.isnan(float(out["csm_same_mean"]))
