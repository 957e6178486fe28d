"""Base class of streaming, mergeable accumulators.

Accumulators are ``torchmetrics.Metric`` subclasses whose states are
fixed-shape tensors of sums and counts with ``dist_reduce_fx="sum"``, divided
only in ``compute()``. Memory does not grow with the number of windows, two
accumulators merge exactly (``merge``), and Lightning DDP ranks reduce by
summation: :meth:`Accumulator.reduce_across_ranks` (all ranks, after predict) sums every
state over the processes of a distributed run, after which ``compute()`` on any rank sees the
whole corpus. ``compute()`` itself never communicates (``sync_on_compute=False``), so rank 0
can summarise alone, and a failed rank cannot leave the others waiting in ``compute()``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Tuple

import torch
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_sum


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

    def __init__(self, **kwargs: Any) -> None:
        # compute() stays local: the cross-rank sum is the explicit reduce_across_ranks() (see module docstring)
        kwargs.setdefault("sync_on_compute", False)
        super().__init__(**kwargs)

    def reduce_across_ranks(self) -> None:
        """Sum every state over the processes of the default ``torch.distributed`` process group, in place.

        Every rank must call it (a collective ``all_reduce(SUM)`` per state, in registration order);
        afterwards each rank holds the states of all ranks' windows, exactly as one process that
        saw them all (up to float64 summation order). Without an initialised process group, or
        with one process, it does nothing. Tensors stay on their device (gloo on CPU, NCCL on GPU).

        Raises:
            ValueError: a state is not a sum (every state must be registered with :meth:`add_sum`).
        """
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return
        for name in self._defaults:
            state = getattr(self, name)
            if self._reductions[name] is not dim_zero_sum or not isinstance(state, torch.Tensor):
                raise ValueError(f"{type(self).__name__} state '{name}' is not a sum tensor; register states with add_sum so that ranks reduce exactly.")
            dist.all_reduce(state, op=dist.ReduceOp.SUM)
        self._computed = None

    def add_sum(self, name: str, *shape: int, dtype: torch.dtype = torch.float64) -> None:
        """Register a zero-initialised sum state of ``shape``.

        The default that torchmetrics keeps for ``reset()`` is one zero broadcast to ``shape`` (``reset()`` clones
        it into a full tensor): a full default would hold a second copy of every state (the corpus-mean CSM
        matrix's or the anchors' per-head counts by token id: 106 MiB each for SmolLM2's 270 heads and 49,152 ids).
        """
        zero = torch.zeros((), dtype=dtype)
        self.add_state(name, default=zero, dist_reduce_fx="sum")  # registered with a one-element default (add_state copies it)
        self._defaults[name] = zero.expand(shape)
        setattr(self, name, torch.zeros(shape, dtype=dtype))

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
