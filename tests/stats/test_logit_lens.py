"""The logit lens's arithmetic on a hand-worked case: loss, top-1 accuracy and agreement with the last layer, chunked."""

from __future__ import annotations

import math

import torch

from attnsim.stats.logit_lens import LensSums, apply_norm, lens_update


def test_apply_norm_is_rmsnorm_or_layernorm():
    x = torch.tensor([[1.0, 3.0]])
    rms = apply_norm(x, torch.ones(2), None, centred=False, eps=0.0)
    torch.testing.assert_close(rms, x / math.sqrt(5.0))
    ln = apply_norm(x, torch.tensor([2.0, 2.0]), torch.tensor([0.5, 0.5]), centred=True, eps=0.0)
    torch.testing.assert_close(ln, torch.tensor([[-1.5, 2.5]]))  # (x − 2) / 1 · 2 + 0.5


def test_per_layer_loss_accuracy_and_agreement_match_a_hand_computation():
    # vocabulary 2, W_U = identity, RMSNorm without gain: the logits are the normalised stream
    w_u = torch.eye(2)
    last = torch.tensor([[3.0, 0.0], [0.0, 3.0], [3.0, 0.0]])  # top-1: 0, 1, 0
    first = torch.tensor([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])  # top-1: 1, 1, 0
    targets = torch.tensor([0, 1, 1])
    sums = lens_update([first, last], targets, torch.ones(2), None, False, 0.0, w_u, chunk=2)  # two chunks: 2 + 1 positions
    acc = LensSums(2)
    acc.update(sums)
    out = acc.compute()

    def expected_loss(stream):
        logits = apply_norm(stream, torch.ones(2), None, False, 0.0)
        return float(torch.nn.functional.cross_entropy(logits, targets))

    assert abs(float(out["loss"][0, 0]) - expected_loss(first)) < 1e-6
    assert abs(float(out["loss"][1, 0]) - expected_loss(last)) < 1e-6
    assert out["accuracy"][:, 0].tolist() == [1 / 3, 2 / 3]  # first layer right at position 1 only; last at 0 and 1
    assert out["agreement"][:, 0].tolist() == [2 / 3, 1.0]
