"""Hand-worked tests of attention rollout, discard ratio, attention flow and the rollout accumulator."""

from __future__ import annotations

import pytest
import torch

from attnsim.stats.rollout import (
    RolloutAccumulator,
    add_residual,
    attention_flow,
    attention_rollout,
    discard_lowest,
    fuse_heads,
    residual_attention,
)

D = torch.float64


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=D)


# two heads of one 2-token input: (head, query, key)
HEADS = t([[[0.6, 0.4], [0.2, 0.8]], [[0.2, 0.8], [0.6, 0.4]]])


def test_fusion_modes():
    assert torch.allclose(fuse_heads(HEADS, "mean"), t([[0.4, 0.6], [0.4, 0.6]]))
    assert torch.allclose(fuse_heads(HEADS, "max"), t([[0.6, 0.8], [0.6, 0.8]]))
    assert torch.allclose(fuse_heads(HEADS, "min"), t([[0.2, 0.4], [0.2, 0.4]]))
    with pytest.raises(ValueError, match="head fusion"):
        fuse_heads(HEADS, "median")


def test_residual_and_renormalisation():
    # mean fusion: rows already sum to 1, (A + I) / 2 needs no renormalisation
    assert torch.allclose(add_residual(t([[0.4, 0.6], [0.4, 0.6]])), t([[0.7, 0.3], [0.2, 0.8]]))
    # max fusion: rows sum to 1.4; (A + I) / 2 = [[0.8, 0.4], [0.3, 0.9]], row sums 1.2 -> renormalised
    assert torch.allclose(add_residual(t([[0.6, 0.8], [0.6, 0.8]])), t([[0.8 / 1.2, 0.4 / 1.2], [0.3 / 1.2, 0.9 / 1.2]]))
    # min fusion: rows sum to 0.6; (A + I) / 2 = [[0.6, 0.2], [0.1, 0.7]], row sums 0.8
    assert torch.allclose(add_residual(t([[0.2, 0.4], [0.2, 0.4]])), t([[0.75, 0.25], [0.125, 0.875]]))


def test_rollout_multiplies_layers_in_order():
    # layer 0 fused (mean) = [[0.4, 0.6], [0.4, 0.6]] -> Â0 = [[0.7, 0.3], [0.2, 0.8]]
    # layer 1: one head [[1, 0], [1, 0]] (everyone attends to token 0) -> Â1 = [[1, 0], [0.5, 0.5]]
    layer0 = HEADS
    layer1 = t([[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]])
    attention = torch.stack([layer0, layer1])[:, None]  # (layer, batch=1, head, T, T)
    rollout = attention_rollout(attention)
    assert rollout.shape == (2, 1, 2, 2)
    assert torch.allclose(rollout[0, 0], t([[0.7, 0.3], [0.2, 0.8]]))
    # R1 = Â1 @ Â0 = [[0.7, 0.3], [0.45, 0.55]]
    assert torch.allclose(rollout[1, 0], t([[0.7, 0.3], [0.45, 0.55]]))
    assert torch.allclose(rollout.sum(-1), torch.ones(2, 1, 2, dtype=D))


def test_discard_ratio_keeps_cls_row_and_column():
    a = t(
        [
            [0.10, 0.20, 0.30, 0.40],
            [0.40, 0.10, 0.30, 0.20],
            [0.05, 0.35, 0.25, 0.35],
            [0.50, 0.30, 0.05, 0.15],
        ]
    )[None]  # (batch=1, T, T)
    out = discard_lowest(a, 0.5)[0]
    # [CLS] (position 0) row untouched; its column never a candidate. Rows 1..3: 3 candidates, floor(1.5) = 1 dropped.
    assert torch.equal(out[0], a[0, 0])
    assert torch.equal(out[:, 0], a[0, :, 0])
    assert torch.allclose(out[1], t([0.40, 0.00, 0.30, 0.20]))  # 0.10 (key 1) dropped
    assert torch.allclose(out[2], t([0.05, 0.35, 0.00, 0.35]))  # 0.25 (key 2) dropped, [CLS]'s 0.05 kept
    assert torch.allclose(out[3], t([0.50, 0.30, 0.00, 0.15]))
    # ratio 0.7: floor(2.1) = 2 per row; the tie 0.35/0.35 in row 2 keeps the later key
    out = discard_lowest(a, 0.7)[0]
    assert torch.allclose(out[2], t([0.05, 0.0, 0.0, 0.35]))
    assert torch.allclose(out[1], t([0.40, 0.0, 0.30, 0.0]))
    with pytest.raises(ValueError, match="discard_ratio"):
        discard_lowest(a, 1.0)


def test_discard_then_residual_in_rollout():
    a = t([[0.10, 0.20, 0.70], [0.30, 0.60, 0.10], [0.20, 0.10, 0.70]])
    attention = a[None, None, None]  # (layer=1, batch=1, head=1, T, T)
    got = residual_attention(attention, discard_ratio=0.5)[0, 0]
    # row 1: candidates keys 1, 2 -> 0.10 dropped -> [0.3, 0.6, 0] -> (+I)/2 = [0.15, 0.8, 0] / 0.95
    assert torch.allclose(got[1], t([0.15, 0.8, 0.0]) / 0.95)
    # row 2: 0.10 dropped -> [0.2, 0, 0.7] -> [0.1, 0, 0.85] / 0.95
    assert torch.allclose(got[2], t([0.1, 0.0, 0.85]) / 0.95)
    # row 0 ([CLS]) kept whole: [0.55, 0.1, 0.35]
    assert torch.allclose(got[0], t([0.55, 0.1, 0.35]))


def test_batch_of_two_with_padding_matches_each_item_alone():
    torch.manual_seed(0)
    short = torch.rand(3, 1, 2, 3, 3, dtype=D).softmax(-1)  # (layer, 1, head, T=3, T)
    other = torch.rand(3, 1, 2, 5, 5, dtype=D).softmax(-1)
    padded = torch.rand(3, 1, 2, 5, 5, dtype=D)  # garbage in padding rows and columns
    padded[..., :3, :3] = short
    padded[..., :3, 3:] = 0.0  # real queries never attend to padding
    batch = torch.cat([padded, other], 1)  # (layer, 2, head, 5, 5)
    valid = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    for fusion in ("mean", "max", "min"):
        for ratio in (0.0, 0.5):
            together = attention_rollout(batch, valid, fusion, ratio)
            alone_short = attention_rollout(short, None, fusion, ratio)
            alone_other = attention_rollout(other, None, fusion, ratio)
            assert torch.allclose(together[:, 0, :3, :3], alone_short[:, 0]), (fusion, ratio)
            assert torch.allclose(together[:, 1], alone_other[:, 0]), (fusion, ratio)
            # padding: no mass flows to it, and its rows are identity rows
            assert torch.equal(together[:, 0, :3, 3:], torch.zeros(3, 3, 2, dtype=D))
            assert torch.allclose(together[:, 0, 3:, 3:], torch.eye(2, dtype=D).expand(3, 2, 2))


def test_flow_one_layer_equals_capacities_and_two_layers_hand_worked():
    a0 = t([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.4, 0.4, 0.2]])
    a1 = t([[0.7, 0.2, 0.1], [0.2, 0.2, 0.6], [0.3, 0.3, 0.4]])
    one = attention_flow(a0[None])
    assert torch.allclose(one, a0, atol=1e-8)  # a single edge from each output to each input
    two = attention_flow(torch.stack([a0, a1]), sources=[0, 2])
    # paths (2, s) -> (1, m) -> (0, j) are edge-disjoint over m: flow = sum_m min(a1[s, m], a0[m, j])
    expected = torch.stack([torch.minimum(a1[s][:, None], a0).sum(0) for s in (0, 2)])
    assert torch.allclose(two, expected, atol=1e-8)
    # e.g. source 0 to input 0: min(0.7, 0.5) + min(0.2, 0.1) + min(0.1, 0.4) = 0.7
    assert abs(float(two[0, 0]) - 0.7) < 1e-8
    # rollout differs: sum_m a1[0, m] a0[m, 0] = 0.35 + 0.02 + 0.04 = 0.41
    assert abs(float((a1 @ a0)[0, 0]) - 0.41) < 1e-12
    with pytest.raises(ValueError):
        attention_flow(a0)


def test_rollout_accumulator_hand_worked_and_merge():
    rollout = t([[[[0.5, 0.3, 0.2, 0.0], [0.1, 0.6, 0.3, 0.0], [0.2, 0.2, 0.6, 0.0], [0.0, 0.0, 0.0, 1.0]]]])  # (L=1, B=1, 4, 4)
    valid = torch.tensor([[True, True, True, False]])
    categories = {"cls": torch.tensor([[True, False, False, False]]), "sep": torch.tensor([[False, False, True, False]])}
    readout = torch.tensor([0])
    acc = RolloutAccumulator(1, 4, ["cls", "sep"])
    acc.update(rollout, valid, categories, readout)
    out = acc.compute()
    assert torch.allclose(out["cls_mass"], t([[(0.5 + 0.1 + 0.2) / 3]]))
    assert torch.allclose(out["sep_mass"], t([[(0.2 + 0.3 + 0.6) / 3]]))
    assert torch.allclose(out["cls_mass_chance"], t([[1 / 3]]))
    assert torch.allclose(out["self_mass"], t([[(0.5 + 0.6 + 0.6) / 3]]))
    entropy = -(0.5 * torch.log(t(0.5)) + 0.3 * torch.log(t(0.3)) + 0.2 * torch.log(t(0.2)))
    assert torch.allclose(out["readout_entropy"], entropy.reshape(1, 1))
    assert torch.allclose(out["readout_mean"][0, :3], t([0.5, 0.3, 0.2]))
    assert torch.isnan(out["readout_mean"][0, 3])  # padding position never counted
    # two halves merged equal one pass over both
    both = RolloutAccumulator(1, 4, ["cls", "sep"])
    both.update(torch.cat([rollout, rollout.flip(-1)], 1), valid.expand(2, 4), {k: v.expand(2, 4) for k, v in categories.items()}, readout.expand(2))
    first, second = RolloutAccumulator(1, 4, ["cls", "sep"]), RolloutAccumulator(1, 4, ["cls", "sep"])
    first.update(rollout, valid, categories, readout)
    second.update(rollout.flip(-1), valid, categories, readout)
    merged = first.merge(second).compute()
    for key, value in both.compute().items():
        assert torch.allclose(merged[key], value, equal_nan=True), key
