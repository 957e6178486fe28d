"""attnsim.stats.separators: its functions on hand-made tensors.

Each statistic's plain ``_update``/``_compute`` functions, called with hand-made tensors (no view, no model).

One window (B = 1), one layer, T = 4 unless said: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) are pair
indices 0..5 at distances 1 2 3 1 2 1; index 6 (P) is the sentinel of unused slots.
"""

from __future__ import annotations

import math

import torch

from attnsim.stats.separators import _separator_compute, _separator_update
from tests.helpers.pairs import approx


def test_separators():
    # [CLS] a [SEP], every token a query and a key; attention received per key 1.0, 0.5, 1.5
    ids, ones = torch.tensor([[101, 5, 102]]), torch.ones(1, 3)
    state = _separator_update(
        torch.tensor([1.0, 0.5, 1.5])[None, None, None], torch.tensor([[[1.2]]]), torch.tensor([[[2.4]]]), ids, ones, ones, [[101], [102]]
    )
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
