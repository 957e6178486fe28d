"""attnsim.stats.base: safe division (NaN where undefined) and accumulators that merge exactly."""

from __future__ import annotations

import math

import torch

from attnsim.stats.base import Accumulator, safe_divide


def test_safe_divide_is_nan_where_the_denominator_is_zero_never_a_silent_zero():
    out = safe_divide(torch.tensor([1.0, 0.0, 3.0, -2.0]), torch.tensor([2.0, 0.0, 0.0, 4.0]))
    assert out[0] == 0.5 and out[3] == -0.5
    assert math.isnan(out[1]) and math.isnan(out[2])  # 0/0 and 3/0: undefined, not 0 or inf


class _Sums(Accumulator):
    """Sum of values and count per (layer, head): the pattern every statistic's accumulator follows."""

    def __init__(self):
        super().__init__()
        self.add_sum("total", 2, 3)
        self.add_sum("count", 2, 3)

    def update(self, values: torch.Tensor) -> None:  # (batch, layer, head)
        self.fold({"total": values.double().sum(0), "count": torch.full((2, 3), float(values.shape[0]), dtype=torch.float64)})

    def compute(self):
        return {"mean": safe_divide(self.metric_state["total"], self.metric_state["count"])}


def test_two_halves_merged_equal_the_whole():
    data = torch.arange(24, dtype=torch.float32).reshape(4, 2, 3)  # 4 windows
    whole, first, second = _Sums(), _Sums(), _Sums()
    whole.update(data)
    first.update(data[:1])
    second.update(data[1:])
    merged = first.merge(second)
    assert torch.equal(merged.compute()["mean"], whole.compute()["mean"])
    assert torch.equal(whole.compute()["mean"], data.double().mean(0))  # by hand: the mean over the 4 windows
