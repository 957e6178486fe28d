"""The per-window statistic the live explorer adds to stats/: attention within 4 tokens, on hand-worked matrices."""

from __future__ import annotations

import math

import pytest
import torch

from attnsim.stats.attention_maps import local_mass


def test_local_mass_by_hand():
    # one window of 6 tokens, the last one padding; head 0 attends to key 0, head 1 to itself
    attention = torch.zeros(1, 2, 6, 6)
    attention[0, 0, :, 0] = 1.0
    attention[0, 1] = torch.eye(6)
    valid = torch.tensor([[True] * 5 + [False]])
    out = local_mass(attention, valid, width=1)
    # head 0: rows 0 and 1 are within 1 token of key 0, rows 2..4 are not -> 2 / 5; head 1: always itself
    assert out["local_mass"].tolist() == pytest.approx([0.4, 1.0])
    # uniform over 5 real keys: rows 0 and 4 see 2 near keys, rows 1..3 see 3 -> (2 + 3 + 3 + 3 + 2) / 5 / 5
    assert out["local_mass_chance"].tolist() == pytest.approx([13 / 25, 13 / 25])
    causal = local_mass(attention, valid, width=1, causal=True)
    # row i sees keys 0..i: near ones are min(i + 1, 2) of i + 1 -> (1 + 1 + 2/3 + 2/4 + 2/5) / 5
    assert causal["local_mass_chance"][0].item() == pytest.approx((1 + 1 + 2 / 3 + 0.5 + 0.4) / 5)


def test_local_mass_leading_dims_and_errors():
    attention = torch.softmax(torch.randn(3, 2, 4, 7, 7), -1)  # (layer, batch, head, T, T)
    valid = torch.ones(2, 7, dtype=torch.bool)
    out = local_mass(attention, valid, width=10)
    assert out["local_mass"].shape == (3, 4) and torch.allclose(out["local_mass"], torch.ones(3, 4, dtype=torch.float64))
    assert math.isnan(local_mass(attention[:, :1], torch.zeros(1, 7, dtype=torch.bool))["local_mass"][0, 0].item())
    with pytest.raises(ValueError, match="width"):
        local_mass(attention, valid, width=-1)
