"""attnsim.stats.pairs.shared: the dense walk's own reducers (CSM sums by pair, tie counts), on a hand-worked window."""

from __future__ import annotations

import pytest
import torch

from attnsim.stats.pairs import PairView
from attnsim.stats.pairs.shared import PairSums, TieCounts

# T = 4: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) are indices 0..5, at distances 1 2 3 1 2 1
WINDOW = {
    "attention_mask": torch.ones(4, dtype=torch.long),
    "special_mask": torch.zeros(4, dtype=torch.bool),
    "sentence_ids": torch.zeros(4, dtype=torch.long),
    "input_ids": torch.arange(4),
}
TWO_GROUPS = torch.tensor([[[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]]])  # (layer, head, T, d): CSM 1 at (0,1) and (2,3), else 0


def test_pair_sums_by_pair_distance_and_shifted_squares():
    sums = PairView.single_window(TWO_GROUPS, WINDOW, top_fraction=0.3).reduced(PairSums)
    assert sums.by_pair.tolist() == [[[1.0, 0.0, 0.0, 0.0, 0.0, 1.0]]]
    assert sums.distance_sum.tolist() == [[[0.0, 2.0, 0.0, 0.0]]]  # distance 1: (0,1) + (1,2) + (2,3) = 1 + 0 + 1
    mean = 2 / 6
    assert sums.shift.item() == pytest.approx(mean) and sums.shifted.item() == pytest.approx(0.0, abs=1e-12)
    assert sums.squares.item() == pytest.approx(2 * (1 - mean) ** 2 + 4 * mean**2)  # 4/3: sum of squared deviations


def test_tie_counts_the_choices_the_tie_rule_made():
    assert PairView.single_window(TWO_GROUPS, WINDOW, top_fraction=0.3).reduced(TieCounts).decided.tolist() == [[[0]]]
    # every token the same vector: all six pairs tie at CSM 1, so both of the k = 2 choices fall to the tie rule
    assert PairView.single_window(torch.ones(1, 1, 4, 2), WINDOW, top_fraction=0.3).reduced(TieCounts).decided.tolist() == [[[2]]]
