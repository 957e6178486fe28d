"""attnsim.stats.rollout: its functions on hand-worked inputs."""

from __future__ import annotations

import math

import torch

from attnsim.findings.categories import TokenCategories
from attnsim.stats.rollout import RolloutAccumulator, attention_rollout


def test_rollout_of_a_hand_made_causal_pair():
    # T = 2, one head: token 1 attends 0.25 to token 0 and 0.75 to itself; token 0 only to itself
    attention = torch.tensor([[1.0, 0.0], [0.25, 0.75]])[None, None, None].expand(2, 1, 1, 2, 2)
    rollout = attention_rollout(attention)
    # (A + I)/2 = [[1, 0], [0.125, 0.875]]; two layers: row 1 = [0.125 + 0.875 * 0.125, 0.875²]
    assert torch.allclose(rollout[0, 0], torch.tensor([[1.0, 0.0], [0.125, 0.875]]))
    assert torch.allclose(rollout[1, 0], torch.tensor([[1.0, 0.0], [0.125 + 0.875 * 0.125, 0.875**2]]))


def test_rollout_accumulator_reads_the_causal_readout_row():
    attention = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])[None, None, None]  # (L, B, H, T, T)
    valid = torch.ones(1, 3, dtype=torch.bool)
    rollout = attention_rollout(attention, valid)  # rows of (A + I)/2
    acc = RolloutAccumulator(1, 3, ("cls",))
    first = torch.tensor([[True, False, False]])
    acc.update(rollout, valid, {"cls": first}, TokenCategories(None, causal=True).readout({"attention_mask": valid.long()}))
    out = acc.compute()
    last_row = torch.tensor([0.1, 0.15, 0.75], dtype=torch.float64)
    assert torch.allclose(out["readout_mean"][0], last_row, atol=1e-7)
    assert math.isclose(float(out["readout_entropy"]), float(-(last_row * last_row.log()).sum()), rel_tol=1e-6)
    assert math.isclose(float(out["cls_mass"]), (1.0 + 0.25 + 0.1) / 3, rel_tol=1e-6)  # first-token mass of every row
