"""attnsim.stats.anchors: its functions on hand-made tensors.

Each statistic's plain ``_update``/``_compute`` functions, called with hand-made tensors (no view, no model).

One window (B = 1), one layer, T = 4 unless said: pairs (0,1) (0,2) (0,3) (1,2) (1,3) (2,3) are pair
indices 0..5 at distances 1 2 3 1 2 1; index 6 (P) is the sentinel of unused slots.
"""

from __future__ import annotations

import torch

from attnsim.stats.anchors import _anchor_compute, _anchor_update
from attnsim.stats.pairs import pair_indices


def test_anchors():
    # head 0: pairs (0,1) (0,2) -> anchor position 0; head 1: pairs (1,2) (2,3) -> anchor position 2
    high = torch.tensor([[0, 1], [3, 5]])[None, None]  # (B, L, H, S)
    state = _anchor_update(high, torch.tensor([[[2, 2]]]), pair_indices(4), torch.tensor([[7, 8, 9, 10]]), 12)
    assert state["anchor_cells"].tolist() == [7, 12 + 9]  # (layer 0, head 0, id 7) and (layer 0, head 1, id 9)
    counts = torch.zeros(1, 2, 12, dtype=torch.float64)
    counts.view(-1)[state["anchor_cells"]] += 1
    out = _anchor_compute(state["share_sum"], state["windows"], counts)
    assert out["top_anchor"].tolist() == [[7, 9]] and out["anchor_share"].tolist() == [[1.0, 1.0]]
    assert out["anchor_unique"].tolist() == [[1.0, 1.0]] and out["distinct_anchors"].tolist() == [[2.0, 2.0]]
