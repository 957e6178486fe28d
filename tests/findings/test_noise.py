"""Signal and noise: shares of high-CSM pairs explained by simple rules, worked by hand."""

from __future__ import annotations

import math

import torch

from attnsim.stats.noise import NoiseAccumulator
from tests.helpers.findings import CLS, SEP, batch_of, symmetric, view_from_csm


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
