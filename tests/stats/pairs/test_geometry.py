"""attnsim.stats.pairs.geometry: its functions on hand-worked inputs."""

from __future__ import annotations

import torch

from attnsim.data.layout import TokenLayout
from attnsim.stats.pairs import PairView, grid_distance


def test_grid_distance_and_pair_view():
    layout = TokenLayout(("[CLS]", "[DIST]"), (3, 3), (8, 8), (24, 24))
    positions = layout.positions()
    rows, cols = torch.tensor([2, 2, 2, 2, 0]), torch.tensor([3, 6, 10, 6, 5])
    # (0,0)-(0,1): 1; (0,0)-(1,1): sqrt 2 -> 1; (0,0)-(2,2): sqrt 8 = 2.83 -> 3; (0,0)-(1,1) again; [CLS]: none (-1)
    assert grid_distance(positions, rows, cols).tolist() == [1, 1, 3, 1, -1]
    seq = layout.seq_len

    def batch_of(length: int, special: torch.Tensor) -> dict:
        return {
            "attention_mask": torch.ones(1, length, dtype=torch.long),
            "special_mask": special,
            "sentence_ids": torch.full((1, length), -1),
            "input_ids": torch.arange(length)[None],
        }

    view = PairView(torch.randn(1, 1, 1, seq, 4), batch_of(seq, layout.special_mask()[None]), positions=positions)
    per_distance = view.class_counts_by_distance[0, 0]  # valid pairs (every pair here) by distance
    # 9 patches: 12 pairs at 1, 8 diagonal pairs at sqrt 2 -> 1; 6 at 2 and 8 at sqrt 5 -> 2; 2 at sqrt 8 -> 3
    assert per_distance[:4].tolist() == [0.0, 20.0, 14.0, 2.0] and per_distance.sum() == 36
    distance = view.pair_features(torch.arange(view.n_pairs)[None])["distance"][0]
    assert int((distance == -1).sum()) == view.n_pairs - 36  # pairs holding [CLS] or [DIST]: no grid distance
    text = PairView(torch.randn(1, 1, 1, 5, 4), batch_of(5, torch.zeros(1, 5, dtype=torch.bool)))
    assert text.pair_features(torch.arange(10)[None])["distance"][0].tolist() == [1, 2, 3, 4, 1, 2, 3, 1, 2, 1]  # text: j - i, unchanged
