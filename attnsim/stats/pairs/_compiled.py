"""numba kernels of :mod:`attnsim.stats.pairs.kernels` (imported there on first use only; see its docstring).

Rows are float32; every kernel returns False when it meets NaN or cannot fill a row, and the caller
then takes the fallback path.
"""

from __future__ import annotations

import math

import numba
import numpy as np

REORDERED = {"reassoc", "contract"}
"""numba's fastmath flags of the kernels that sum: the compiler may reorder a sum and fuse its multiply-adds (to
vectorise it); nothing assumes finite values, so NaN and inf pass through as in any other order of the sum."""


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


@numba.njit(nogil=True, boundscheck=False, cache=True, fastmath=REORDERED)
def _upper_products(a, dest):  # pragma: no cover - compiled
    # dest (P,) <- a[i] . a[j] for the pairs i < j in pair order (row i's pairs are one run), four j's at a time
    # against one i (each value a float32 dot product of length d, in an order the compiler chooses)
    size, d = a.shape
    p = 0
    for i in range(size - 1):
        ai = a[i]
        j = i + 1
        while j + 4 <= size:
            s0 = np.float32(0)
            s1 = np.float32(0)
            s2 = np.float32(0)
            s3 = np.float32(0)
            b0, b1, b2, b3 = a[j], a[j + 1], a[j + 2], a[j + 3]
            for c in range(d):
                x = ai[c]
                s0 += x * b0[c]
                s1 += x * b1[c]
                s2 += x * b2[c]
                s3 += x * b3[c]
            dest[p] = s0
            dest[p + 1] = s1
            dest[p + 2] = s2
            dest[p + 3] = s3
            p += 4
            j += 4
        while j < size:
            s = np.float32(0)
            for c in range(d):
                s += ai[c] * a[j, c]
            dest[p] = s
            p += 1
            j += 1


@numba.njit(nogil=True, boundscheck=False, cache=True, fastmath=REORDERED)
def _largest_square(a):  # pragma: no cover - compiled
    # max_i |a_i|^2 (float64 sums of the float32 entries)
    largest = 0.0
    for i in range(a.shape[0]):
        s = 0.0
        for c in range(a.shape[1]):
            x = np.float64(a[i, c])
            s += x * x
        largest = max(largest, s)
    return largest


@numba.njit(nogil=True, boundscheck=False, cache=True, fastmath=REORDERED)
def _pair_sums(dest, weights, class_out, total, add_total):  # pragma: no cover - compiled
    # float64 sums of one matrix's pair values dest (P,) against each of the 5 weight rows (weights (5, P)) into
    # class_out (5,); returned: the valid pairs' squared deviations from their own mean (weight row 0: the valid
    # pairs), a second pass (two-pass variance: no E[x^2] - E[x]^2 cancellation when |mean| >> spread, e.g. sink
    # heads); with add_total, dest added to total (P,) float32
    n = dest.shape[0]
    count, s0, s1, s2, s3, s4 = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    w0, w1, w2, w3, w4 = weights[0], weights[1], weights[2], weights[3], weights[4]
    for p in range(n):
        x = np.float64(dest[p])
        count += w0[p]
        s0 += x * w0[p]
        s1 += x * w1[p]
        s2 += x * w2[p]
        s3 += x * w3[p]
        s4 += x * w4[p]
    class_out[0], class_out[1], class_out[2], class_out[3], class_out[4] = s0, s1, s2, s3, s4
    mean = s0 / count if count > 0 else 0.0
    centred = 0.0
    for p in range(n):
        deviation = np.float64(dest[p]) - mean
        centred += w0[p] * deviation * deviation
    if add_total:
        for p in range(n):
            total[p] += dest[p]
    return centred


@numba.njit(nogil=True, boundscheck=False, cache=True, fastmath=REORDERED)
def _wide_upper_products(a, dest):  # pragma: no cover - compiled
    # dest (P,) <- a[i] . a[j] for the pairs i < j in pair order, each a float64 dot product rounded once to float32
    size, d = a.shape
    p = 0
    for i in range(size - 1):
        for j in range(i + 1, size):
            s = 0.0
            for c in range(d):
                s += np.float64(a[i, c]) * np.float64(a[j, c])
            dest[p] = np.float32(s)
            p += 1


@numba.njit(nogil=True, boundscheck=False, cache=True)
def _tie_decided(x, k, kth, error):  # pragma: no cover - compiled
    # how many of the k choices among x (P,) (invalid entries -inf) ties decided: the entries within `error` of the
    # k-th value cannot be ordered at the model's float32 precision; when more of them exist than the k - above
    # choices left for them (above: the entries clearly larger), those k - above choices fall to the tie rule
    hi = np.float64(kth) + error
    lo = np.float64(kth) - error
    above = 0
    band = 0
    for p in range(x.shape[0]):
        v = np.float64(x[p])
        if v > hi:
            above += 1
        elif v >= lo:
            band += 1
    left = k - above
    return left if band > left else 0


@numba.njit(nogil=True, boundscheck=False, cache=True)
def _choose_row(a, dest, wide, token, partial, k, stride, sample, cand_v, cand_i, index_row, margin, error):  # pragma: no cover - compiled
    # the k largest valid pairs of one head's row of float32 products `dest` (of vectors `a`) into index_row[:k]:
    # (kth, below, status, tied) as csm_walk_rows's kth_out, next_out, status_out and tied_out give them; a choice
    # whose k-th and (k+1)-th values lie within `margin` is made again among float64 products (`wide`, scratch)
    n = dest.shape[0]
    if partial:  # invalid pairs rank last in the choice
        _mark_invalid(dest, token, np.float32(-np.inf))
    ok, kth, below = _select(dest, k, stride, sample, cand_v, cand_i, index_row)
    if not ok:  # NaN: no choice here
        index_row[:k] = n
        return np.float32(np.nan), np.float32(np.nan), 2, 0
    status = 0
    if not np.float64(kth) - np.float64(below) > margin:  # too close to call in float32
        _wide_upper_products(a, wide)
        if partial:
            _mark_invalid(wide, token, np.float32(-np.inf))
        again, _, _ = _select(wide, k, stride, sample, cand_v, cand_i, index_row)
        status = 1 if again else 2
        if not again:
            index_row[:k] = n
    return kth, below, status, _tie_decided(dest, k, kth, error)


@numba.njit(nogil=True, boundscheck=False, cache=True)
def csm_walk_rows(
    vectors,
    tokens,
    counts,
    weights,
    margins,
    first,
    stop,
    stride,
    error_scale,
    add_total,
    pairs_out,
    index_out,
    kth_out,
    next_out,
    error_out,
    status_out,
    class_out,
    squares_out,
    totals,
    tied_out,
):  # pragma: no cover - compiled
    """The CSM walk's pass over the heads first..stop-1 (of layers x heads) of every window of a chunk.

    vectors (W, H, T, d) float32 per-head vectors; tokens (W, T) bool; counts (W,) int64 high pairs per window;
    weights (W, 5, P) float32 pair weights (the pair-class masks); margins (W,) float64: a float32 choice stands where
    its k-th value exceeds the bound of the (k+1)-th by more than margins[w] times the error bound ->
    pairs_out (W, H, P) float32: CSM pair values (float32 products), 0 at invalid pairs (a token not in ``tokens``);
    index_out (W, H, S) int64: the counts[w] largest valid pairs, ascending, P in the slots from counts[w] on: the
    float32 products' choice where it stands, else (status 1) the choice among float64 products rounded once;
    kth_out, next_out (W, H) float32: the float32 products' k-th largest value and a bound of the (k+1)-th (+inf, -inf
    where k = 0; NaN where the row holds NaN); error_out (W, H) float32: error_scale * max_i |z_i|^2, the bound of a
    float32 product's error; status_out (W, H) int8: 0 the float32 choice stands, 1 chosen again from float64
    products, 2 not chosen (NaN: the caller chooses); class_out (W, H, 5) float64: pair values summed against each
    weight row; squares_out (W, H) float64: the valid pairs' squared deviations from their mean, summed (two passes); with add_total, totals (H, P) float32 += each
    window's pair values, window after window; tied_out (W, H) int64: how many of the k choices ties decided
    (:func:`_tie_decided`)."""
    windows, size = vectors.shape[0], vectors.shape[2]
    n = size * (size - 1) // 2
    sample, cand_v, cand_i = _scratch(n, stride)
    wide = np.empty(n, np.float32)
    for w in range(windows):
        token = tokens[w]
        partial = not token.all()
        k = counts[w]
        for h in range(first, stop):
            a = vectors[w, h]
            dest = pairs_out[w, h]
            _upper_products(a, dest)
            error = error_scale * _largest_square(a)
            error_out[w, h] = error
            index_out[w, h, k:] = n
            status_out[w, h] = 0
            tied_out[w, h] = 0
            if k == 0:
                kth_out[w, h] = np.inf
                next_out[w, h] = -np.inf
            else:
                kth, below, status, tied = _choose_row(
                    a, dest, wide, token, partial, k, stride, sample, cand_v, cand_i, index_out[w, h], margins[w] * error, error
                )
                kth_out[w, h] = kth
                next_out[w, h] = below
                status_out[w, h] = status
                tied_out[w, h] = tied
            if partial:  # and add nothing to any sum
                _mark_invalid(dest, token, np.float32(0))
            squares_out[w, h] = _pair_sums(dest, weights[w], class_out[w, h], totals[h], add_total)
    return True
