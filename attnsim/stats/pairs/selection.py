"""Exact top-k selection of pairs: the high-pair rules and the tie rule every statistic relies on.

High pairs: per window, layer and head, either the top ``k = max(1, floor(top_fraction * n + 0.5))``
(rounded half up, not Python's half-to-even ``round``) of the n valid pairs by value
(``top_fraction`` rule; a tie at the k-th value goes to the lowest pair index), or the valid
pairs whose z-score within the window exceeds a threshold (``zscore`` rule).

Selections are kept as pair indices per window and head (``top_fraction`` of the P pairs,
padded with the sentinel index P), which :func:`dense_pairs` turns into a (..., P) mask.
:func:`partition_top` selects on a CPU (a partition over block-preselected candidates) and
:func:`exact_top` on an accelerator or where a tie at the k-th value needs the tie rule;
both give the same pairs (:func:`select_top` picks between them).

All functions are pure: tensors in, tensors out.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import torch

from attnsim.stats.pairs.kernels import compiled_top

_EPS = 1e-12

# Pair values are split into blocks of this many consecutive pairs for the top-k selection
# (see :func:`top_indices`).
SELECTION_BLOCK = 8


def top_fraction_counts(pair_mask: torch.Tensor, top_fraction: float) -> torch.Tensor:
    """(batch,) int64 number of high pairs per window: ``top_fraction * n`` rounded half up (``floor(x + 0.5)``), at least 1, at most n (0 when n = 0).

    Args:
        pair_mask: (batch, P) bool, valid pairs.
    """
    n = pair_mask.sum(-1)  # (B,)
    k = torch.floor(top_fraction * n.double() + 0.5).long().clamp_min(1)
    return torch.where(n > 0, torch.minimum(k, n), torch.zeros_like(k))


def tie_decided(values: torch.Tensor, valid: torch.Tensor, k: int, error: torch.Tensor) -> torch.Tensor:
    """How many of the ``k`` high pairs of each row the tie rule decided, not the values.

    Pairs whose values lie within ``error`` of the k-th value cannot be ordered at the precision the model computes
    them in (float32 products: :func:`~attnsim.stats.pairs.geometry.product_error`). With ``above`` pairs clearly
    larger, ``k - above`` choices fall among those tied pairs; when more tied pairs exist than that, the choices are
    decided by the tie rule (lowest pair index), and all ``k - above`` count as tie-decided; otherwise none do.
    An attention-sink head (nearly constant CSM) has dozens to hundreds of pairs tied at its k-th value.

    Args:
        values: (..., P) pair values; valid: bool broadcastable to ``values``; k: the window's number of high pairs.
        error: (...) the tolerance of each row, in the values' units.

    Returns:
        (...) int64 in 0..k; 0 where k = 0 and in rows holding NaN.
    """
    if k == 0:
        return torch.zeros(values.shape[:-1], dtype=torch.long, device=values.device)
    ranked = values.double().masked_fill(~valid.expand_as(values), float("-inf"))
    kth = ranked.topk(k, dim=-1).values[..., -1]  # (...)
    error = error.double().to(values.device).expand_as(kth)
    hi, lo = (kth + error)[..., None], (kth - error)[..., None]
    above = (ranked > hi).sum(-1)
    band = ((ranked >= lo) & (ranked <= hi)).sum(-1)
    left = k - above
    decided = torch.where(band > left, left, torch.zeros_like(left))
    return decided.masked_fill(ranked.isnan().any(-1), 0)


def top_indices(values: torch.Tensor, k: int, sorted: bool = False, block: int = SELECTION_BLOCK) -> torch.Tensor:
    """Positions of the ``k`` largest entries along the last axis, largest first when ``sorted``
    (a tie at the k-th value is broken arbitrarily; see :func:`exact_top` for the rule the statistics use).

    When k is small against the axis (the 2% of pairs of the top-fraction rule), ``torch.topk``
    runs twice on short rows instead of once on the whole axis: over the maxima of ``block``
    entries each, then over the entries of the k blocks with the largest maxima. This is exact:
    a block holding one of the k largest entries has a maximum at least as large, and fewer
    than k blocks have a maximum above the k-th largest value, so those blocks are always
    kept; if more than k blocks reach the k-th value, the k kept ones hold k entries that reach
    it. Block m holds the entries m, m + n/block, m + 2n/block, ..., so that the block maxima are
    a reduction over a short leading axis (vectorised) rather than over runs of ``block`` entries.

    Args:
        values: (..., n) float; entries of -inf rank last.
        k: number of positions, 0 <= k <= n.

    Returns:
        (..., k) int64.
    """
    n = values.shape[-1]
    if k == 0:
        return torch.zeros(*values.shape[:-1], 0, dtype=torch.long, device=values.device)
    n_blocks = -(-n // block)
    if block <= 1 or n_blocks < 4 * k:
        return values.topk(k, dim=-1, sorted=sorted).indices
    if n % block:  # pad to whole blocks with entries that rank last
        values = torch.nn.functional.pad(values, (0, n_blocks * block - n), value=float("-inf"))
    lead = values.shape[:-1]
    rows = values.reshape(-1, block * n_blocks)  # (R, block * n_blocks)
    maxima = rows.view(-1, block, n_blocks).amax(1)  # (R, n_blocks): block m = entries m + t * n_blocks
    chosen = maxima.topk(k, dim=-1, sorted=False).indices  # (R, k) blocks holding the k largest entries
    offsets = torch.arange(block, device=values.device) * n_blocks  # (block,)
    positions = (chosen[:, :, None] + offsets).reshape(rows.shape[0], k * block)  # (R, k * block)
    picked = rows.gather(-1, positions).topk(k, dim=-1, sorted=sorted).indices  # (R, k) among the candidates
    return positions.gather(-1, picked).reshape(*lead, k)


def partition_top(values: torch.Tensor, k: int, block: int = SELECTION_BLOCK) -> Optional[torch.Tensor]:
    """CPU fast path of :func:`exact_top`: positions of the ``k`` largest entries of each row, in
    ascending order, or None when a row needs the tie rule (the caller then uses :func:`exact_top`).

    Selection by partition (introselect, NumPy's ``partition``) instead of ``torch.topk``, which
    on a CPU copies every row into (value, index) pairs: about a third of the cost for the 2% of
    pairs of the top-fraction rule. When k is small against the row, blocks preselect the
    candidates as in :func:`top_indices` (block m holds entries m, m + n/block, ...): the k-th
    largest block maximum t is a lower bound of the k-th largest entry v_k (k blocks reach t), so
    every entry >= v_k lies in a block whose maximum reaches t; when exactly k blocks do, their
    entries are the candidates. Among the candidates, the k-th and (k+1)-th largest values are
    found by one partition; when they differ, the k largest entries are those >= the k-th, with no
    tie at the k-th value anywhere in the row (an entry equal to it would be a candidate). Both
    checks fail on NaN, which also falls back.

    Args:
        values: (..., n) float32 on the CPU; entries of -inf rank last.
        k: 0 < k < n.

    Returns:
        (..., k) int64 ascending positions, or None (ties at the k-th value or block maximum, NaN,
        another device or dtype, or k outside 0 < k < n).
    """
    n = values.shape[-1]
    if values.device.type != "cpu" or values.dtype != torch.float32 or not 0 < k < n:
        return None
    lead = values.shape[:-1]
    rows = values.reshape(-1, n).numpy()  # (R, n), a view where the tensor is contiguous
    count = rows.shape[0]
    n_blocks = -(-n // block)
    # flatnonzero of a 2-D mask with exactly k entries per row lists them row by row, ascending;
    # several times faster than nonzero, which also builds the row coordinates
    if n_blocks >= 2 * k:
        if n % block:  # pad to whole blocks with entries that rank last
            rows = np.pad(rows, ((0, 0), (0, n_blocks * block - n)), constant_values=-np.inf)
        maxima = rows.reshape(count, block, n_blocks).max(1)  # (R, n_blocks)
        threshold = np.partition(maxima, n_blocks - k, axis=1)[:, n_blocks - k : n_blocks - k + 1]  # k-th largest maximum
        chosen = maxima >= threshold
        if not (chosen.sum(1) == k).all():  # a tie among block maxima (or NaN)
            return None
        blocks = np.flatnonzero(chosen).reshape(count, 1, k) - (np.arange(count) * n_blocks)[:, None, None]  # ascending ids
        positions = (blocks + (np.arange(block) * n_blocks)[None, :, None]).reshape(count, block * k)  # ascending
        candidates = np.take(rows.ravel(), positions + (np.arange(count) * rows.shape[1])[:, None])
    else:
        positions, candidates = None, rows
    width = candidates.shape[1]
    part = np.partition(candidates, width - k - 1, axis=1)
    kth = part[:, width - k :].min(1, keepdims=True)  # the k-th largest candidate
    if not (kth > part[:, width - k - 1 : width - k]).all():  # a tie with the (k+1)-th (or NaN)
        return None
    picked = np.flatnonzero(candidates >= kth).reshape(count, k)  # exactly k per row, ascending (flat)
    if positions is None:
        index = picked - (np.arange(count) * width)[:, None]
    else:
        index = np.take(positions.ravel(), picked)
    return torch.from_numpy(index.astype(np.int64, copy=False)).reshape(*lead, k)


def exact_top(values: torch.Tensor, k: int) -> torch.Tensor:
    """Positions of the ``k`` largest entries along the last axis; a tie at the k-th value goes to the lowest positions.

    The top k + 1 are taken first (:func:`top_indices`): where the k-th and (k+1)-th values
    differ the top k are unique; only rows where they tie are resolved over the whole row.

    Args:
        values: (..., n) float; entries of -inf rank last.
        k: 0 <= k <= n.

    Returns:
        (..., k) int64 in no particular order.
    """
    n = values.shape[-1]
    if k >= n:  # every position (k = n) or none (n = 0)
        return torch.arange(n, device=values.device).expand(*values.shape[:-1], n)
    if k == 0:
        return torch.zeros(*values.shape[:-1], 0, dtype=torch.long, device=values.device)
    index = top_indices(values, k + 1)  # (..., k+1) unordered
    lowest = values.gather(-1, index).topk(2, dim=-1, largest=False, sorted=True)  # the (k+1)-th and k-th values
    # drop the (k+1)-th: move the last slot into its place, then cut the last slot
    index = index.scatter(-1, lowest.indices[..., :1], index[..., k:])[..., :k]
    tied = lowest.values[..., 0] == lowest.values[..., 1]
    if tied.any():  # rare: resolve those rows by position
        rows = values[tied]  # (R, n)
        kth = lowest.values[..., 1][tied][:, None]
        above, equal = rows > kth, rows == kth
        need = k - above.sum(-1, keepdim=True)  # >= 1 of the tied entries
        take = above | (equal & (equal.cumsum(-1) <= need))  # exactly k per row
        index[tied] = take.nonzero()[:, 1].view(-1, k)
    return index


def exact_top_per_row(values: torch.Tensor, counts: torch.Tensor, k_max: int, sentinel: int) -> torch.Tensor:
    """:func:`exact_top` with a different k per row: row r keeps its top ``counts[r]`` positions.

    Args:
        values: (..., n) float; entries of -inf rank last.
        counts: int64 broadcastable to ``values.shape[:-1] + (1,)``, 0 <= counts <= k_max <= n.
        k_max: the largest count.
        sentinel: index written into slots from ``counts[r]`` on.

    Returns:
        (..., k_max) int64: the chosen positions (no particular order), then ``sentinel``.
    """
    n = values.shape[-1]
    shape = (*values.shape[:-1], 1)
    counts = counts.expand(shape)
    width = min(k_max + 1, n)
    order = top_indices(values, width, sorted=True)  # (..., width) largest first
    ranked = values.gather(-1, order)
    kth = ranked.gather(-1, (counts - 1).clamp(0, width - 1))
    after = ranked.gather(-1, counts.clamp(0, width - 1))  # the (k+1)-th, where one exists
    tied = ((counts > 0) & (counts < n) & (kth == after))[..., 0]
    slot = torch.arange(k_max, device=values.device)
    index = order[..., :k_max].masked_fill(slot >= counts, sentinel)
    if tied.any():  # rare: resolve those rows by position, each with its own k
        for row in tied.nonzero().tolist():
            row = tuple(row)
            k = int(counts[row])
            index[row] = torch.cat([exact_top(values[row], k), index.new_full((k_max - k,), sentinel)])
    return index


def select_top(values: torch.Tensor, k: Sequence[int], valid: Optional[torch.Tensor], sentinel: int) -> torch.Tensor:
    """Each window's top ``k[b]`` valid pairs (ties at the k-th value to the lowest pair index), for a chunk of windows.

    Args:
        values: (windows, ..., P) pair values of a chunk of windows.
        k: the number of pairs to choose in each window (Python ints, one per window).
        valid: (windows, 1..., P) bool broadcastable to ``values``, or None when every pair is valid;
            invalid pairs are never chosen while valid ones remain.
        sentinel: index written into the slots a window does not use (slots >= k[b]).

    On a CPU the compiled kernel chooses (:func:`~attnsim.stats.pairs.kernels.compiled_top`), else
    :func:`partition_top`, else :func:`exact_top`: the same pairs.

    Returns:
        (windows, ..., max(k)) int64 pair indices in ascending order; slots from k[b] on hold ``sentinel``
        (> every index). The order is canonical so that sums over the chosen pairs add in the same
        order however the windows were chunked.
    """
    if valid is not None:
        values = values.masked_fill(~valid, float("-inf"))
    k_top = max(k, default=0)
    if len(set(k)) <= 1:  # one k for the chunk (a chunk is one window on a CPU)
        compiled = compiled_top(values, k_top)
        if compiled is not None:
            return compiled[0]
        fast = partition_top(values, k_top)
        return fast if fast is not None else exact_top(values, k_top).sort(-1).values
    counts = torch.tensor(list(k), device=values.device).view(-1, *[1] * (values.dim() - 1))
    return exact_top_per_row(values, counts, k_top, sentinel).sort(-1).values


def dense_pairs(index: torch.Tensor, n_pairs: int) -> torch.Tensor:
    """(..., P) bool mask of the pairs listed in ``index`` (..., S), where index P (the sentinel) lists none."""
    dense = torch.zeros(*index.shape[:-1], n_pairs + 1, dtype=torch.bool, device=index.device)
    return dense.scatter_(-1, index, True)[..., :n_pairs]


def zscore_pairs(values: torch.Tensor, valid: torch.Tensor, threshold: float) -> torch.Tensor:
    """Valid pairs whose z-score within their window and head exceeds ``threshold`` (the ``zscore`` rule).

    The mean and (population) standard deviation are over the window's valid pairs.

    Args:
        values: (..., P) pair values (e.g. CSM), one row per window and head.
        valid: bool broadcastable to ``values``, e.g. (windows, 1, 1, P): valid pairs.
        threshold: z-score a high pair exceeds (units of the row's standard deviation).

    Returns:
        (..., P) bool.
    """
    weight = valid.to(values.dtype)
    n = weight.sum(-1, keepdim=True).clamp_min(1)
    mean = (values * weight).sum(-1, keepdim=True) / n
    var = (((values - mean) * weight) ** 2).sum(-1, keepdim=True) / n
    z = (values - mean) / var.sqrt().clamp_min(_EPS)
    return (z > threshold) & valid


def mask_index(mask: torch.Tensor, sentinel: int) -> torch.Tensor:
    """The positions of each row's True entries, ascending, padded with ``sentinel``.

    Args:
        mask: (..., P) bool.
        sentinel: index written into unused slots (P for pair masks).

    Returns:
        (..., S) int64 with S the largest number of True entries in a row.
    """
    count = int(mask.sum(-1).max()) if mask.numel() else 0
    index = top_indices(mask.float(), count)  # the `count` largest entries of a 0/1 row hold all its 1s
    return index.masked_fill(~mask.gather(-1, index), sentinel).sort(-1).values


def pad_slots(parts: List[torch.Tensor], sentinel: int) -> torch.Tensor:
    """Concatenate index tensors (c_i, ..., S_i) along the first axis, each padded with ``sentinel`` to the largest S_i."""
    slots = max((p.shape[-1] for p in parts), default=0)
    padded = [torch.nn.functional.pad(p, (0, slots - p.shape[-1]), value=sentinel) for p in parts]
    return torch.cat(padded)


def indexed_sums(index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted counts of a set of pairs given by indices: ``sum_s weights[b, index[b, n, s], k]``.

    Args:
        index: (batch, N, S) int64 pair indices, P (the sentinel) for slots that hold no pair.
        weights: (batch, P, K) per-window pair weights.

    Returns:
        (batch, N, K) float32.
    """
    batch, n, slots = index.shape
    # a zero row P per window takes the sentinel slots: (B, P+1, K) flattened to rows b * (P+1) + p
    padded = torch.nn.functional.pad(weights.float(), (0, 0, 0, 1))
    rows = (index + torch.arange(batch, device=index.device)[:, None, None] * padded.shape[1]).reshape(-1)
    picked = padded.reshape(-1, padded.shape[-1]).index_select(0, rows)  # (B*N*S, K)
    return picked.reshape(batch, n, slots, -1).sum(-2)


def head_sums(index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted counts per layer and head of the pairs listed in ``index``: ``sum_s weights[b, index[b, l, h, s], k]``.

    Args:
        index: (batch, layer, head, S) int64 pair indices (e.g. :attr:`~attnsim.stats.pairs.PairView.high_index`), P in unused slots.
        weights: (batch, P, K) per-window pair weights, e.g. a stack of pair masks.

    Returns:
        (layer, batch, head, K) float32.
    """
    batch, layers, heads = index.shape[:3]
    sums = indexed_sums(index.reshape(batch, layers * heads, index.shape[-1]), weights)  # (B, L*H, K)
    return sums.reshape(batch, layers, heads, -1).transpose(0, 1)


__all__ = [
    "indexed_sums",
    "head_sums",
    "SELECTION_BLOCK",
    "top_fraction_counts",
    "top_indices",
    "partition_top",
    "exact_top",
    "exact_top_per_row",
    "select_top",
    "dense_pairs",
    "zscore_pairs",
    "mask_index",
    "pad_slots",
]
