"""attnsim.stats.pairs.scores: attention probabilities recomputed from captured queries and keys, by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from attnsim.stats.pairs.scores import attention_rows, masked_scores


def _qk(causal: bool, mask=None):
    # one window, one head, T = 3, d_head = 1: scores q_i k_j * scaling
    query = torch.tensor([1.0, 2.0, 0.0]).reshape(1, 1, 3, 1)
    key = torch.tensor([1.0, 0.0, -1.0]).reshape(1, 1, 3, 1)
    return SimpleNamespace(query=query, key=key, scaling=0.5, mask=mask, causal=causal)


def test_scores_are_scaled_dot_products_with_the_causal_rule():
    lowest = torch.finfo(torch.float32).min
    full = masked_scores(_qk(False), 0, 0, 3)[0]
    assert torch.allclose(full, torch.tensor([[0.5, 0.0, -0.5], [1.0, 0.0, -1.0], [0.0, 0.0, 0.0]]))
    causal = masked_scores(_qk(True), 0, 0, 3)[0]
    assert causal[0, 1] == lowest and causal[0, 2] == lowest and causal[1, 2] == lowest and causal[1, 0] == 1.0


def test_rows_are_the_softmax_of_the_scores_and_masked_keys_get_nothing():
    rows = attention_rows(_qk(True), 0, 3)[0, 0]  # (T, T)
    e = math.exp(1.0)
    assert torch.allclose(rows, torch.tensor([[1.0, 0.0, 0.0], [e / (e + 1), 1 / (e + 1), 0.0], [1 / 3, 1 / 3, 1 / 3]]), atol=1e-6)
    mask = torch.tensor([True, True, False]).reshape(1, 1, 1, 3)  # the last key is padding
    padded = attention_rows(_qk(False, mask), 2, 3)[0, 0, 0]
    assert torch.allclose(padded, torch.tensor([0.5, 0.5, 0.0]))
