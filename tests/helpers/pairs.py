"""Hand-made pair tensors shared by the statistics' tests of their plain ``_update``/``_compute`` functions.

One window (B = 1), one layer, T = 4 unless said: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) are pair
indices 0..5 at distances 1 2 3 1 2 1; index 6 (P) is the sentinel of unused slots.
"""

from __future__ import annotations

import pytest
import torch

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
