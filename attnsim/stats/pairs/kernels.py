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

:func:`compiled_pair_top` makes the same choice reading whole T x T matrices (the attention walk's
high-attention pairs, ``max(A[i, j], A[j, i])``): each matrix's pair values are formed in cache, with
invalid pairs at -inf, instead of gathered into pair space for the whole chunk first.
:func:`compiled_csm_pairs` is the CSM walk's single pass: per matrix it copies the upper triangle
into pair space (each row's pairs are one run of the matrix's row), chooses the high pairs from those
values (invalid pairs at -inf) and leaves 0 at invalid pairs for the sums of the other reducers. The
kernels are in :mod:`attnsim.stats.pairs._compiled`.

When numba is missing or its JIT is disabled, :func:`compiled_available` is False and callers use
:func:`~attnsim.stats.pairs.selection.partition_top` (NumPy partition, with the float64 CSM), after
one :class:`RuntimeWarning`. Compiled code is cached by numba beside this module (its own cache,
like Python's bytecode), so only a process on a fresh install pays the compilation (~5 s).
Rows are split across ``torch.get_num_threads()`` pool threads (the kernel releases the GIL). On a
machine with as many cores as torch threads, torch's OpenMP workers spin on their cores for a while
after each operation; the command line shortens that spin
(:func:`attnsim.workflows.startup.short_openmp_spin`) so that the pool threads get a core.

All functions are pure: tensors in, tensors out.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Sequence, Tuple

import numpy as np
import torch

SAMPLE_STRIDE = 16
"""Every this many entries of a row form the sample that sets the candidate threshold."""

DISABLE_ENV = "ATTNSIM_COMPILED"
"""Set to ``0`` (or ``false``, ``no``, ``off``) to use the fallback path (NumPy partition and the float64 CSM) even
where numba works; ``1`` (``true``, ``yes``, ``on``) or unset: the compiled kernel where numba works."""

_OFF = ("0", "false", "no", "off")
_ON = ("", "1", "true", "yes", "on")


def requested() -> bool:
    """Whether ``ATTNSIM_COMPILED`` asks for the compiled kernel (unset: yes). Reads the environment only.

    Raises:
        ValueError: the variable holds another value than those of :data:`DISABLE_ENV`.
    """
    value = os.environ.get(DISABLE_ENV, "1").strip().lower()
    if value not in _OFF + _ON:
        raise ValueError(
            f"Environment variable {DISABLE_ENV} is {os.environ[DISABLE_ENV]!r}; use 0 (the fallback path: NumPy partition, "
            f"float64 CSM) or 1 (the compiled kernel), or unset it."
        )
    return value in _ON


_state = {"kernel": None, "checked": False, "pool": None, "threads": 0}


def _build():
    # numba is imported on first use only: it is not needed before the statistics pass
    import numba

    if numba.config.DISABLE_JIT:
        return None
    from attnsim.stats.pairs import _compiled

    return _compiled


def compiled_available() -> bool:
    """Whether the compiled kernel can run (numba importable, JIT enabled, not turned off by ``ATTNSIM_COMPILED=0``).

    The first call that finds numba missing or its JIT disabled warns once (:class:`RuntimeWarning`, naming the
    fix) that the statistics use the fallback path; ``ATTNSIM_COMPILED=0`` chooses it silently.

    Raises:
        ValueError: ``ATTNSIM_COMPILED`` holds an unknown value (:func:`requested`).
    """
    if not requested():
        return False
    if not _state["checked"]:
        _state["checked"] = True
        try:
            _state["kernel"] = _build()
            why = "numba's JIT is disabled (NUMBA_DISABLE_JIT is set). Fix: unset NUMBA_DISABLE_JIT"
        except ImportError:
            _state["kernel"] = None
            why = "numba is not installed. Fix: pip install numba"
        if _state["kernel"] is None:
            warnings.warn(
                f"attnsim's statistics use the fallback path (NumPy partition, float64 CSM), with the same results but "
                f"slower: {why} (or set {DISABLE_ENV}=0 to choose the fallback without this warning).",
                RuntimeWarning,
                stacklevel=3,
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
    kernel = _state["kernel"].top_rows
    if not _in_parts(count, lambda p: kernel(rows[p], k, SAMPLE_STRIDE, index[p], kth[p], below[p])):
        return None
    return torch.from_numpy(index).reshape(*lead, k), torch.from_numpy(kth).reshape(lead), torch.from_numpy(below).reshape(lead)


def _matrix_rows(matrices: torch.Tensor, tokens: torch.Tensor, k: Sequence[int]):
    # the square-matrix kernels' inputs as NumPy arrays: (lead, heads per window, (R, T, T) rows, (windows, T)
    # tokens, (windows,) counts, P); None when the kernel is unavailable, for another device or dtype, or a k out of range
    size = matrices.shape[-1]
    n = size * (size - 1) // 2
    if matrices.device.type != "cpu" or matrices.dtype != torch.float32 or not all(0 <= x < n for x in k) or not compiled_available():
        return None
    lead = matrices.shape[:-2]
    heads = int(np.prod(lead[1:], dtype=np.int64)) if len(lead) > 1 else 1
    rows = np.ascontiguousarray(matrices.reshape(-1, size, size).numpy())
    return lead, heads, rows, np.ascontiguousarray(tokens.bool().numpy()), np.asarray(k, dtype=np.int64), n


def compiled_pair_top(matrices: torch.Tensor, tokens: torch.Tensor, k: Sequence[int], symmetric: bool) -> Optional[torch.Tensor]:
    """Each window's ``k[w]`` largest valid pairs of each of its matrices, read from the whole matrices
    (no gathered pair values).

    The pair value of tokens i < j is ``M[i, j]``, or ``max(M[i, j], M[j, i])`` when ``symmetric`` (the
    high-attention rule); a pair is valid when both tokens are in ``tokens``; the choice is
    :func:`compiled_top`'s on those values with invalid pairs at -inf.

    Args:
        matrices: (windows, ..., T, T) float32 on the CPU, e.g. one layer's (batch, head, T, T) attention.
        tokens: (windows, T) bool, tokens that enter statistics.
        k: per window, the number of pairs, 0 <= k < T(T-1)/2 (Python ints).

    Returns:
        (windows, ..., max(k)) int64 pair indices (``triu_indices`` order), ascending, P = T(T-1)/2 in the
        slots from k[w] on; None when the kernel is unavailable, for NaN, another device or dtype, or a
        k out of range.
    """
    prepared = _matrix_rows(matrices, tokens, k)
    if prepared is None:
        return None
    lead, heads, rows, token, counts, n = prepared
    count = rows.shape[0]
    index = np.empty((count, max(k, default=0)), np.int64)
    kernel = _state["kernel"].pair_top_rows
    if not _in_parts(count, lambda p: kernel(rows[p], token, counts, heads, p.start, symmetric, SAMPLE_STRIDE, index[p])):
        return None
    return torch.from_numpy(index).reshape(*lead, index.shape[1])


def compiled_csm_pairs(
    matrices: torch.Tensor, tokens: torch.Tensor, k: Sequence[int]
) -> Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The CSM walk's pair values and high pairs of a chunk of windows in one pass over each matrix while it is in cache.

    For each (window, layer, head) matrix the kernel gathers the pair values ``M[i, j]``, i < j, masks the
    invalid pairs (a token not in ``tokens``), and chooses the window's ``k[w]`` largest valid pairs as
    :func:`compiled_top` does (same pairs, same tie rule, same ``kth`` and ``below``), from the values it has
    just written: no pair-space tensor is gathered, masked or read again for the choice.

    Args:
        matrices: (windows, ..., T, T) float32 CSM on the CPU (the upper triangle is read).
        tokens: (windows, T) bool, tokens that enter statistics.
        k: per window, the number of high pairs, 0 <= k < T(T-1)/2 (Python ints).

    Returns:
        ``(pairs, index, kth, below)``: (windows, ..., P) float32 pair values, 0 at invalid pairs;
        (windows, ..., max(k)) int64 pair indices, ascending, P in the slots from k[w] on; (windows, ...)
        float32 the k-th largest value and an upper bound of the (k+1)-th (+inf and -inf where k = 0).
        None when the kernel is unavailable, for NaN, another device or dtype, or a k out of range (the
        caller then gathers and chooses on the fallback path).
    """
    prepared = _matrix_rows(matrices, tokens, k)
    if prepared is None:
        return None
    lead, heads, rows, token, counts, n = prepared
    count = rows.shape[0]
    pairs = np.empty((count, n), np.float32)
    index = np.empty((count, max(k, default=0)), np.int64)
    kth = np.empty(count, np.float32)
    below = np.empty(count, np.float32)
    kernel = _state["kernel"].csm_pair_rows
    if not _in_parts(count, lambda p: kernel(rows[p], token, counts, heads, p.start, SAMPLE_STRIDE, pairs[p], index[p], kth[p], below[p])):
        return None
    return (
        torch.from_numpy(pairs).reshape(*lead, n),
        torch.from_numpy(index).reshape(*lead, index.shape[1]),
        torch.from_numpy(kth).reshape(lead),
        torch.from_numpy(below).reshape(lead),
    )


def _in_parts(count: int, call) -> bool:
    # rows split into one contiguous part per torch thread, each part a kernel call in a pool thread (running
    # one part in the calling thread instead was no faster and raised a `paper` run's peak RSS by 70-170 MiB)
    threads = max(1, min(torch.get_num_threads(), count))
    if threads == 1:
        return bool(call(slice(0, count)))
    step = -(-count // threads)
    jobs = [_pool(threads).submit(call, slice(s, min(s + step, count))) for s in range(0, count, step)]
    return all(bool(job.result()) for job in jobs)


__all__ = ["SAMPLE_STRIDE", "DISABLE_ENV", "requested", "compiled_available", "path_name", "compiled_top", "compiled_pair_top", "compiled_csm_pairs"]
