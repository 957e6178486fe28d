"""The compiled top-k kernel of the high-pair rules, and its fallback.

The top-fraction rule (:mod:`attnsim.stats.pairs.selection`) chooses, per window, layer and head,
the ``k`` largest of P pair values (2% of them; a tie at the k-th value goes to the lowest pair
index). :func:`compiled_top` makes that choice with a kernel compiled by numba (a PyPI wheel that
needs no compiler), one row at a time while the row is in cache:

1. a threshold ``t`` from a strided sample of the row: the ``r``-th largest of every ``stride``-th
   entry, with ``r`` a few standard deviations above ``k / stride``, so that usually a little more
   than ``k`` entries reach it;
2. one pass keeps the entries ``>= t`` as candidates (in ascending position); when fewer than ``k``
   reach ``t`` (rare: a row whose largest values cluster between sample points), every entry is a
   candidate;
3. the k-th largest candidate ``v_k`` by introselect; the entries above it, then the first entries
   equal to it, are the k chosen ones, in ascending position (the tie rule).

Every entry ``>= v_k`` is a candidate (``v_k >= t``), so the choice is exact, ties included: the
same positions as :func:`~attnsim.stats.pairs.selection.exact_top`. The kernel also returns each
row's ``v_k`` and an upper bound of its (k+1)-th largest value (the largest candidate not chosen,
or ``t`` when no candidate is left), from which the CSM walk certifies that a float32 CSM chooses
the same pairs as the float64 one (:mod:`attnsim.stats.pairs.view`).

When numba is missing or its JIT is disabled, :func:`compiled_available` is False and callers use
:func:`~attnsim.stats.pairs.selection.partition_top` (NumPy partition, with the float64 CSM), after
one :class:`RuntimeWarning`. Compiled code is cached by numba beside this module (its own cache,
like Python's bytecode), so only a process on a fresh install pays the compilation (~5 s).
Rows are split across ``torch.get_num_threads()`` threads (the kernel releases the GIL).

All functions are pure: tensors in, tensors out.
"""

from __future__ import annotations

import math
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Tuple

import numpy as np
import torch

SAMPLE_STRIDE = 16
"""Every this many entries of a row form the sample that sets the candidate threshold."""

DISABLE_ENV = "ATTNSIM_COMPILED"
"""Set to ``0`` to use the fallback path (NumPy partition and the float64 CSM) even where numba works."""

_state = {"kernel": None, "checked": False, "pool": None, "threads": 0}


def _build():
    # numba is imported on first use only: it is not needed before the statistics pass
    import numba

    if numba.config.DISABLE_JIT:
        return None

    @numba.njit(cache=True, nogil=True, boundscheck=False)
    def top_rows(values, k, stride, out, kth_out, next_out):  # pragma: no cover - compiled
        rows, n = values.shape
        m = (n + stride - 1) // stride
        sample = np.empty(m, np.float32)
        cand_v = np.empty(n, np.float32)
        cand_i = np.empty(n, np.int64)
        r = min(m, k // stride + 2 * int(math.sqrt(k / stride)) + 3)
        for row in range(rows):
            x = values[row]
            for s in range(m):
                sample[s] = x[s * stride]
            t = np.partition(sample, m - r)[m - r] if r < m else -np.inf
            c = 0
            nan = False
            for i in range(n):  # branch-free compaction of the entries >= t
                v = x[i]
                cand_v[c] = v
                cand_i[c] = i
                c += v >= t
                nan |= v != v
            if nan:
                return False
            if c < k:  # the sample's threshold was too high: every entry is a candidate
                t = -np.inf
                for i in range(n):
                    cand_v[i] = x[i]
                    cand_i[i] = i
                c = n
            part = np.partition(cand_v[:c].copy(), c - k)
            kth = part[c - k]
            below = t  # the (k+1)-th largest value of the row is at most this
            if c > k:
                below = part[: c - k].max()
            above = 0
            for j in range(c):
                if cand_v[j] > kth:
                    above += 1
            need = k - above
            w = 0
            for j in range(c):
                v = cand_v[j]
                if v > kth:
                    out[row, w] = cand_i[j]
                    w += 1
                elif v == kth and need > 0:
                    out[row, w] = cand_i[j]
                    w += 1
                    need -= 1
            if w != k:
                return False
            kth_out[row] = kth
            next_out[row] = below
        return True

    return top_rows


def compiled_available() -> bool:
    """Whether the compiled kernel can run (numba importable, JIT enabled, not disabled by ``ATTNSIM_COMPILED=0``).

    The first call that finds it unavailable warns once (:class:`RuntimeWarning`) that the statistics use
    the fallback path.
    """
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return False
    if not _state["checked"]:
        _state["checked"] = True
        try:
            _state["kernel"] = _build()
        except ImportError:
            _state["kernel"] = None
        if _state["kernel"] is None:
            warnings.warn(
                "numba is not installed or its JIT is disabled: attnsim's statistics use the fallback path "
                "(NumPy partition, float64 CSM), with the same results but slower. Fix: pip install numba.",
                RuntimeWarning,
                stacklevel=2,
            )
    return _state["kernel"] is not None


def path_name() -> str:
    """``compiled`` or ``fallback``: the selection path this process uses (for the run's tags)."""
    return "compiled" if compiled_available() else "fallback"


def _pool(threads: int) -> ThreadPoolExecutor:
    if _state["pool"] is None or _state["threads"] != threads:
        if _state["pool"] is not None:
            _state["pool"].shutdown(wait=False)
        _state["pool"] = ThreadPoolExecutor(threads, thread_name_prefix="attnsim-top")
        _state["threads"] = threads
    return _state["pool"]


def compiled_top(values: torch.Tensor, k: int) -> Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The ``k`` largest entries of each row, with the tie rule, by the compiled kernel (module docstring).

    Args:
        values: (..., n) float32 on the CPU; entries of -inf rank last.
        k: 0 < k < n.

    Returns:
        ``(index, kth, below)``: (..., k) int64 positions in ascending order (a tie at the k-th value goes
        to the lowest positions, as :func:`~attnsim.stats.pairs.selection.exact_top`), (...) float32 the
        k-th largest value and (...) float32 an upper bound of the (k+1)-th largest value (equal to the
        k-th where they tie). None when the kernel is unavailable, or for NaN, another device or dtype,
        or k outside 0 < k < n (the caller then takes the fallback path).
    """
    n = values.shape[-1]
    if values.device.type != "cpu" or values.dtype != torch.float32 or not 0 < k < n or not compiled_available():
        return None
    lead = values.shape[:-1]
    rows = np.ascontiguousarray(values.reshape(-1, n).numpy())
    count = rows.shape[0]
    index = np.empty((count, k), np.int64)
    kth = np.empty(count, np.float32)
    below = np.empty(count, np.float32)
    kernel = _state["kernel"]
    threads = max(1, min(torch.get_num_threads(), count))
    if threads == 1:
        ok = kernel(rows, k, SAMPLE_STRIDE, index, kth, below)
    else:
        step = -(-count // threads)
        parts = [slice(s, min(s + step, count)) for s in range(0, count, step)]
        jobs = [_pool(threads).submit(kernel, rows[p], k, SAMPLE_STRIDE, index[p], kth[p], below[p]) for p in parts]
        ok = all(job.result() for job in jobs)
    if not ok:
        return None
    return torch.from_numpy(index).reshape(*lead, k), torch.from_numpy(kth).reshape(lead), torch.from_numpy(below).reshape(lead)


__all__ = ["SAMPLE_STRIDE", "DISABLE_ENV", "compiled_available", "path_name", "compiled_top"]
