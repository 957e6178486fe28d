"""Context Similarity Matrices and the token-pair quantities shared by every finding.

Source: Halevi et al., "Self-attention vector output similarities reveal how
machines pay attention", arXiv:2512.21956. For layer l, head h and one window
of T tokens with per-head outputs Z (T x d_head), the Context Similarity
Matrix is ``CSM = Z Zᵀ`` with its diagonal set to 0 (Eq. for the "vector
output similarity" of token pairs).

Pair space: the P = T(T-1)/2 unordered pairs (i, j), i < j, in
``torch.triu_indices(T, T, 1)`` order. A pair is *valid* when both tokens are
real (not padding) and, unless ``include_special``, not special tokens.

High pairs: per window, layer and head, either the top ``k = max(1,
floor(top_fraction * n + 0.5))`` (rounded half up, not Python's half-to-even ``round``) of the n valid pairs by CSM value (``top_fraction``
rule; a tie at the k-th value goes to the lowest pair index), or the valid
pairs whose CSM z-score within the window exceeds ``zscore`` (``zscore`` rule).

Pair masks shared by several findings (each computed once per batch by
:class:`PairView`):

- *same-sentence* pairs: valid pairs whose two tokens carry the same sentence
  id >= 0 (a token with id -1, i.e. a special token or padding, is in no
  sentence, so a pair holding one is never "same sentence");
- *cross-sentence* pairs: valid pairs of two tokens in different sentences (both ids >= 0);
- *identical-token* pairs: valid pairs of two occurrences of one token id,
  neither of them a special token or padding (Halevi et al., repetition);
- *high-attention* pairs: per window, layer and head, the top ``k`` valid pairs
  (the same ``k`` as the ``top_fraction`` rule, whatever ``high_rule`` is) by
  ``max(A[i, j], A[j, i])``, the attention probability between the two tokens
  in either direction (ties at the k-th value to the lowest pair index).

How a batch is computed (why the view is built the way it is): the (layer,
batch, head, T, T) CSM and attention tensors of a batch are ~150 MB each for
32 windows of MiniLM, far beyond the CPU cache, and every statistic would
read them again from memory. :class:`PairView` therefore walks the batch a
few windows at a time (a *chunk*, a few MB): it computes a window's CSM and
gathers its pair values, or assembles its attention from the layers, while
they are in cache, and folds them at once into everything the findings need
(sums per pair class, the high pairs' indices, attention mass and entropy).
Neither batch-wide tensor is materialised unless a caller asks for it
(:attr:`PairView.csm`, :attr:`PairView.attention`, :attr:`PairView.values`).
High pairs and high-attention pairs are kept as their pair indices per
window and head (2% of the pairs, padded with the sentinel index P); counting
them against a pair weighting gathers k weights instead of reading all P.
They are selected by :func:`partition_top` on a CPU (a partition over
block-preselected candidates) and by :func:`exact_top` on an accelerator or
where a tie at the k-th value needs the tie rule; both give the same pairs.

All functions are pure: tensors in, tensors out.
"""

from __future__ import annotations

from functools import cached_property
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

_EPS = 1e-12
# Smallest normal float32. Attention probabilities are clamped to it before the log of the entropy:
# log(0) and logs of subnormals take a slow path on x86 (several times the cost of a normal log),
# and p * log(max(p, tiny)) differs from p * log(p) by less than 1e-36 for p below it.
TINY = torch.finfo(torch.float32).tiny

# Elements of the (chunk, layer, head, T, T) tensors a chunk of windows may hold: 8 MB of float32 on
# a CPU, about the size of its last-level cache per core; an accelerator takes the whole batch at once.
CHUNK_ELEMENTS_CPU = 1 << 21
CHUNK_ELEMENTS_ACCELERATOR = 1 << 28

# Pair values are split into blocks of this many consecutive pairs for the top-k selection
# (see :func:`top_indices`).
SELECTION_BLOCK = 8

PAIR_CLASSES = ("valid", "same", "cross", "identical", "other")
"""Columns of :attr:`PairView.pair_weights` and :attr:`PairView.class_value_sums`."""

Layers = Union[torch.Tensor, Sequence[torch.Tensor]]


def context_similarity(z: torch.Tensor, normalise: str = "none") -> torch.Tensor:
    """CSM of per-head vectors.

    Args:
        z: (..., pos, d) per-head vectors (``z`` or ``result``), e.g. (layer, batch, head, T, d_head).
        normalise: ``none`` (dot products, units of z²) or ``cosine`` (divided by both norms, unitless).

    Returns:
        (..., pos, pos) with a zero diagonal.
    """
    csm = z @ z.transpose(-1, -2)  # (..., T, T)
    if normalise == "cosine":
        norm = z.norm(dim=-1).clamp_min(_EPS)  # (..., T)
        csm = csm / (norm.unsqueeze(-1) * norm.unsqueeze(-2))
    elif normalise != "none":
        raise ValueError(f"normalise must be 'none' or 'cosine', not {normalise!r}")
    csm.diagonal(dim1=-2, dim2=-1).zero_()
    return csm


def token_mask(attention_mask: torch.Tensor, special_mask: torch.Tensor, include_special: bool = True) -> torch.Tensor:
    """(batch, pos) bool: tokens that enter statistics (real tokens; specials only if ``include_special``)."""
    valid = attention_mask.bool()
    if not include_special:
        valid = valid & ~special_mask.bool()
    return valid


def pair_indices(seq_len: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """(2, P) row and column of every pair i < j, in ``triu_indices`` order."""
    return torch.triu_indices(seq_len, seq_len, 1, device=device)


def top_fraction_counts(pair_mask: torch.Tensor, top_fraction: float) -> torch.Tensor:
    """(batch,) int64 number of high pairs per window: ``top_fraction * n`` rounded half up (``floor(x + 0.5)``), at least 1, at most n (0 when n = 0).

    Args:
        pair_mask: (batch, P) bool, valid pairs.
    """
    n = pair_mask.sum(-1)  # (B,)
    k = torch.floor(top_fraction * n.double() + 0.5).long().clamp_min(1)
    return torch.where(n > 0, torch.minimum(k, n), torch.zeros_like(k))


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

    Returns:
        (windows, ..., max(k)) int64 pair indices in ascending order; slots from k[b] on hold ``sentinel``
        (> every index). The order is canonical so that sums over the chosen pairs add in the same
        order however the windows were chunked.
    """
    if valid is not None:
        values = values.masked_fill(~valid, float("-inf"))
    k_top = max(k, default=0)
    if len(set(k)) <= 1:  # one k for the chunk (a chunk is one window on a CPU)
        fast = partition_top(values, k_top)
        return fast if fast is not None else exact_top(values, k_top).sort(-1).values
    counts = torch.tensor(list(k), device=values.device).view(-1, *[1] * (values.dim() - 1))
    return exact_top_per_row(values, counts, k_top, sentinel).sort(-1).values


def high_pairs_top_fraction(values: torch.Tensor, pair_mask: torch.Tensor, top_fraction: float) -> torch.Tensor:
    """Top ``floor(top_fraction * n + 0.5)`` valid pairs (rounded half up, at least 1) per window and head.

    Args:
        values: (layer, batch, head, P) CSM values in pair space.
        pair_mask: (batch, P) bool, valid pairs.
        top_fraction: share of the n valid pairs of each window that are high.

    Returns:
        (layer, batch, head, P) bool.
    """
    k = top_fraction_counts(pair_mask, top_fraction).tolist()  # (B,) one read from the device
    n_pairs = values.shape[-1]
    top = select_top(values.transpose(0, 1), k, pair_mask[:, None, None, :], n_pairs)  # (B, L, H, k_max)
    return dense_pairs(top, n_pairs).transpose(0, 1)


def dense_pairs(index: torch.Tensor, n_pairs: int) -> torch.Tensor:
    """(..., P) bool mask of the pairs listed in ``index`` (..., S), where index P (the sentinel) lists none."""
    dense = torch.zeros(*index.shape[:-1], n_pairs + 1, dtype=torch.bool, device=index.device)
    return dense.scatter_(-1, index, True)[..., :n_pairs]


def high_pairs_zscore(values: torch.Tensor, pair_mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """Valid pairs whose CSM z-score within their window and head exceeds ``threshold``.

    The mean and (population) standard deviation are over the window's valid pairs.

    Args:
        values: (layer, batch, head, P); pair_mask: (batch, P) bool.

    Returns:
        (layer, batch, head, P) bool.
    """
    weight = pair_mask[None, :, None, :].to(values.dtype)
    n = weight.sum(-1, keepdim=True).clamp_min(1)
    mean = (values * weight).sum(-1, keepdim=True) / n
    var = (((values - mean) * weight) ** 2).sum(-1, keepdim=True) / n
    z = (values - mean) / var.sqrt().clamp_min(_EPS)
    return (z > threshold) & pair_mask[None, :, None, :]


def same_sentence_pairs(sentence_ids: torch.Tensor, pair_mask: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """Valid pairs whose two tokens lie in the same sentence.

    Args:
        sentence_ids: (batch, pos) int64 sentence index of each token, -1 for special tokens and padding.
        pair_mask: (batch, P) bool, valid pairs.
        pairs: (2, P) rows and columns of the pairs i < j.

    Returns:
        (batch, P) bool; a pair holding a token with sentence id -1 is never in the same sentence.
    """
    first, second = sentence_ids[:, pairs[0]], sentence_ids[:, pairs[1]]  # (B, P) each
    return (first == second) & (first >= 0) & pair_mask


def cross_sentence_pairs(sentence_ids: torch.Tensor, pair_mask: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """(batch, P) bool: valid pairs of two tokens in different sentences (both sentence ids >= 0)."""
    first, second = sentence_ids[:, pairs[0]], sentence_ids[:, pairs[1]]  # (B, P) each
    return (first != second) & (first >= 0) & (second >= 0) & pair_mask


def identical_pairs(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special_mask: torch.Tensor,
    pair_mask: torch.Tensor,
    pairs: torch.Tensor,
    unknown_mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Valid pairs of two occurrences of the same token id (i != j), special tokens, unknown tokens and padding excluded.

    The unknown token ([UNK]) stands for any text the vocabulary cannot spell (an emoji and a
    snowman share it), so two of them are not known to be the same token and never form an
    identical pair.

    Args:
        input_ids, attention_mask, special_mask: (batch, pos).
        pair_mask: (batch, P) bool, valid pairs.
        pairs: (2, P) rows and columns of the pairs i < j.
        unknown_mask: (batch, pos) bool, True at unknown tokens; None when the batch has none marked.

    Returns:
        (batch, P) bool.
    """
    content = attention_mask.bool() & ~special_mask.bool()  # (B, T)
    if unknown_mask is not None:
        content = content & ~unknown_mask.bool()
    same_id = input_ids[:, pairs[0]] == input_ids[:, pairs[1]]  # (B, P)
    return same_id & content[:, pairs[0]] & content[:, pairs[1]] & pair_mask


def attention_pair_values(attention: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """Attention probability between the two tokens of each pair, in either direction.

    Args:
        attention: (..., query_pos, key_pos) attention probabilities A, e.g. (layer, batch, head, T, T).
        pairs: (2, P) rows and columns of the pairs i < j.

    Returns:
        (..., P) float32, ``max(A[i, j], A[j, i])`` (unitless, in [0, 1]).
    """
    seq_len = attention.shape[-1]
    flat = attention.float().flatten(-2)  # (..., T*T)
    forward = flat[..., pairs[0] * seq_len + pairs[1]]  # A[i, j]: query i attends to key j
    backward = flat[..., pairs[1] * seq_len + pairs[0]]  # A[j, i]
    return torch.maximum(forward, backward, out=forward)


def pair_sums(batch_major: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted sums over the pairs of each window, for several per-window pair weights at once.

    Args:
        batch_major: (batch, N, P) per-pair values, e.g. N = layer * head.
        weights: (batch, P, K) per-window pair weights (masks as 0/1 floats).

    Returns:
        (batch, N, K): ``sum_p batch_major[b, n, p] * weights[b, p, k]`` (one batched matmul).
    """
    return torch.bmm(batch_major, weights.to(batch_major.dtype))


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


def _layers(tensor: Layers) -> Tuple[torch.Tensor, ...]:
    """A (layer, ...) tensor or a sequence of per-layer tensors as a tuple of per-layer tensors."""
    return tuple(tensor.unbind(0)) if isinstance(tensor, torch.Tensor) else tuple(tensor)


class PairView:
    """Per-batch quantities shared by every finding, each computed once on first use.

    Built from one forward pass (:class:`~attnsim.capture.HeadCapture`) and its batch.

    Args:
        vectors: per-head vectors (z or result): a (layer, batch, head, T, d) tensor or a sequence of
            L (batch, head, T, d) tensors (the capture's layers, never stacked on the hot path).
        batch: dict with ``attention_mask``, ``special_mask``, ``sentence_ids`` (batch, T)
            and ``input_ids`` (batch, T).
        attention: attention probabilities, a (layer, batch, head, T, T) tensor or a sequence of L
            (batch, head, T, T) tensors, or None.
        top_fraction, high_rule, zscore, include_special, normalise: see :class:`attnsim.config.StatsConfig`.
        positions: optional (T, 2) (row, col) of each token on an image's patch grid, NaN for tokens
            without one (a ViT's extra tokens); when given, :attr:`distance` is the grid distance
            (:func:`attnsim.capture.vision.grid_distance`) instead of j - i.

    Shapes below use B windows, L layers, H heads, T tokens, P = T(T-1)/2 pairs and S slots
    (the batch's largest number of high pairs). Statistics are float32 (the model's dtype is
    converted chunk by chunk); accumulators sum batches in float64.
    """

    def __init__(
        self,
        vectors: Layers,
        batch: Dict[str, torch.Tensor],
        attention: Optional[Layers] = None,
        top_fraction: float = 0.02,
        high_rule: str = "top_fraction",
        zscore: float = 2.0,
        include_special: bool = True,
        normalise: str = "none",
        positions: Optional[torch.Tensor] = None,
    ):
        self.positions = positions
        self._stacked_vectors = vectors if isinstance(vectors, torch.Tensor) else None
        self._vector_layers = _layers(vectors)
        self._stacked_attention = attention if isinstance(attention, torch.Tensor) else None
        self._attention_layers = _layers(attention) if attention is not None else None
        self.batch = batch
        self.top_fraction = top_fraction
        self.high_rule = high_rule
        self.zscore = zscore
        self.include_special = include_special
        self.normalise = normalise
        self.n_layers = len(self._vector_layers)
        self.batch_size, self.n_heads, self.seq_len = self._vector_layers[0].shape[:3]
        self.n_pairs = self.seq_len * (self.seq_len - 1) // 2
        self.device = self._vector_layers[0].device

    def release(self) -> None:
        """Drop every tensor the view holds (the captured layers, the batch and every cached quantity),
        once all statistics have read the batch; the view cannot be used afterwards."""
        self.__dict__.clear()

    # -- the captured tensors, stacked only on request -------------------------------------
    @cached_property
    def vectors(self) -> torch.Tensor:
        """(layer, batch, head, T, d) float32 per-head vectors (stacked on first use when given by layer)."""
        if self._stacked_vectors is not None:
            return self._stacked_vectors.float()
        return torch.stack(self._vector_layers, 1).float().transpose(0, 1)

    @cached_property
    def attention(self) -> Optional[torch.Tensor]:
        """(layer, batch, head, T, T) attention probabilities, or None (stacked on first use when given by layer)."""
        if self._attention_layers is None or self._stacked_attention is not None:
            return self._stacked_attention
        return torch.stack(self._attention_layers, 1).transpose(0, 1)

    @property
    def has_attention(self) -> bool:
        """Whether the batch was captured with attention probabilities."""
        return self._attention_layers is not None or self.__dict__.get("attention") is not None

    def _need_attention(self) -> None:
        if not self.has_attention:
            raise ValueError("This statistic needs attention probabilities; the finding must set needs_attention = True.")

    def _vector_chunk(self, start: int, stop: int) -> torch.Tensor:
        # (c, L, H, T, d) float32 vectors of windows start..stop-1
        if self._stacked_vectors is not None or "vectors" in self.__dict__:
            return self.vectors.transpose(0, 1)[start:stop].float()
        return torch.stack([v[start:stop] for v in self._vector_layers], 1).float()

    def _csm_chunk(self, start: int, stop: int) -> torch.Tensor:
        # (c, L, H, T, T) CSM of windows start..stop-1: slices of `csm` when it exists (or was set)
        if "csm" in self.__dict__:
            return self.__dict__["csm"].transpose(0, 1)[start:stop].float()
        return context_similarity(self._vector_chunk(start, stop), self.normalise)

    def _attention_chunk(self, start: int, stop: int) -> torch.Tensor:
        # (c, L, H, T, T) float32 attention of windows start..stop-1
        stacked = self.__dict__.get("attention", self._stacked_attention)
        if stacked is not None:
            return stacked.transpose(0, 1)[start:stop].float()
        return torch.stack([a[start:stop] for a in self._attention_layers], 1).float()

    def _on_accelerator(self) -> bool:
        # An accelerator takes the whole batch as one chunk and batched products (few, large kernels);
        # a CPU walks cache-sized chunks with per-window products.
        return self.device.type != "cpu"

    def _chunks(self) -> List[Tuple[int, int]]:
        # windows per chunk so that a chunk's (c, L, H, T, T) tensors stay within the budget
        budget = CHUNK_ELEMENTS_ACCELERATOR if self._on_accelerator() else CHUNK_ELEMENTS_CPU
        step = max(1, budget // max(1, self.n_layers * self.n_heads * self.seq_len * self.seq_len))
        return [(start, min(start + step, self.batch_size)) for start in range(0, self.batch_size, step)]

    def csm_windows(self, stop: int) -> torch.Tensor:
        """(layer, stop, head, T, T) CSM of the first ``stop`` windows only (e.g. examples for figures)."""
        return self._csm_chunk(0, stop).transpose(0, 1)

    def attention_windows(self, stop: int) -> Optional[torch.Tensor]:
        """(layer, stop, head, T, T) attention of the first ``stop`` windows only, or None."""
        return self._attention_chunk(0, stop).transpose(0, 1) if self.has_attention else None

    # -- tokens and pairs ------------------------------------------------------------------
    @cached_property
    def tokens(self) -> torch.Tensor:
        """(batch, T) bool, tokens that enter statistics."""
        return token_mask(self.batch["attention_mask"], self.batch["special_mask"], self.include_special)

    @cached_property
    def pairs(self) -> torch.Tensor:
        """(2, P) rows and columns of the pairs i < j."""
        return pair_indices(self.seq_len, self.device)

    @cached_property
    def distance(self) -> torch.Tensor:
        """(P,) int64, distance j - i of each pair (1..T-1); with ``positions``, the rounded Euclidean
        distance on the patch grid in patches, -1 for pairs holding a token without a grid position."""
        if self.positions is not None:
            from attnsim.capture.vision import grid_distance

            return grid_distance(self.positions.to(self.device), self.pairs[0], self.pairs[1])
        return self.pairs[1] - self.pairs[0]

    @cached_property
    def pair_mask(self) -> torch.Tensor:
        """(batch, P) bool, valid pairs."""
        return self.tokens[:, self.pairs[0]] & self.tokens[:, self.pairs[1]]

    @cached_property
    def distance_onehot(self) -> torch.Tensor:
        """(P, T) float32, one-hot of each pair's distance: sums over pairs by distance are ``x @ distance_onehot``.

        A pair without a distance (-1, see :attr:`distance`) has an all-zero row: it enters no distance statistic.
        """
        onehot = torch.zeros(self.n_pairs, self.seq_len, dtype=torch.float32, device=self.device)
        if self.positions is not None:
            placed = (self.distance >= 0).nonzero().squeeze(-1)
            onehot[placed, self.distance[placed]] = 1
            return onehot
        onehot[torch.arange(self.n_pairs, device=self.device), self.distance] = 1
        return onehot

    @cached_property
    def flat_pairs(self) -> torch.Tensor:
        """(P,) int64, index ``i * T + j`` of each pair in a flattened T x T matrix."""
        return self.pairs[0] * self.seq_len + self.pairs[1]

    @cached_property
    def same_sentence(self) -> torch.Tensor:
        """(batch, P) bool, valid pairs in the same sentence (see :func:`same_sentence_pairs`)."""
        return same_sentence_pairs(self.batch["sentence_ids"], self.pair_mask, self.pairs)

    @cached_property
    def cross_sentence(self) -> torch.Tensor:
        """(batch, P) bool, valid pairs of two tokens in different sentences (see :func:`cross_sentence_pairs`)."""
        return cross_sentence_pairs(self.batch["sentence_ids"], self.pair_mask, self.pairs)

    @cached_property
    def identical(self) -> torch.Tensor:
        """(batch, P) bool, valid pairs of identical non-special tokens (see :func:`identical_pairs`)."""
        b = self.batch
        return identical_pairs(b["input_ids"], b["attention_mask"], b["special_mask"], self.pair_mask, self.pairs, b.get("unknown_mask"))

    @cached_property
    def pair_weights(self) -> torch.Tensor:
        """(batch, P, 5) float32 0/1 masks of the pair classes :data:`PAIR_CLASSES`: valid, same-sentence,
        cross-sentence, identical-token and other (valid, not identical) pairs."""
        valid = self.pair_mask
        return torch.stack([valid, self.same_sentence, self.cross_sentence, self.identical, valid & ~self.identical], -1).float()

    @cached_property
    def top_k(self) -> torch.Tensor:
        """(batch,) int64 number of pairs per window chosen by the top-fraction rule (high pairs
        under that rule, and high-attention pairs under either rule)."""
        return top_fraction_counts(self.pair_mask, self.top_fraction)

    @cached_property
    def _host(self) -> Dict[str, list]:
        # The numbers that set shapes and loop bounds (each window's k, whether it has invalid pairs,
        # its span of real tokens) and the largest token id, read from the device in one transfer:
        # each read waits for the device to finish its queued work.
        real = self.batch["attention_mask"].bool()  # (B, T)
        position = torch.arange(self.seq_len, device=real.device)
        first = torch.where(real, position, self.seq_len).amin(-1)  # T when the window has no real token
        last = torch.where(real, position + 1, 0).amax(-1)  # 0 then: an empty span
        ids = self.batch.get("input_ids")
        max_id = ids.max().reshape(1).long() if ids is not None and ids.numel() else torch.full((1,), -1, device=real.device)
        partial = (~self.pair_mask).any(-1).long()
        numbers = torch.cat([self.top_k, partial, first, last, max_id.to(real.device)]).tolist()
        b = self.batch_size
        return {
            "k": numbers[:b],
            "partial": [bool(x) for x in numbers[b : 2 * b]],
            "first": numbers[2 * b : 3 * b],
            "last": numbers[3 * b : 4 * b],
            "max_token_id": numbers[-1],
        }

    @property
    def max_token_id(self) -> int:
        """The largest token id of the batch (-1 without ``input_ids``)."""
        return self._host["max_token_id"]

    def _valid_chunk(self, start: int, stop: int, dims: int) -> Optional[torch.Tensor]:
        # (c, 1, ..., P) valid pairs of a chunk for a selection; None when all its pairs are valid
        if not any(self._host["partial"][start:stop]):
            return None
        return self.pair_mask[start:stop].view(stop - start, *[1] * (dims - 2), self.n_pairs)

    # -- CSM -------------------------------------------------------------------------------------
    @cached_property
    def csm(self) -> torch.Tensor:
        """(layer, batch, head, T, T) Context Similarity Matrices, zero diagonal (materialised on first use;
        the statistics never need it whole)."""
        return context_similarity(self.vectors.transpose(0, 1), self.normalise).transpose(0, 1)

    def _pair_values(self, matrices: torch.Tensor, index: Optional[torch.Tensor] = None) -> torch.Tensor:
        # (c, L, H, T, T) -> (c, L, H, P): entries (i, j), i < j (or ``index``'s cells) of each matrix;
        # index_select on a 2-D (rows, T*T) view is several times faster than advanced indexing
        rows = matrices.reshape(-1, self.seq_len * self.seq_len)
        return rows.index_select(1, self.flat_pairs if index is None else index).view(*matrices.shape[:-2], self.n_pairs)

    @cached_property
    def _pair_weights_rows(self) -> List[torch.Tensor]:
        # B separately allocated (5, P) pair-class masks, the narrow left operand of (5, P) @ (P, L*H)
        # products (several times faster on a CPU than (L*H, P) @ (P, 5))
        return [w.t().contiguous() for w in self.pair_weights]

    @cached_property
    def _csm_pass(self) -> Dict[str, Optional[torch.Tensor]]:
        # One walk over the windows: each chunk's CSM is computed, gathered into pair space and
        # folded into every CSM quantity the findings use while it is in cache.
        n_layers, n_heads, n_pairs = self.n_layers, self.n_heads, self.n_pairs
        heads = n_layers * n_heads
        select = self.high_rule != "zscore"
        k_all = self._host["k"]
        slots = max(k_all, default=0) if select else 0
        index = torch.full((self.batch_size, n_layers, n_heads, slots), n_pairs, dtype=torch.long, device=self.device)
        class_sums = torch.empty(self.batch_size, heads, len(PAIR_CLASSES), device=self.device)
        squares = torch.empty(self.batch_size, n_layers, n_heads, device=self.device)
        by_pair = torch.zeros(n_layers, n_heads, n_pairs, device=self.device)
        region = self.attention_index if self.has_attention else None  # (B, L, H, S) with sentinel P
        inside = torch.empty(self.batch_size, n_layers, n_heads, device=self.device) if region is not None else None
        for start, stop in self._chunks():
            values = self._pair_values(self._csm_chunk(start, stop))  # (c, L, H, P)
            valid = self._valid_chunk(start, stop, values.dim())
            if valid is not None:
                values.masked_fill_(~valid, 0.0)  # invalid pairs add nothing to any sum
            flat = values.view(stop - start, heads, n_pairs)
            if not self._on_accelerator():
                for window in range(start, stop):
                    # One 2-D product per window on freshly allocated (64-byte aligned) operands: BLAS
                    # rounds a product differently with the operands' alignment and batch layout, so a
                    # window's sums would depend on its batch-mates, which ratios of near-cancelling sums
                    # (e.g. the repetition statistics' CSM ratio) amplify. Only windows after the first
                    # of a chunk need the copy (a chunk is one window for the usual model sizes).
                    part = flat[window - start] if window == start else flat[window - start].clone()
                    class_sums[window] = (self._pair_weights_rows[window] @ part.t()).t()
            else:  # one batched product for the whole chunk (the batch) on an accelerator
                class_sums[start:stop] = torch.bmm(flat, self.pair_weights[start:stop])
            by_pair += values.sum(0)
            squares[start:stop] = torch.linalg.vecdot(values, values)  # no squared copy
            if select:
                chosen = select_top(values, k_all[start:stop], valid, n_pairs)
                index[start:stop, ..., : chosen.shape[-1]] = chosen
            if region is not None:
                part = region[start:stop]  # (c, L, H, S)
                picked = values.gather(-1, part.clamp_max(max(n_pairs - 1, 0))) if n_pairs else values[..., :0]
                inside[start:stop] = torch.where(part < n_pairs, picked, 0.0).sum(-1)
        return {"index": index if select else None, "class_sums": class_sums, "squares": squares, "by_pair": by_pair, "inside": inside}

    @cached_property
    def values_bm(self) -> torch.Tensor:
        """(batch, layer, head, P) float32 CSM of each pair i < j, 0 at invalid pairs (materialised on first use)."""
        out = torch.empty(self.batch_size, self.n_layers, self.n_heads, self.n_pairs, device=self.device)
        for start, stop in self._chunks():
            values = self._pair_values(self._csm_chunk(start, stop))
            valid = self._valid_chunk(start, stop, values.dim())
            out[start:stop] = values if valid is None else values.masked_fill(~valid, 0.0)
        return out

    @property
    def values(self) -> torch.Tensor:
        """(layer, batch, head, P) CSM of each pair i < j, 0 at invalid pairs (a view of :attr:`values_bm`)."""
        return self.values_bm.transpose(0, 1)

    @property
    def class_value_sums(self) -> torch.Tensor:
        """(layer, batch, head, 5) float32 CSM summed over the pairs of each class of :data:`PAIR_CLASSES`."""
        return self._per_head(self._csm_pass["class_sums"])

    @property
    def value_by_pair(self) -> torch.Tensor:
        """(layer, head, P) float32 CSM of each pair summed over the batch's windows (invalid pairs add 0)."""
        return self._csm_pass["by_pair"]

    @property
    def value_squares(self) -> torch.Tensor:
        """(layer, batch, head) float32 sum of squared CSM values over each window's valid pairs."""
        return self._csm_pass["squares"].transpose(0, 1)

    def value_sums(self, weights: torch.Tensor) -> torch.Tensor:
        """Weighted sums of CSM values: ``sum_p CSM[l, b, h, p] * weights[b, p, k]``.

        Args:
            weights: (batch, P, K) per-window pair weights.

        Returns:
            (layer, batch, head, K) float32, in CSM units. (Reads :attr:`values_bm`; the findings use
            :attr:`class_value_sums`, computed in the single pass.)
        """
        return self._per_head(pair_sums(self._flat(self.values_bm), weights))

    @cached_property
    def high_index(self) -> torch.Tensor:
        """(batch, layer, head, S) int64 pair indices of the high-CSM pairs, ascending, P (the sentinel) in unused slots."""
        if self.high_rule == "zscore":
            dense = high_pairs_zscore(self.values, self.pair_mask, self.zscore).transpose(0, 1)  # (B, L, H, P)
            count = int(dense.sum(-1).max()) if dense.numel() else 0
            index = top_indices(dense.float(), count)  # the `count` largest entries of a 0/1 row hold all its 1s
            return index.masked_fill(~dense.gather(-1, index), self.n_pairs).sort(-1).values
        return self._csm_pass["index"]

    @cached_property
    def high_slots(self) -> torch.Tensor:
        """(batch, layer, head, S) float32 0/1: which slots of :attr:`high_index` hold a high pair."""
        return (self.high_index < self.n_pairs).float()

    @cached_property
    def high(self) -> torch.Tensor:
        """(layer, batch, head, P) bool, high-CSM pairs (see module docstring) as a dense mask."""
        return dense_pairs(self.high_index, self.n_pairs).transpose(0, 1)

    @cached_property
    def high_count(self) -> torch.Tensor:
        """(layer, batch, head) int64 number of high pairs."""
        if self.high_rule == "zscore":
            return self.high_slots.sum(-1).long().transpose(0, 1)
        return self.top_k[None, :, None].expand(self.n_layers, self.batch_size, self.n_heads)

    def high_sums(self, weights: torch.Tensor) -> torch.Tensor:
        """Weighted counts of high pairs: ``sum_p high[l, b, h, p] * weights[b, p, k]``.

        Args:
            weights: (batch, P, K) per-window pair weights, e.g. a stack of pair masks.

        Returns:
            (layer, batch, head, K) float32.
        """
        return self._per_head(indexed_sums(self._flat(self.high_index), weights))

    @cached_property
    def high_by_distance(self) -> torch.Tensor:
        """(layer, head, T) float32 number of high pairs at each distance, summed over the batch's windows
        (pairs without a distance are left out)."""
        distance = torch.cat([self.distance, self.distance.new_full((1,), -1)])[self.high_index]  # (B, L, H, S); sentinel -> -1
        counts = torch.zeros(*distance.shape[:-1], self.seq_len + 1, device=self.device)
        counts.scatter_add_(-1, torch.where(distance >= 0, distance, self.seq_len), torch.ones_like(distance, dtype=torch.float32))
        return counts[..., : self.seq_len].sum(0)

    @cached_property
    def chance_by_distance(self) -> torch.Tensor:
        """(layer, head, T) float32 expected number of high pairs at each distance under a uniform choice
        of each window's k high pairs among its n valid pairs: ``sum_b k * n_d / n`` (n_d valid pairs at distance d)."""
        valid = self.pair_weights[..., 0]  # (B, P)
        by_distance = valid @ self.distance_onehot  # (B, T)
        n = valid.sum(-1, keepdim=True)  # (B, 1)
        share = by_distance / n.where(n > 0, torch.ones_like(n))  # (B, T); a window without pairs adds nothing
        return torch.einsum("lbh,bt->lht", self.high_count.float(), share)

    # -- attention --------------------------------------------------------------------------------------
    @cached_property
    def _attention_pass(self) -> Dict[str, torch.Tensor]:
        # One walk over the windows: each chunk's attention is assembled from the layers and folded
        # into the high-attention pairs and the separator statistics' sums while it is in cache.
        self._need_attention()
        n_layers, n_heads, seq_len, n_pairs = self.n_layers, self.n_heads, self.seq_len, self.n_pairs
        heads = n_layers * n_heads
        host = self._host
        slots = max(host["k"], default=0)
        index = torch.full((self.batch_size, n_layers, n_heads, slots), n_pairs, dtype=torch.long, device=self.device)
        key_mass = torch.empty(self.batch_size, heads, seq_len, device=self.device)
        distance = torch.empty(self.batch_size, heads, device=self.device)
        entropy = torch.zeros(self.batch_size, heads, device=self.device)
        queries = self.tokens.float()  # (B, T)
        keys = self.batch["attention_mask"].float()  # (B, T)
        position = torch.arange(seq_len, device=self.device, dtype=torch.float32)
        gap = (position[:, None] - position[None, :]).abs()  # (T, T) |i - j|
        backward = self.pairs[1] * seq_len + self.pairs[0]  # A[j, i] of pair (i, j)
        for start, stop in self._chunks():
            count = stop - start
            attention = self._attention_chunk(start, stop).reshape(count, heads, seq_len, seq_len)
            pair_values = torch.maximum(self._pair_values(attention), self._pair_values(attention, backward))  # (c, L*H, P)
            pair_values = pair_values.view(count, n_layers, n_heads, n_pairs)
            valid = self._valid_chunk(start, stop, 4)
            if valid is not None:  # a temporary: mask it in place rather than in a copy
                pair_values.masked_fill_(~valid, float("-inf"))
            chosen = select_top(pair_values, host["k"][start:stop], None, n_pairs)
            index[start:stop, ..., : chosen.shape[-1]] = chosen
            q, k = queries[start:stop], keys[start:stop]
            key_mass[start:stop] = (q[:, None, None, :] @ attention)[..., 0, :]  # (c, L*H, T): sum_i q_i A[i, j]
            query_key = q[:, :, None] * k[:, None, :]  # (c, T, T): statistic query i, real key j
            cells = attention.view(count, heads, seq_len * seq_len)  # query-major cells i * T + j
            distance[start:stop] = torch.bmm(cells, (query_key * gap).reshape(count, -1, 1))[..., 0]
            # the entropy's log is the costliest step: only the span of real tokens is taken (outside it
            # every query or key weight is 0)
            first, last = min(host["first"][start:stop]), max(host["last"][start:stop])
            if last > first:
                span = attention[..., first:last, first:last]  # (c, L*H, n, n)
                plogp = span.clamp_min(TINY).log_().mul_(span)
                weight = query_key[:, first:last, first:last].reshape(count, -1, 1)
                entropy[start:stop] = -torch.bmm(plogp.reshape(count, heads, -1), weight)[..., 0]
        return {"index": index, "key_mass": key_mass, "distance": distance, "entropy": entropy}

    @cached_property
    def attention_pairs(self) -> torch.Tensor:
        """(layer, batch, head, P) ``max(A[i, j], A[j, i])`` of each pair (materialised on first use).

        Raises:
            ValueError: the batch was captured without attention probabilities.
        """
        self._need_attention()
        return attention_pair_values(self.attention, self.pairs)

    @property
    def attention_index(self) -> torch.Tensor:
        """(batch, layer, head, S) int64 pair indices of the high-attention pairs, ascending, P (the sentinel) in unused slots.

        Raises:
            ValueError: the batch was captured without attention probabilities.
        """
        return self._attention_pass["index"]

    @cached_property
    def _attention_member(self) -> torch.Tensor:
        # (B, L, H, P+1) bool: pair p is high-attention (column P, the sentinel, is False)
        dense = torch.zeros(self.batch_size, self.n_layers, self.n_heads, self.n_pairs + 1, dtype=torch.bool, device=self.device)
        dense.scatter_(-1, self.attention_index, True)
        dense[..., self.n_pairs] = False
        return dense

    @cached_property
    def high_attention(self) -> torch.Tensor:
        """(layer, batch, head, P) bool, high-attention pairs: top ``top_fraction`` valid pairs by :attr:`attention_pairs`."""
        return self._attention_member[..., : self.n_pairs].transpose(0, 1)

    @property
    def high_attention_count(self) -> torch.Tensor:
        """(layer, batch, head) float32 number of high-attention pairs (the window's k)."""
        return self.top_k.float()[None, :, None].expand(self.n_layers, self.batch_size, self.n_heads)

    def attention_sums(self, weights: torch.Tensor) -> torch.Tensor:
        """Weighted counts of high-attention pairs: ``sum_p high_attention[l, b, h, p] * weights[b, p, k]``.

        Args:
            weights: (batch, P, K) per-window pair weights.

        Returns:
            (layer, batch, head, K) float32.
        """
        return self._per_head(indexed_sums(self._flat(self.attention_index), weights))

    @cached_property
    def _high_in_attention_index(self) -> torch.Tensor:
        # (B, L, H, S) high pairs that are also high-attention pairs; the sentinel elsewhere
        inside = self._attention_member.gather(-1, self.high_index)
        return self.high_index.masked_fill(~inside, self.n_pairs)

    def high_in_attention_sums(self, weights: torch.Tensor) -> torch.Tensor:
        """Weighted counts of pairs that are both high-CSM and high-attention:
        ``sum_p high[l, b, h, p] * high_attention[l, b, h, p] * weights[b, p, k]``.

        Args:
            weights: (batch, P, K) per-window pair weights.

        Returns:
            (layer, batch, head, K) float32.
        """
        return self._per_head(indexed_sums(self._flat(self._high_in_attention_index), weights))

    @cached_property
    def high_in_attention(self) -> torch.Tensor:
        """(layer, batch, head) float32 number of pairs both high-CSM and high-attention."""
        return (self._high_in_attention_index < self.n_pairs).sum(-1).float().transpose(0, 1)

    @property
    def attention_value_sums(self) -> torch.Tensor:
        """(layer, batch, head) float32 CSM summed over the high-attention pairs."""
        self._need_attention()
        return self._csm_pass["inside"].transpose(0, 1)

    @property
    def attention_key_mass(self) -> torch.Tensor:
        """(layer, batch, head, T) float32 attention received by each key, summed over the statistic queries:
        ``sum_i tokens[b, i] * A[l, b, h, i, j]``."""
        return self._attention_pass["key_mass"].reshape(self.batch_size, self.n_layers, self.n_heads, -1).transpose(0, 1)

    @property
    def attention_distance_sums(self) -> torch.Tensor:
        """(layer, batch, head) float32 ``sum_i sum_j A[i, j] |i - j|`` over statistic queries i and real keys j (tokens)."""
        return self._per_head(self._attention_pass["distance"][..., None])[..., 0]

    @property
    def attention_entropy_sums(self) -> torch.Tensor:
        """(layer, batch, head) float32 ``-sum_i sum_j A[i, j] ln A[i, j]`` over statistic queries i and real keys j
        (nats; 0 ln 0 = 0: probabilities are clamped to the smallest normal float32, :data:`TINY`, inside the log)."""
        return self._per_head(self._attention_pass["entropy"][..., None])[..., 0]

    # -- layout helpers -----------------------------------------------------------------------------
    def _flat(self, x: torch.Tensor) -> torch.Tensor:
        # (B, L, H, ...) -> (B, L*H, ...)
        return x.reshape(self.batch_size, self.n_layers * self.n_heads, *x.shape[3:])

    def _per_head(self, sums: torch.Tensor) -> torch.Tensor:
        # (B, L*H, K) -> (B, L, H, K) -> (L, B, H, K)
        return sums.reshape(self.batch_size, self.n_layers, self.n_heads, -1).transpose(0, 1)
