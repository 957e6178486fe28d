"""Band statistic of cross-attention alignment and its chance value, on hand-worked tensors."""

from __future__ import annotations

import math

import torch

from attnsim.stats.alignment import AlignmentAccumulator, band_chance, band_mask, band_mass, relative_bins


def test_band_of_a_two_by_four_map():
    # u = (0.25, 0.75), v = (0.125, 0.375, 0.625, 0.875): with w = 0.125 each row's band is two columns
    band = band_mask(2, 4, 0.125)
    assert band.tolist() == [[True, True, False, False], [False, False, True, True]]
    assert band_chance(band).tolist() == [0.5, 0.5]
    # with w = 0.1 no column is within w: the nearest (lower on a tie) is kept, so no band is empty
    assert band_mask(2, 4, 0.1).tolist() == [[True, False, False, False], [False, False, True, False]]


def test_band_of_a_square_map_is_the_diagonal_and_chance_one_over_n():
    band = band_mask(3, 3, 0.1)
    assert torch.equal(band, torch.eye(3, dtype=torch.bool))
    assert torch.allclose(band_chance(band), torch.full((3,), 1 / 3, dtype=torch.float64))
    assert band_mask(3, 3, 1.0).all()  # w = 1: every column, chance 1


def test_band_mass_sums_the_band():
    cross = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.4, 0.4]])
    assert torch.allclose(band_mass(cross, band_mask(2, 4, 0.125)), torch.tensor([0.8, 0.8], dtype=torch.float64))


def test_relative_bins_share_each_token_interval():
    assert torch.allclose(relative_bins(3, 2), torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]], dtype=torch.float64))
    assert torch.allclose(relative_bins(7, 5).sum(1), torch.ones(7, dtype=torch.float64))


def test_accumulator_means_over_rows_ignores_padding_and_merges():
    # layer 0 head 0: pair A (2 target x 4 source, hand values above), pair B (3 x 3 identity) padded to T=3, S=4
    a = torch.zeros(3, 4)
    a[:2] = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.4, 0.4]])
    b = torch.zeros(3, 4)
    b[:, :3] = torch.eye(3)
    cross = [torch.stack([a, b])[:, None]]  # one layer: (batch 2, head 1, T 3, S 4)
    source_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    target_mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    acc = AlignmentAccumulator(1, 1, width=0.125, bins=2)
    acc.update(cross, source_mask, target_mask)
    out = acc.compute()
    # rows: A's two rows (mass 0.8 each, chance 0.5 each), B's three rows (mass 1, chance 1/3 each: w = 0.125 < 1/3)
    assert math.isclose(out["band_mass"].item(), (0.8 + 0.8 + 3 * 1.0) / 5, rel_tol=1e-6)
    assert math.isclose(out["band_mass_chance"].item(), (0.5 + 0.5 + 3 / 3) / 5, rel_tol=1e-6)
    assert math.isclose(out["band_excess"].item(), (4.6 - 2.0) / 5, rel_tol=1e-6)
    # corpus map rows are distributions over source bins
    assert torch.allclose(out["corpus_map"].sum(-1), torch.ones(1, 1, 2, dtype=torch.float64))
    # pair B alone: the identity resampled to 2 bins is [[5/6, 1/6], [1/6, 5/6]]
    only_b = AlignmentAccumulator(1, 1, width=0.125, bins=2)
    only_b.update([cross[0][1:]], source_mask[1:], target_mask[1:])
    assert torch.allclose(only_b.compute()["corpus_map"][0, 0], torch.tensor([[5 / 6, 1 / 6], [1 / 6, 5 / 6]], dtype=torch.float64))
    only_a = AlignmentAccumulator(1, 1, width=0.125, bins=2)
    only_a.update([cross[0][:1]], source_mask[:1], target_mask[:1])
    merged = only_a.merge(only_b).compute()
    assert all(torch.allclose(merged[k], out[k]) for k in out)
