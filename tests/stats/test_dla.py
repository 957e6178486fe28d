"""Direct logit attribution's arithmetic on hand-worked cases: the readout direction and the per-head moments."""

from __future__ import annotations

import math

import torch

from attnsim.stats.dla import Decomposition, HeadAttribution, head_attribution, readout_directions, stream_attribution


def test_rms_direction_folds_the_gain_subtracts_the_mean_row_and_divides_by_sigma():
    w = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    gain = torch.tensor([2.0, 1.0, 1.0, 1.0])
    u = readout_directions(w, gain, centred=False, sigma=torch.tensor([0.5]), w_mean=torch.tensor([0.25, 0.25, 0.25, 0.25]))
    # gain ⊙ (w − mean) = [1.5, −0.25, −0.25, −0.25], divided by σ = 0.5
    torch.testing.assert_close(u, torch.tensor([[3.0, -0.5, -0.5, -0.5]]))


def test_layernorm_direction_is_centred_so_a_constant_component_has_no_effect():
    u = readout_directions(torch.tensor([[1.0, 2.0, 3.0, 6.0]]), torch.ones(4), centred=True, sigma=torch.tensor([1.0]))
    torch.testing.assert_close(u, torch.tensor([[-2.0, -1.0, 0.0, 3.0]]))
    assert float(stream_attribution([torch.full((1, 1, 4), 7.0)], torch.ones(1, 1, dtype=torch.bool), u)) == 0.0


def test_head_attribution_is_each_heads_result_dotted_with_its_positions_direction():
    result = torch.zeros(1, 2, 2, 3)  # (batch, pos, head, d_model)
    result[0, 0, 0] = torch.tensor([1.0, 0.0, 0.0])
    result[0, 1, 1] = torch.tensor([0.0, 2.0, 0.0])
    valid = torch.tensor([[True, True]])
    directions = torch.tensor([[1.0, 1.0, 0.0], [0.0, -1.0, 0.0]])
    values = head_attribution([result], valid, directions)
    torch.testing.assert_close(values, torch.tensor([[[1.0, 0.0], [0.0, -2.0]]]))


def test_moments_over_two_batches_equal_the_pooled_mean_std_and_positive_share():
    acc = HeadAttribution(1, 1)
    acc.update(torch.tensor([[[1.0, 2.0]]]))
    acc.update(torch.tensor([[[-3.0]]]))
    out = acc.compute()
    values = [1.0, 2.0, -3.0]
    mean = sum(values) / 3
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / 3)
    assert abs(float(out["dla_mean"]) - mean) < 1e-12
    assert abs(float(out["dla_std"]) - std) < 1e-12
    assert float(out["dla_positive_share"]) == 2 / 3


def test_small_spread_about_a_large_mean_over_batches_matches_a_two_pass_reference():
    """1e4 + 1e-3·{0, ..., 9} over three batches of float32 values: a raw E[x²] − E[x]² of the float32 values loses the
    spread entirely; the batches' centred sums keep it to 1e-6 relative."""
    values = 1e4 + 1e-3 * torch.arange(10, dtype=torch.float64)
    acc = HeadAttribution(1, 1)
    for part in (values[:3], values[3:4], values[4:]):
        acc.update(part.float()[None, None])
    x = values.float().double()
    reference = float(((x - x.mean()) ** 2).mean().sqrt())
    naive = float((values.float().pow(2).mean() - values.float().mean() ** 2).clamp_min(0).sqrt())
    assert abs(naive - reference) > 0.5 * reference  # the raw form is useless here
    assert abs(float(acc.compute()["dla_std"]) - reference) < 1e-6 * reference


def test_no_positions_give_nan_not_zero():
    acc = HeadAttribution(1, 2)
    acc.update(torch.zeros(1, 2, 0))
    assert torch.isnan(acc.compute()["dla_mean"]).all()


def test_decomposition_error_is_summed_absolute_difference_over_summed_absolute_logit():
    acc = Decomposition()
    acc.update(torch.tensor([1.0, -2.0]), torch.tensor([1.5, -2.0]))
    out = acc.compute()
    assert abs(float(out["decomposition_error"]) - 0.5 / 3.5) < 1e-12 and float(out["positions"]) == 2
