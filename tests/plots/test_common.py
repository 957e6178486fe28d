"""The layer rule of per-layer figures (attnsim.plots.common.shown_layers), by hand-worked values."""

from __future__ import annotations

import numpy as np
import torch

from attnsim.plots.common import MOST_LAYERS, as_float64, layer_note, shown_layers


def test_models_up_to_six_layers_show_every_layer():
    assert MOST_LAYERS == 6
    assert shown_layers(1) == [0]
    assert shown_layers(2, torch.tensor([[1.0], [2.0]])) == [0, 1]
    assert shown_layers(6, np.arange(6.0)) == [0, 1, 2, 3, 4, 5]
    assert layer_note([0, 1, 2, 3, 4, 5], 6, "mean CSM") == ""


def test_deeper_models_show_first_middle_last_and_the_extreme_layers():
    values = np.zeros((30, 9))
    values[7] = 5.0  # highest layer mean
    values[22, :3] = -9.0  # lowest layer mean (-3), by three heads only
    assert shown_layers(30, values) == [0, 7, 15, 22, 29]
    assert shown_layers(30) == [0, 15, 29]  # no statistic: first, middle, last
    assert shown_layers(7, np.arange(7.0)) == [0, 3, 6]  # the extremes are the first and last layer
    assert shown_layers(30, torch.tensor(values)) == [0, 7, 15, 22, 29]  # a tensor as an array
    assert layer_note([0, 7, 15, 22, 29], 30, "mean CSM") == (
        "layers 0, 7, 15, 22, 29 of 30: first, middle, last, highest and lowest mean CSM; every layer in the run's tables"
    )


def test_undefined_layers_are_never_extremes_and_ties_take_the_first():
    values = np.full((8, 2), np.nan)
    values[2] = [1.0, np.nan]  # mean 1 over its defined head
    values[5] = [1.0, 1.0]  # a tie with layer 2
    values[6] = [-1.0, 3.0]  # mean 1 as well
    values[1] = [0.5, 0.5]  # the lowest
    assert shown_layers(8, values) == [0, 1, 2, 4, 7]
    assert shown_layers(8, np.full((8, 2), np.nan)) == [0, 4, 7]  # nothing defined: no extremes
    assert shown_layers(12, np.arange(12.0), most=12) == list(range(12))


def test_as_float64_takes_tensors_arrays_and_numbers():
    assert as_float64(torch.tensor([1, 2], dtype=torch.int64, requires_grad=False)).dtype == np.float64
    assert as_float64(torch.ones(2, requires_grad=True)).tolist() == [1.0, 1.0]
    assert as_float64(0.5).shape == () and float(as_float64(0.5)) == 0.5
