"""numba kernels of :mod:`attnsim.stats.pairs.kernels` (imported there on first use only; see its docstring).

Rows are float32; every kernel returns False when it meets NaN or cannot fill a row, and the caller
then takes the fallback path.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(nogil=True, boundscheck=False, cache=True)
def _kth_smallest(a, n, target):  # pragma: no cover - compiled
    # the value of rank `target` (0-based, ascending) of a[:n], reordering a[:n] in place (Hoare's quickselect,
    # median-of-three pivot): a[:target] then holds values <= it and a[target + 1:n] values >= it
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < a[lo]:
            a[mid], a[lo] = a[lo], a[mid]
        if a[hi] < a[lo]:
            a[hi], a[lo] = a[lo], a[hi]
        if a[hi] < a[mid]:
            a[hi], a[mid] = a[mid], a[hi]
        pivot = a[mid]
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while pivot < a[j]:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if target <= j:
            hi = j
        elif target >= i:
            lo = i
        else:
            break
    return a[target]


@numba.njit(nogil=True, boundscheck=False, cache=True)
def _rth_largest(sample, m, r, buf):  # pragma: no cover - compiled
    # the r-th largest of sample[:m] (no NaN), through an ascending buffer of the r largest seen so far
    for s in range(r):
        buf[s] = sample[s]
    buf[:r].sort()
    for s in range(r, m):
        v = sample[s]
        if v > buf[0]:
            j = 1
            while j < r and buf[j] < v:
                buf[j - 1] = buf[j]
                j += 1
            buf[j - 1] = v
    return buf[0]


@numba.njit(nogil=True, boundscheck=False, cache=True)
def _select(x, k, stride, sample, cand_v, cand_i, out):  # pragma: no cover - compiled
    # the k largest entries of x in ascending position (a tie at the k-th value to the lowest positions):
    # returns (filled, kth, below), below >= the (k+1)-th largest value (module docstring of kernels)
    n = x.shape[0]
    m = (n + stride - 1) // stride
    r = min(m, k // stride + 2 * int(math.sqrt(k / stride)) + 3)
    nan = False
    for s in range(m):
        sample[s] = x[s * stride]
        nan |= sample[s] != sample[s]
    t = _rth_largest(sample, m, r, sample[m:]) if r < m and not nan else -np.inf
    c = 0
    for i in range(n):  # branch-free compaction of the entries >= t
        v = x[i]
        cand_v[c] = v
        cand_i[c] = i
        c += v >= t
        nan |= v != v
    if nan:
        return False, np.float32(0), np.float32(0)
    if c < k:  # the sample's threshold was too high: every entry is a candidate
        t = -np.inf
        for i in range(n):
            cand_v[i] = x[i]
            cand_i[i] = i
        c = n
    work = sample[2 * m :]  # scratch of n entries after the sample and its buffer
    for j in range(c):
        work[j] = cand_v[j]
    kth = _kth_smallest(work, c, c - k)
    below = np.float32(t)  # the (k+1)-th largest value of the row is at most this
    if c > k:
        below = work[: c - k].max()  # the candidates below the k-th, after the selection
    above = 0
    for j in range(c):
        if cand_v[j] > kth:
            above += 1
    need = k - above
    w = 0
    for j in range(c):
        v = cand_v[j]
        if v > kth:
            out[w] = cand_i[j]
            w += 1
        elif v == kth and need > 0:
            out[w] = cand_i[j]
            w += 1
            need -= 1
    return w == k, kth, below


@numba.njit(nogil=True, boundscheck=False, cache=True)
def _scratch(n, stride):  # pragma: no cover - compiled
    # _select's buffers for rows of n entries: the sample with its buffer and scratch, candidate values and positions
    return np.empty(2 * ((n + stride - 1) // stride) + n, np.float32), np.empty(n, np.float32), np.empty(n, np.int64)


@numba.njit(nogil=True, boundscheck=False, cache=True)
def top_rows(values, k, stride, out, kth_out, next_out):  # pragma: no cover - compiled
    """values (R, n) float32 -> out (R, k) int64 ascending positions, kth_out and next_out (R,) float32."""
    rows, n = values.shape
    sample, cand_v, cand_i = _scratch(n, stride)
    for row in range(rows):
        ok, kth, below = _select(values[row], k, stride, sample, cand_v, cand_i, out[row])
        if not ok:
            return False
        kth_out[row] = kth
        next_out[row] = below
    return True


@numba.njit(nogil=True, boundscheck=False, cache=True)
def pair_top_rows(matrices, tokens, counts, heads, offset, symmetric, stride, out):  # pragma: no cover - compiled
    """matrices (R, T, T) float32, row r of window w = (offset + r) // heads; tokens (windows, T) bool;
    counts (windows,) int64: the counts[w] largest valid pairs i < j of each matrix by ``M[i, j]``
    (``max(M[i, j], M[j, i])`` when symmetric), in pair order (``triu_indices``), invalid pairs (a token
    not in ``tokens``) ranking last -> out (R, S) int64, ascending, slots from counts[w] on set to P."""
    rows, size = matrices.shape[0], matrices.shape[1]
    n = size * (size - 1) // 2
    values = np.empty(n, np.float32)
    sample, cand_v, cand_i = _scratch(n, stride)
    for row in range(rows):
        window = (offset + row) // heads
        k = counts[window]
        out[row, k:] = n
        if k == 0:
            continue
        if k >= n:
            return False
        a = matrices[row]
        token = tokens[window]
        p = 0
        for i in range(size):
            for j in range(i + 1, size):
                v = a[i, j]
                if symmetric:
                    w = a[j, i]
                    if w > v or w != w:
                        v = w
                values[p] = v if token[i] and token[j] else -np.inf
                p += 1
        ok, kth, below = _select(values, k, stride, sample, cand_v, cand_i, out[row])
        if not ok:
            return False
    return True


@numba.njit(nogil=True, boundscheck=False, cache=True)
def _mark_invalid(dest, token, value):  # pragma: no cover - compiled
    # dest (P,) pair values of one matrix: every pair holding a token not in `token` set to `value`
    size = token.shape[0]
    for t in range(size):
        if token[t]:
            continue
        for i in range(t):  # pairs (i, t), i < t
            dest[i * (2 * size - i - 1) // 2 + t - i - 1] = value
        first = t * (2 * size - t - 1) // 2  # pairs (t, j), j > t: one run
        dest[first : first + size - 1 - t] = value


@numba.njit(nogil=True, boundscheck=False, cache=True)
def csm_pair_rows(matrices, tokens, counts, heads, offset, stride, pairs_out, index_out, kth_out, next_out):  # pragma: no cover - compiled
    """matrices (R, T, T) float32 CSM (the upper triangle is read), row r of window w = (offset + r) // heads;
    tokens (windows, T) bool; counts (windows,) int64 ->
    pairs_out (R, P) float32: the pair values (``triu_indices`` order), 0 at invalid pairs (a token not in ``tokens``);
    index_out (R, S) int64: the counts[w] largest valid pairs, ascending, slots from counts[w] on set to P;
    kth_out, next_out (R,) float32: the k-th largest value and a bound of the (k+1)-th (+inf, -inf when k = 0)."""
    rows, size = matrices.shape[0], matrices.shape[1]
    n = size * (size - 1) // 2
    sample, cand_v, cand_i = _scratch(n, stride)
    for row in range(rows):
        window = (offset + row) // heads
        a = matrices[row]
        token = tokens[window]
        dest = pairs_out[row]
        p = 0
        for i in range(size - 1):  # row i's pairs (i, i+1..T-1) are one run of the matrix's row
            dest[p : p + size - 1 - i] = a[i, i + 1 :]
            p += size - 1 - i
        partial = not token.all()
        k = counts[window]
        index_out[row, k:] = n
        if k == 0:
            kth_out[row] = np.inf
            next_out[row] = -np.inf
        elif k >= n:
            return False
        else:
            if partial:  # invalid pairs rank last in the choice
                _mark_invalid(dest, token, np.float32(-np.inf))
            ok, kth, below = _select(dest, k, stride, sample, cand_v, cand_i, index_out[row])
            if not ok:
                return False
            kth_out[row] = kth
            next_out[row] = below
        if partial:  # and add nothing to any sum
            _mark_invalid(dest, token, np.float32(0))
    return True
