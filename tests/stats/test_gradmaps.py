"""attnsim.stats.gradmaps: gradient-weighted attention, its rollout (Chefer et al. 2021, Eqs. 5-6) and CDAM
(Brocki & Chung 2023), on hand-worked tensors."""

from __future__ import annotations

import pytest
import torch

from attnsim.stats.gradmaps import cdam, gradient_rollout, gradient_weighted_attention


def test_relevance_is_relu_of_gradient_times_attention_and_zero_at_padding():
    attention = torch.tensor([[0.5, 0.5], [0.2, 0.8]])[None, None, None]  # (L, B, H, T, T) = (1, 1, 1, 2, 2)
    gradients = torch.tensor([[2.0, -1.0], [1.0, 0.5]])[None, None, None]
    out = gradient_weighted_attention(attention, gradients)
    assert torch.allclose(out[0, 0, 0], torch.tensor([[1.0, 0.0], [0.2, 0.4]]))  # -0.5 clipped to 0
    masked = gradient_weighted_attention(attention, gradients, valid=torch.tensor([[True, False]]))
    assert torch.allclose(masked[0, 0, 0], torch.tensor([[1.0, 0.0], [0.0, 0.0]]))  # row and column of the padding
    with pytest.raises(ValueError, match="differ in shape"):
        gradient_weighted_attention(attention, gradients[..., :1])


def test_rollout_adds_the_head_mean_to_the_identity_layer_by_layer():
    # two heads whose mean is A = [[0, 1], [0, 0]]; two layers: R0 = I + A, R1 = (I + A) R0 = I + 2A (A² = 0)
    a = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    relevance = torch.stack([torch.stack([a * 2, torch.zeros(2, 2)])] * 2)[:, None]  # (L=2, B=1, H=2, 2, 2)
    out = gradient_rollout(relevance)
    eye = torch.eye(2)
    assert torch.allclose(out[0, 0], eye + a) and torch.allclose(out[1, 0], eye + 2 * a)


def test_cdam_is_the_token_gradient_dot_product_signed():
    tokens = torch.tensor([[[1.0, 2.0], [3.0, -1.0], [5.0, 5.0]]])  # (B, T, d)
    gradients = torch.tensor([[[0.5, 0.5], [1.0, 2.0], [1.0, 1.0]]])
    assert torch.allclose(cdam(tokens, gradients), torch.tensor([[1.5, 1.0, 10.0]]))
    assert torch.allclose(cdam(tokens, gradients, valid=torch.tensor([[True, True, False]])), torch.tensor([[1.5, 1.0, 0.0]]))
