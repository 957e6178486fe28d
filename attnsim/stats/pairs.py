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
round(top_fraction * n))`` of the n valid pairs by CSM value (``top_fraction``
rule; ties broken by position), or the valid pairs whose CSM z-score within
the window exceeds ``zscore`` (``zscore`` rule).

Pair masks shared by several findings (each computed once per batch by
:class:`PairView`):

- *same-sentence* pairs: valid pairs whose two tokens carry the same sentence
  id >= 0 (a token with id -1, i.e. a special token or padding, is in no
  sentence, so a pair holding one is never "same sentence");
- *identical-token* pairs: valid pairs of two occurrences of one token id,
  neither of them a special token or padding (Halevi et al., repetition);
- *high-attention* pairs: per window, layer and head, the top ``k`` valid pairs
  (the same ``k`` as the ``top_fraction`` rule, whatever ``high_rule`` is) by
  ``max(A[i, j], A[j, i])``, the attention probability between the two tokens
  in either direction.

All functions are pure: tensors in, tensors out.
"""

from __future__ import annotations

from functools import cached_property
from typing import Dict, Optional

import torch

_EPS = 1e-12


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


def high_pairs_top_fraction(values: torch.Tensor, pair_mask: torch.Tensor, top_fraction: float) -> torch.Tensor:
    """Top ``round(top_fraction * n)`` valid pairs (at least 1) per window and head.

    Args:
        values: (layer, batch, head, P) CSM values in pair space.
        pair_mask: (batch, P) bool, valid pairs.
        top_fraction: share of the n valid pairs of each window that are high.

    Returns:
        (layer, batch, head, P) bool.
    """
    n = pair_mask.sum(-1)  # (B,)
    k = torch.floor(top_fraction * n.double() + 0.5).long().clamp_min(1)
    k = torch.where(n > 0, torch.minimum(k, n), torch.zeros_like(k))  # (B,)
    high = torch.zeros(values.shape, dtype=torch.bool, device=values.device)
    k_max = int(k.max()) if k.numel() else 0
    if k_max == 0:
        return high
    masked = values.masked_fill(~pair_mask[None, :, None, :], float("-inf"))
    top = masked.topk(k_max, dim=-1, sorted=True).indices  # (L, B, H, k_max)
    keep = torch.arange(k_max, device=values.device)[None, :] < k[:, None]  # (B, k_max)
    high.scatter_(-1, top, keep[None, :, None, :].expand_as(top))
    return high


def high_pairs_zscore(values: torch.Tensor, pair_mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """Valid pairs whose CSM z-score within their window and head exceeds ``threshold``.

    The mean and (population) standard deviation are over the window's valid pairs.

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


def identical_pairs(input_ids: torch.Tensor, attention_mask: torch.Tensor, special_mask: torch.Tensor, pair_mask: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """Valid pairs of two occurrences of the same token id (i != j), special tokens and padding excluded.

    Args:
        input_ids, attention_mask, special_mask: (batch, pos).
        pair_mask: (batch, P) bool, valid pairs.
        pairs: (2, P) rows and columns of the pairs i < j.

    Returns:
        (batch, P) bool.
    """
    content = attention_mask.bool() & ~special_mask.bool()  # (B, T)
    same_id = input_ids[:, pairs[0]] == input_ids[:, pairs[1]]  # (B, P)
    return same_id & content[:, pairs[0]] & content[:, pairs[1]] & pair_mask


def attention_pair_values(attention: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """Attention probability between the two tokens of each pair, in either direction.

    Args:
        attention: (layer, batch, head, query_pos, key_pos) attention probabilities A.
        pairs: (2, P) rows and columns of the pairs i < j.

    Returns:
        (layer, batch, head, P) float32, ``max(A[i, j], A[j, i])`` (unitless, in [0, 1]).
    """
    seq_len = attention.shape[-1]
    flat = attention.float().flatten(-2)  # (L, B, H, T*T)
    forward = flat[..., pairs[0] * seq_len + pairs[1]]  # A[i, j]: query i attends to key j
    backward = flat[..., pairs[1] * seq_len + pairs[0]]  # A[j, i]
    return torch.maximum(forward, backward)


def pair_sums(batch_major: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted sums over the pairs of each window, for several per-window pair weights at once.

    Args:
        batch_major: (batch, N, P) per-pair values, e.g. N = layer * head.
        weights: (batch, P, K) per-window pair weights (masks as 0/1 floats).

    Returns:
        (batch, N, K): ``sum_p batch_major[b, n, p] * weights[b, p, k]`` (one batched matmul).
    """
    return torch.bmm(batch_major, weights.to(batch_major.dtype))


class PairView:
    """Per-batch quantities shared by every finding, each computed once on first use.

    Built from one forward pass (:class:`~attnsim.capture.HeadCapture`) and its batch.

    Args:
        vectors: (layer, batch, head, T, d) per-head vectors (z or result).
        batch: dict with ``attention_mask``, ``special_mask``, ``sentence_ids`` (batch, T)
            and ``input_ids`` (batch, T).
        attention: (layer, batch, head, T, T) attention probabilities or None.
        top_fraction, high_rule, zscore, include_special, normalise: see :class:`attnsim.config.StatsConfig`.
        positions: optional (T, 2) (row, col) of each token on an image's patch grid, NaN for tokens
            without one (a ViT's extra tokens); when given, :attr:`distance` is the grid distance
            (:func:`attnsim.capture.vision.grid_distance`) instead of j - i.
    """

    def __init__(
        self,
        vectors: torch.Tensor,
        batch: Dict[str, torch.Tensor],
        attention: Optional[torch.Tensor] = None,
        top_fraction: float = 0.02,
        high_rule: str = "top_fraction",
        zscore: float = 2.0,
        include_special: bool = True,
        normalise: str = "none",
        positions: Optional[torch.Tensor] = None,
    ):
        self.positions = positions
        self.vectors = vectors.float()  # statistics in fp32 whatever the model dtype
        self.batch = batch
        self.attention = attention
        self.top_fraction = top_fraction
        self.high_rule = high_rule
        self.zscore = zscore
        self.include_special = include_special
        self.normalise = normalise
        self.n_layers, self.batch_size, self.n_heads, self.seq_len = vectors.shape[:4]

    @cached_property
    def csm(self) -> torch.Tensor:
        """(layer, batch, head, T, T) Context Similarity Matrices, zero diagonal."""
        return context_similarity(self.vectors, self.normalise)

    @cached_property
    def tokens(self) -> torch.Tensor:
        """(batch, T) bool, tokens that enter statistics."""
        return token_mask(self.batch["attention_mask"], self.batch["special_mask"], self.include_special)

    @cached_property
    def pairs(self) -> torch.Tensor:
        """(2, P) rows and columns of the pairs i < j."""
        return pair_indices(self.seq_len, self.vectors.device)

    @cached_property
    def distance(self) -> torch.Tensor:
        """(P,) int64, distance j - i of each pair (1..T-1); with ``positions``, the rounded Euclidean
        distance on the patch grid in patches, -1 for pairs holding a token without a grid position."""
        if self.positions is not None:
            from attnsim.capture.vision import grid_distance

            return grid_distance(self.positions.to(self.vectors.device), self.pairs[0], self.pairs[1])
        return self.pairs[1] - self.pairs[0]

    @cached_property
    def pair_mask(self) -> torch.Tensor:
        """(batch, P) bool, valid pairs."""
        return self.tokens[:, self.pairs[0]] & self.tokens[:, self.pairs[1]]

    @cached_property
    def values(self) -> torch.Tensor:
        """(layer, batch, head, P) CSM of each pair i < j."""
        # a gather on the flattened T*T axis is several times faster than indexing rows and columns
        return self.csm.flatten(-2)[..., self.flat_pairs]

    @cached_property
    def high(self) -> torch.Tensor:
        """(layer, batch, head, P) bool, high-CSM pairs (see module docstring)."""
        if self.high_rule == "zscore":
            return high_pairs_zscore(self.values, self.pair_mask, self.zscore)
        return high_pairs_top_fraction(self.values, self.pair_mask, self.top_fraction)

    @cached_property
    def high_count(self) -> torch.Tensor:
        """(layer, batch, head) number of high pairs."""
        # summing the float indicator is far faster than summing a bool tensor (exact below 2**24 pairs)
        return self.high_float.sum(-1).to(torch.int64)

    @cached_property
    def distance_onehot(self) -> torch.Tensor:
        """(P, T) float, one-hot of each pair's distance: sums over pairs by distance are ``x @ distance_onehot``.

        A pair without a distance (-1, see :attr:`distance`) has an all-zero row: it enters no distance statistic.
        """
        onehot = torch.zeros(self.pairs.shape[1], self.seq_len, dtype=self.vectors.dtype, device=self.vectors.device)
        if self.positions is not None:
            placed = (self.distance >= 0).nonzero().squeeze(-1)
            onehot[placed, self.distance[placed]] = 1
            return onehot
        onehot[torch.arange(self.pairs.shape[1], device=onehot.device), self.distance] = 1
        return onehot

    @cached_property
    def flat_pairs(self) -> torch.Tensor:
        """(P,) int64, index ``i * T + j`` of each pair in a flattened T x T matrix."""
        return self.pairs[0] * self.seq_len + self.pairs[1]

    @cached_property
    def high_float(self) -> torch.Tensor:
        """(layer, batch, head, P) float32 0/1 indicator of high-CSM pairs (sums of it are exact counts)."""
        return self.high.to(torch.float32)

    @cached_property
    def same_sentence(self) -> torch.Tensor:
        """(batch, P) bool, valid pairs in the same sentence (see :func:`same_sentence_pairs`)."""
        return same_sentence_pairs(self.batch["sentence_ids"], self.pair_mask, self.pairs)

    @cached_property
    def identical(self) -> torch.Tensor:
        """(batch, P) bool, valid pairs of identical non-special tokens (see :func:`identical_pairs`)."""
        b = self.batch
        return identical_pairs(b["input_ids"], b["attention_mask"], b["special_mask"], self.pair_mask, self.pairs)

    @cached_property
    def attention_pairs(self) -> torch.Tensor:
        """(layer, batch, head, P) ``max(A[i, j], A[j, i])`` of each pair.

        Raises:
            ValueError: the batch was captured without attention probabilities.
        """
        if self.attention is None:
            raise ValueError("This statistic needs attention probabilities; the finding must set needs_attention = True.")
        return attention_pair_values(self.attention, self.pairs)

    @cached_property
    def high_attention(self) -> torch.Tensor:
        """(layer, batch, head, P) bool, high-attention pairs: top ``top_fraction`` valid pairs by :attr:`attention_pairs`."""
        return high_pairs_top_fraction(self.attention_pairs, self.pair_mask, self.top_fraction)

    @cached_property
    def high_attention_float(self) -> torch.Tensor:
        """(layer, batch, head, P) float32 0/1 indicator of high-attention pairs."""
        return self.high_attention.to(torch.float32)

    @cached_property
    def high_in_attention(self) -> torch.Tensor:
        """(layer, batch, head) number of pairs both high-CSM and high-attention."""
        return (self.high_float * self.high_attention_float).sum(-1)

    @cached_property
    def _high_batch_major(self) -> torch.Tensor:
        # (L, B, H, P) -> (B, L, H, P) -> (B, L*H, P), contiguous once for every batched matmul
        return self.high_float.permute(1, 0, 2, 3).reshape(self.batch_size, self.n_layers * self.n_heads, -1)

    @cached_property
    def _values_batch_major(self) -> torch.Tensor:
        # (L, B, H, P) -> (B, L*H, P); float32 whatever the CSM dtype
        return self.values.float().permute(1, 0, 2, 3).reshape(self.batch_size, self.n_layers * self.n_heads, -1)

    def _per_head(self, sums: torch.Tensor) -> torch.Tensor:
        # (B, L*H, K) -> (B, L, H, K) -> (L, B, H, K)
        return sums.reshape(self.batch_size, self.n_layers, self.n_heads, -1).permute(1, 0, 2, 3)

    def high_sums(self, weights: torch.Tensor) -> torch.Tensor:
        """Weighted counts of high pairs: ``sum_p high[l, b, h, p] * weights[b, p, k]``.

        Args:
            weights: (batch, P, K) per-window pair weights, e.g. a stack of pair masks.

        Returns:
            (layer, batch, head, K) float32.
        """
        return self._per_head(pair_sums(self._high_batch_major, weights))

    def value_sums(self, weights: torch.Tensor) -> torch.Tensor:
        """Weighted sums of CSM values: ``sum_p CSM[l, b, h, p] * weights[b, p, k]``.

        Args:
            weights: (batch, P, K) per-window pair weights.

        Returns:
            (layer, batch, head, K) float32, in CSM units.
        """
        return self._per_head(pair_sums(self._values_batch_major, weights))
