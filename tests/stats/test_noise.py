"""attnsim.stats.noise: its functions on hand-made tensors.

Each statistic's plain ``_update``/``_compute`` functions, called with hand-made tensors (no view, no model).

One window (B = 1), one layer, T = 4 unless said: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) are pair
indices 0..5 at distances 1 2 3 1 2 1; index 6 (P) is the sentinel of unused slots.
"""

from __future__ import annotations

import math

import torch

from attnsim.stats.noise import NoiseAccumulator, _noise_compute, _noise_update
from tests.helpers.findings import CLS, SEP, batch_of, symmetric, view_from_csm
from tests.helpers.pairs import approx, tables, weights


def test_noise():
    # short (d <= 1): 0, 3, 5; same sentence: 0, 1, 3; identical: 2 -> unexplained by them: pair 4 only.
    # high pairs 2 (identical) and 4 (none); high-attention pairs 5 and (one slot unused) 6
    high_rules = torch.tensor([0.0, 0.0, 1.0, 1.0])[None, None, None]  # short, same, identical, rest of the high pairs
    no = torch.tensor([[[0.0]]])  # no high pair in the region; the region's pair 5 is short (not in the rest)
    state = _noise_update(high_rules, no, no, torch.tensor([[[2]]]), no, *tables(weights(same=(0, 1, 3), identical=(2,))), 1)
    approx(state, {"high": 2, "short": 0, "sentence": 0, "identical": 1, "attention": 0, "unexplained": 1, "unexplained_chance": 2 / 6})
    approx(_noise_compute(state), {"explained_identical": 0.5, "explained_attention": 0.0, "unexplained_share": 0.5, "unexplained_share_chance": 1 / 6})


def test_noise_statistics_by_hand():
    # positions 0..6: [CLS] a b c d b' [SEP]; sentences {1,2,3} and {4,5}; tokens 2 and 5 identical
    ids = torch.tensor([[CLS, 5, 6, 7, 8, 6, SEP]])
    sentences = torch.tensor([[-1, 0, 0, 0, 1, 1, -1]])
    # 21 valid pairs, top_fraction 5/21 -> 5 high pairs, one explained by each rule and one by none
    csm = symmetric(7, {(1, 3): 10, (3, 4): 9, (2, 5): 8, (1, 4): 7, (0, 6): 6})
    attention = torch.full((7, 7), 0.01)
    for (query, key), weight in {(1, 4): 0.9, (0, 1): 0.8, (2, 1): 0.7, (2, 3): 0.6, (6, 5): 0.5}.items():
        attention[query, key] = weight  # high-attention pairs (1,4) (0,1) (1,2) (2,3) (5,6)
    view = view_from_csm(csm[None, None, None], batch_of(ids, sentences), attention[None, None, None], top_fraction=5 / 21)
    acc = NoiseAccumulator(1, 1, short_range=1)
    acc.update(view)
    out = {k: float(v) for k, v in acc.compute().items()}
    assert math.isclose(out["explained_short"], 1 / 5, rel_tol=1e-6)  # (3,4, rel_tol=1e-6)
    assert math.isclose(out["explained_sentence"], 1 / 5, rel_tol=1e-6)  # (1,3, rel_tol=1e-6)
    assert math.isclose(out["explained_identical"], 1 / 5, rel_tol=1e-6)  # (2,5, rel_tol=1e-6)
    assert math.isclose(out["explained_attention"], 1 / 5, rel_tol=1e-6)  # (1,4, rel_tol=1e-6)
    assert math.isclose(out["unexplained_share"], 1 / 5, rel_tol=1e-6)  # (0,6, rel_tol=1e-6)
    # valid pairs meeting a rule: 6 at d=1, + (1,3) same sentence, + (2,5) identical, + (1,4) attention = 9 of 21
    assert math.isclose(out["unexplained_share_chance"], 12 / 21, rel_tol=1e-6)
