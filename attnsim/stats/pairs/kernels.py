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
:func:`compiled_csm_walk` is the CSM walk's single pass per (window, layer, head): from the head's vectors
it computes the CSM's pair values as float32 dot products straight into pair space (the T x T matrix is
never formed), chooses the high pairs from them (invalid pairs at -inf), leaves 0 at invalid pairs for the
sums of the other reducers, and makes the sums of the pair classes, of the squares and of each pair over
the windows (the reducers' ``_ClassSums`` and ``PairSums``), while the values are in cache. The
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
from typing import NamedTuple, Optional, Sequence, Tuple

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
    size = matrices.shape[-1]
    n = size * (size - 1) // 2
    if matrices.device.type != "cpu" or matrices.dtype != torch.float32 or not all(0 <= x < n for x in k) or not compiled_available():
        return None
    lead = matrices.shape[:-2]
    heads = int(np.prod(lead[1:], dtype=np.int64)) if len(lead) > 1 else 1
    rows = np.ascontiguousarray(matrices.reshape(-1, size, size).numpy())
    token = np.ascontiguousarray(tokens.bool().numpy())
    counts = np.asarray(k, dtype=np.int64)
    count = rows.shape[0]
    index = np.empty((count, max(k, default=0)), np.int64)
    kernel = _state["kernel"].pair_top_rows
    if not _in_parts(count, lambda p: kernel(rows[p], token, counts, heads, p.start, symmetric, SAMPLE_STRIDE, index[p])):
        return None
    return torch.from_numpy(index).reshape(*lead, index.shape[1])


CERTIFY_MARGIN = 2.0
"""A float32 choice of high pairs stands where its k-th value exceeds the bound of the (k+1)-th by more than this many
error bounds (each of the two values may lie one bound away from its float64 value); other rows are chosen again."""

CERTIFIED, RECHOSEN, UNCHOSEN = 0, 1, 2
""":attr:`CSMWalk.status` of a row: the float32 choice stands; chosen again among float64 products rounded once; not
chosen (the row holds NaN: the caller chooses it)."""


class CSMWalk(NamedTuple):
    """What :func:`compiled_csm_walk` computes for a chunk of W windows, L layers and H heads (P pairs)."""

    pairs: torch.Tensor
    """(W, L, H, P) float32 CSM pair values (float32 products), 0 at invalid pairs."""
    index: torch.Tensor
    """(W, L, H, max(k)) int64 the high pairs, ascending, P in the slots from k[w] on (and in rows not chosen)."""
    status: torch.Tensor
    """(W, L, H) int8 how each row's high pairs were chosen: :data:`CERTIFIED`, :data:`RECHOSEN` or :data:`UNCHOSEN`."""
    kth: torch.Tensor
    """(W, L, H) float32 the float32 products' k-th largest valid value (+inf where k = 0, NaN in rows holding NaN)."""
    below: torch.Tensor
    """(W, L, H) float32 an upper bound of their (k+1)-th largest valid value (-inf where k = 0, NaN in rows holding NaN)."""
    error: torch.Tensor
    """(W, L, H) float32 the bound of a value's float32 rounding error, :func:`~attnsim.stats.pairs.geometry.product_error`."""
    class_sums: torch.Tensor
    """(W, L * H, 5) float64 the pair values summed against each of the 5 weight rows."""
    tie_decided: torch.Tensor
    """(W, L, H) int64 how many of the k high pairs ties decided: the pairs within ``error`` of the k-th value cannot be
    ordered at float32 precision; where more of them exist than choices left for them, those choices fall to the tie
    rule (:func:`~attnsim.stats.pairs.selection.tie_decided`); 0 where k = 0 and in rows holding NaN."""
    squares: torch.Tensor
    """(W, L, H) float64 the valid pair values' squared deviations from their window's mean (``class_sums[..., 0]``
    over the valid pairs), summed: two passes over the values in cache, so no cancellation when |mean| >> spread."""


def compiled_csm_walk(
    vectors: torch.Tensor,
    tokens: torch.Tensor,
    k: Sequence[int],
    weights: torch.Tensor,
    totals: Optional[torch.Tensor] = None,
    margins: Optional[Sequence[float]] = None,
) -> Optional[CSMWalk]:
    """The CSM walk of a chunk of windows in one kernel pass per (window, layer, head), while each matrix is in cache.

    Per matrix the kernel computes the CSM's pair values ``z_i · z_j``, i < j, as float32 dot products straight into
    pair space (the T x T matrix is never formed), and the bound of their rounding error; it chooses the window's
    ``k[w]`` largest valid pairs as :func:`compiled_top` does (same pairs, tie rule, ``kth`` and ``below``; invalid pairs
    rank last). Where the k-th value does not exceed the bound of the (k+1)-th by more than ``margins[w]`` error bounds,
    the float32 values cannot settle the choice, and the row is chosen again among float64 products rounded once to
    float32 (the fallback path's values), so the high pairs are always those of the float64 CSM. It leaves 0 at invalid
    pairs, sums the values against each weight row and their squared deviations from the window's mean (float64, a
    second pass), and adds them to ``totals``. A row
    holding NaN gets no choice (status :data:`UNCHOSEN`): the caller chooses it.

    Source: the CSM of Halevi et al., arXiv:2512.21956 (``Z Zᵀ``, diagonal 0); the error bound, Higham, *Accuracy and
    Stability of Numerical Algorithms*, 2nd ed., Sec. 3.1 (a float32 dot product in any order).

    Args:
        vectors: (W, L, H, T, d) float32 per-head vectors on the CPU.
        tokens: (W, T) bool, tokens that enter statistics.
        k: per window, the number of high pairs, 0 <= k < T(T-1)/2 (Python ints; 0: no choice).
        weights: (W, 5, P) float32 pair weights (the pair-class masks of :data:`~attnsim.stats.pairs.geometry.PAIR_CLASSES`,
            transposed).
        totals: (L, H, P) float32 contiguous, or None: each window's pair values are added to it, window after window.
        margins: per window, the multiple of the error bound a float32 choice's gap must exceed (default
            :data:`CERTIFY_MARGIN`; larger values choose more rows again, inf every row).

    Returns:
        :class:`CSMWalk`; None when the kernel is unavailable, for another device or dtype, or a k out of range (the
        caller then computes the chunk on the fallback path, and ``totals`` is left as it was).
    """
    windows, layers, heads, size, d = vectors.shape
    n = size * (size - 1) // 2
    tensors = (vectors, weights) + ((totals,) if totals is not None else ())
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in tensors) or not all(0 <= x < n for x in k) or weights.shape[1] != 5:
        return None
    if totals is not None and not totals.is_contiguous() or not compiled_available():
        return None
    rows = layers * heads
    z = np.ascontiguousarray(vectors.reshape(windows, rows, size, d).numpy())
    token = np.ascontiguousarray(tokens.bool().numpy())
    counts = np.asarray(k, dtype=np.int64)
    weight = np.ascontiguousarray(weights.numpy())
    margin = np.asarray([CERTIFY_MARGIN] * windows if margins is None else margins, dtype=np.float64)
    total = totals.view(rows, n).numpy() if totals is not None else np.empty((rows, 0), np.float32)
    pairs = np.empty((windows, rows, n), np.float32)
    index = np.empty((windows, rows, max(k, default=0)), np.int64)
    kth, below, error = (np.empty((windows, rows), np.float32) for _ in range(3))
    status = np.empty((windows, rows), np.int8)
    class_sums = np.empty((windows, rows, weight.shape[1]), np.float64)
    squares = np.empty((windows, rows), np.float64)
    tied = np.empty((windows, rows), np.int64)
    scale = (d + 2) * 2.0**-24
    kernel = _state["kernel"].csm_walk_rows

    def part(p: slice) -> bool:  # the heads p of every window: parts add to different rows of `totals`
        return kernel(
            z, token, counts, weight, margin, p.start, p.stop, SAMPLE_STRIDE, scale, totals is not None,
            pairs, index, kth, below, error, status, class_sums, squares, total, tied,
        )  # fmt: skip

    _in_parts(rows, part)
    lead = (windows, layers, heads)
    return CSMWalk(
        torch.from_numpy(pairs).view(*lead, n),
        torch.from_numpy(index).view(*lead, index.shape[-1]),
        torch.from_numpy(status).view(lead),
        torch.from_numpy(kth).view(lead),
        torch.from_numpy(below).view(lead),
        torch.from_numpy(error).view(lead),
        torch.from_numpy(class_sums),
        torch.from_numpy(tied).view(lead),
        torch.from_numpy(squares).view(lead),
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


__all__ = [
    "SAMPLE_STRIDE",
    "DISABLE_ENV",
    "requested",
    "compiled_available",
    "path_name",
    "compiled_top",
    "compiled_pair_top",
    "CERTIFY_MARGIN",
    "CERTIFIED",
    "RECHOSEN",
    "UNCHOSEN",
    "CSMWalk",
    "compiled_csm_walk",
]
