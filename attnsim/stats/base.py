"""Base class of streaming, mergeable accumulators.

Accumulators are ``torchmetrics.Metric`` subclasses whose states are
fixed-shape tensors of sums and counts with ``dist_reduce_fx="sum"``, divided
only in ``compute()``. Memory does not grow with the number of windows, two
accumulators merge exactly (``merge``), and Lightning DDP ranks reduce by
summation.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Tuple

import torch
from torchmetrics import Metric


class Accumulator(Metric):
    """A streaming statistic: ``update(view)``, ``merge(other)``, ``compute() -> dict of tensors``.

    Subclasses follow torchmetrics' functional pattern: a plain ``_<stat>_update`` function turns
    one batch's tensors into increments of the sum states and a plain ``_<stat>_compute`` turns the
    states into statistics (both callable with hand-made tensors); ``update(view)`` reads the
    tensors from the batch's :class:`~attnsim.stats.pairs.PairView` and :meth:`fold` s the increments.
    """

    full_state_update = False
    higher_is_better = None
    is_differentiable = False

    reducers: Tuple[type, ...] = ()
    """:class:`~attnsim.stats.pairs.ChunkReducer` classes whose per-batch sums :meth:`update` reads:
    the finding registers them with the view so that they run in its single window walk."""

    def add_sum(self, name: str, *shape: int, dtype: torch.dtype = torch.float64) -> None:
        """Register a zero-initialised sum state of ``shape``."""
        self.add_state(name, default=torch.zeros(shape, dtype=dtype), dist_reduce_fx="sum")

    def fold(self, increments: Mapping[str, torch.Tensor]) -> None:
        """Add each increment into the sum state of the same name (in place, as ``state += increment``)."""
        for name, value in increments.items():
            state = getattr(self, name)
            state += value

    def _wrap_compute(self, compute: Callable) -> Callable:
        # Like torchmetrics' wrapper (cache, DDP sync), minus its squeeze of
        # one-element results: a (layer, head) statistic of a 1-layer, 1-head
        # model must keep its shape.
        @functools.wraps(compute)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if self._computed is not None:
                return self._computed
            with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=self._to_sync, should_unsync=self._should_unsync):
                value = compute(*args, **kwargs)
                value = {k: v.clone() for k, v in value.items()} if isinstance(value, dict) else value
            if self.compute_with_cache:
                self._computed = value
            return value

        return wrapped

    def merge(self, other: "Accumulator") -> "Accumulator":
        """Add ``other``'s sums into this accumulator (exact; equal to having seen both inputs)."""
        self.merge_state(other)
        self._computed = None  # merge_state keeps a stale cached compute()
        return self


def safe_divide(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den`` with NaN where ``den == 0`` (undefined, never a silent 0)."""
    out = num / den.where(den != 0, torch.ones_like(den))
    return out.masked_fill(den == 0, float("nan"))
