"""attnsim.stats.pairs._compiled: the numba kernels behind attnsim.stats.pairs.kernels, called directly on
hand-worked rows (the kernels module's own tests compare them with the reference rule on model tensors)."""

from __future__ import annotations

import numpy as np
import pytest

_compiled = pytest.importorskip("attnsim.stats.pairs._compiled")


def test_top_rows_gives_the_k_largest_positions_ascending_and_the_kth_and_next_values():
    values = np.array([[0.1, 0.9, 0.5, 0.7, 0.2], [5.0, 4.0, 3.0, 2.0, 1.0]], dtype=np.float32)
    out = np.empty((2, 2), dtype=np.int64)
    kth, below = np.empty(2, dtype=np.float32), np.empty(2, dtype=np.float32)
    assert _compiled.top_rows(values, 2, 1, out, kth, below)
    assert out.tolist() == [[1, 3], [0, 1]]  # the two largest of each row, by position
    assert kth.tolist() == pytest.approx([0.7, 4.0]) and below.tolist() == pytest.approx([0.5, 3.0])


def test_tie_decided_counts_the_choices_left_to_the_tie_rule():
    x = np.array([3.0, 1.0, 1.0, 1.0, 0.0], dtype=np.float32)
    # k = 2: 3.0 is clearly above; one choice is left for the three 1.0s within the error: the tie rule decides it
    assert _compiled._tie_decided(x, 2, np.float32(1.0), 1e-6) == 1
    # k = 4: three choices left for three tied values: nothing for the rule to decide
    assert _compiled._tie_decided(x, 4, np.float32(1.0), 1e-6) == 0
