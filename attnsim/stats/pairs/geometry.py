"""Pair space and its masks: which token pairs exist, how far apart they are, which class they fall in.

Pair space: the P = T(T-1)/2 unordered pairs (i, j), i < j, of a window of T
tokens, in ``torch.triu_indices(T, T, 1)`` order. A pair is *valid* when both
tokens are real (not padding) and, unless ``include_special``, not special
tokens.

Pair classes shared by several findings (:data:`PAIR_CLASSES`):

- *same-sentence* pairs: valid pairs whose two tokens carry the same sentence
  id >= 0 (a token with id -1, i.e. a special token or padding, is in no
  sentence, so a pair holding one is never "same sentence");
- *cross-sentence* pairs: valid pairs of two tokens in different sentences (both ids >= 0);
- *identical-token* pairs: valid pairs of two occurrences of one token id,
  neither of them a special token, an unknown token or padding (Halevi et al., repetition);
- *other* pairs: valid pairs that are not identical-token pairs.

Distance of a pair: ``j - i`` in tokens, or, for images, the rounded Euclidean
distance of the two patches on the patch grid (:func:`grid_distance`).

All functions are pure: tensors in, tensors out.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch

_EPS = 1e-12

PAIR_CLASSES = ("valid", "same", "cross", "identical", "other")
"""Columns of :func:`pair_classes` (and of :attr:`~attnsim.stats.pairs.PairView.pair_weights`)."""


def context_similarity(z: torch.Tensor, normalise: str = "none", wide: bool = True) -> torch.Tensor:
    """Context Similarity Matrix (CSM) of per-head vectors (Halevi et al., arXiv:2512.21956).

    Args:
        z: (..., pos, d) per-head vectors (``z`` or ``result``), e.g. (layer, batch, head, T, d_head).
        normalise: ``none`` (dot products, units of z²) or ``cosine`` (divided by both norms, unitless).
        wide: products in float64, rounded once (see :func:`similarity_rows`); False: in ``z``'s dtype
            (float32: each value within :func:`product_error` of the float64 one).

    Returns:
        (..., pos, pos) with a zero diagonal.

    Raises:
        ValueError: ``normalise`` is neither ``none`` nor ``cosine``.
    """
    csm = similarity_rows(z, z, normalise) if wide or normalise != "none" else z @ z.transpose(-1, -2)  # (..., T, T)
    csm.diagonal(dim1=-2, dim2=-1).zero_()
    return csm


def similarity_rows(rows: torch.Tensor, z: torch.Tensor, normalise: str = "none") -> torch.Tensor:
    """CSM entries of some rows against every token: ``rows @ zᵀ`` (cosine: divided by both norms), diagonal kept.

    Computed in float64 and rounded once to ``z``'s dtype, so that a value does not depend on how many rows
    are computed together (BLAS rounds a float32 product differently with its shape): the dense view's
    whole matrices and the blockwise view's row blocks give the same values, and the same high pairs.

    Args:
        rows: (..., R, d) the vectors of R tokens; z: (..., T, d) every token's vector.
        normalise: ``none`` or ``cosine``.

    Returns:
        (..., R, T) in ``z``'s dtype.

    Raises:
        ValueError: ``normalise`` is neither ``none`` nor ``cosine``.
    """
    wide_rows, wide = rows.double(), z.double()
    csm = wide_rows @ wide.transpose(-1, -2)
    if normalise == "cosine":
        csm = csm / (wide_rows.norm(dim=-1).clamp_min(_EPS).unsqueeze(-1) * wide.norm(dim=-1).clamp_min(_EPS).unsqueeze(-2))
    elif normalise != "none":
        raise ValueError(f"normalise must be 'none' or 'cosine', not {normalise!r}")
    return csm.to(z.dtype)


def csm_window_mean(z: torch.Tensor, tokens: torch.Tensor, normalise: str = "none") -> torch.Tensor:
    """The mean CSM value over the valid pairs i < j of each window and head, in float64, from the vectors alone.

    ``sum_{i<j} z_i . z_j = (|sum_i z_i|^2 - sum_i |z_i|^2) / 2`` over the valid tokens, so the mean needs no T x T
    product: O(T d) per head. The blockwise walk uses it as the shift of its variance sums (:class:`PairSums`).

    Args:
        z: (..., H, T, d) per-head vectors of windows; tokens: (..., T) bool, the tokens that enter statistics.
        normalise: ``none`` or ``cosine`` (each vector divided by its norm first; a zero vector stays 0).

    Returns:
        (..., H) float64; 0 where a window has fewer than two valid tokens.
    """
    wide = z.double() * tokens[..., None, :, None].to(torch.float64)  # (..., H, T, d), 0 at other tokens
    if normalise == "cosine":
        wide = wide / wide.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    total = wide.sum(-2)  # (..., H, d)
    pairs_sum = ((total * total).sum(-1) - (wide * wide).sum((-1, -2))) / 2
    n = tokens.sum(-1).to(torch.float64)
    n_pairs = (n * (n - 1) / 2)[..., None]  # (..., 1)
    return torch.where(n_pairs > 0, pairs_sum / n_pairs.clamp_min(1), torch.zeros_like(pairs_sum))


def product_error(z: torch.Tensor) -> torch.Tensor:
    """A bound of how far a float32 CSM value can lie from the float64 one rounded to float32.

    A float32 dot product of length d, in any summation order, is within ``d u / (1 - d u)`` of
    ``sum_i |a_i b_i| <= |a| |b|`` of the exact value (u = 2^-24, Higham, *Accuracy and Stability of
    Numerical Algorithms*, 2nd ed., Sec. 3.1); the float64 product rounded to float32 is within ``u``
    of ``|a| |b|`` of it. ``(d + 2) u max_i |z_i|²`` bounds both together for every pair of a head.

    Args:
        z: (..., T, d) per-head vectors of one window and head per leading index.

    Returns:
        (...) float32, in units of z² (the CSM's).
    """
    d = z.shape[-1]
    return (d + 2) * 2.0**-24 * z.float().pow(2).sum(-1).amax(-1)


def token_mask(attention_mask: torch.Tensor, special_mask: torch.Tensor, include_special: bool = True) -> torch.Tensor:
    """(batch, pos) bool: tokens that enter statistics (real tokens; specials only if ``include_special``)."""
    valid = attention_mask.bool()
    if not include_special:
        valid = valid & ~special_mask.bool()
    return valid


def pair_indices(seq_len: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """(2, P) int64 row and column of every pair i < j, in ``triu_indices`` order."""
    return torch.triu_indices(seq_len, seq_len, 1, device=device)


def valid_pairs(tokens: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """(batch, P) bool: pairs whose two tokens both enter statistics.

    Args:
        tokens: (batch, pos) bool, from :func:`token_mask`.
        pairs: (2, P) from :func:`pair_indices`.
    """
    return tokens[:, pairs[0]] & tokens[:, pairs[1]]


def grid_distance(positions: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Distance on an image's patch grid of token pairs, for CSM distance statistics on images.

    Args:
        positions: (T, 2) (row, col) per token in patches, NaN for tokens without a grid position
            (a Vision Transformer's extra tokens; see :meth:`attnsim.data.layout.TokenLayout.positions`).
        rows, cols: (P,) token indices of each pair.

    Returns:
        (P,) int64: Euclidean distance in patches rounded to the nearest integer (half up),
        -1 where either token has no grid position.
    """
    delta = positions[rows] - positions[cols]  # (P, 2)
    distance = delta.pow(2).sum(-1).sqrt()
    out = torch.floor(distance + 0.5)
    return torch.where(torch.isnan(out), torch.full_like(out, -1), out).long()


def pair_distance(pairs: torch.Tensor, positions: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(P,) int64 distance of each pair: ``j - i`` in tokens (1..T-1), or with ``positions`` (T, 2)
    the grid distance in patches (:func:`grid_distance`), -1 for pairs without one."""
    if positions is not None:
        return grid_distance(positions.to(pairs.device), pairs[0], pairs[1])
    return pairs[1] - pairs[0]


def distance_onehot(distance: torch.Tensor, seq_len: int) -> torch.Tensor:
    """(P, T) float32 one-hot of each pair's distance: sums over pairs by distance are ``x @ onehot``.

    Args:
        distance: (P,) int64 from :func:`pair_distance`; a pair with distance -1 gets an all-zero
            row and so enters no distance statistic.
        seq_len: T (distances 0..T-1).
    """
    onehot = torch.zeros(distance.shape[0], seq_len, dtype=torch.float32, device=distance.device)
    placed = (distance >= 0).nonzero().squeeze(-1)
    onehot[placed, distance[placed]] = 1
    return onehot


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
    """(batch, P) bool: valid pairs of two tokens in different sentences (both sentence ids >= 0).

    Args: as :func:`same_sentence_pairs`.
    """
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


def pair_classes(batch: Dict[str, torch.Tensor], pair_mask: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """(batch, P, 5) float32 0/1 masks of the pair classes :data:`PAIR_CLASSES`.

    Args:
        batch: dict with ``sentence_ids``, ``input_ids``, ``attention_mask``, ``special_mask`` (batch, pos)
            and optionally ``unknown_mask``.
        pair_mask: (batch, P) bool, valid pairs (:func:`valid_pairs`).
        pairs: (2, P) from :func:`pair_indices`.

    Returns:
        Columns: valid, same-sentence, cross-sentence, identical-token and other (valid, not identical) pairs.
    """
    same = same_sentence_pairs(batch["sentence_ids"], pair_mask, pairs)
    cross = cross_sentence_pairs(batch["sentence_ids"], pair_mask, pairs)
    identical = identical_pairs(batch["input_ids"], batch["attention_mask"], batch["special_mask"], pair_mask, pairs, batch.get("unknown_mask"))
    return torch.stack([pair_mask, same, cross, identical, pair_mask & ~identical], -1).float()


def listed_pair_classes(
    batch: Dict[str, torch.Tensor], tokens: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, listed: torch.Tensor
) -> Dict[str, torch.Tensor]:
    """The classes of :func:`pair_classes` of listed pairs, from their two tokens (no pair-space tensor).

    Args:
        batch: dict with ``sentence_ids``, ``input_ids``, ``attention_mask``, ``special_mask`` (batch, pos) and
            optionally ``unknown_mask``.
        tokens: (batch, pos) bool tokens that enter statistics (:func:`token_mask`).
        rows, cols: (batch, ...) int64 the two tokens i < j of each listed pair (0 at unused slots); listed: (batch, ...)
            bool, whether the slot holds a pair.

    Returns:
        ``valid``, ``same``, ``cross`` and ``identical`` (bool), each shaped like ``rows``; unused slots are in no class.
    """
    lead = rows.shape[0]
    flat_r, flat_c = rows.reshape(lead, -1), cols.reshape(lead, -1)

    def at(values: torch.Tensor) -> tuple:  # (B, T) token values at both ends: shaped like rows each
        return values.gather(1, flat_r).view_as(rows), values.gather(1, flat_c).view_as(rows)

    t_i, t_j = at(tokens)
    valid = t_i & t_j & listed
    s_i, s_j = at(batch["sentence_ids"])
    same = (s_i == s_j) & (s_i >= 0) & valid
    cross = (s_i != s_j) & (s_i >= 0) & (s_j >= 0) & valid
    content = batch["attention_mask"].bool() & ~batch["special_mask"].bool()
    if batch.get("unknown_mask") is not None:
        content = content & ~batch["unknown_mask"].bool()
    c_i, c_j = at(content)
    id_i, id_j = at(batch["input_ids"])
    identical = (id_i == id_j) & c_i & c_j & valid
    return {"valid": valid, "same": same, "cross": cross, "identical": identical}


POOL_ABOVE = 512
"""Windows longer than this have their example windows' maps recorded already pooled (blockwise path, figures)."""

MATRIX_CELLS = 128
"""Windows longer than this keep the corpus-mean CSM matrix by cells of tokens, at most this many per axis: twice the
figures' default resolution (``plots.max_tokens`` = 64 cells per axis), the only place the matrix is shown. Per
layer and head it holds 128 x 128 float64 sums (128 KiB: 35 MiB for SmolLM2's 270 heads, 128 MiB for 1,024 heads)
instead of a state growing as T²."""


def pool_cell(seq_len: int) -> int:
    """Tokens per side of a cell of the corpus-mean matrix: 1 up to :data:`MATRIX_CELLS` tokens, else ``ceil(T / MATRIX_CELLS)``."""
    return 1 if seq_len <= MATRIX_CELLS else -(-seq_len // MATRIX_CELLS)


def pool_pairs(values: torch.Tensor, pairs: torch.Tensor, seq_len: int, cell: int) -> torch.Tensor:
    """(..., P) pair values summed into (..., G, G) float64 cells of ``cell`` tokens (pair (i, j) in cell (i // c, j // c)).

    Args:
        values: (..., P) values of the pairs i < j.
        pairs: (2, P) rows and columns of the pairs (:func:`pair_indices`).
        seq_len: T; cell: tokens per side of a cell (:func:`pool_cell`); G = ceil(T / cell).
    """
    cells = -(-seq_len // cell)
    target = (pairs[0] // cell) * cells + pairs[1] // cell  # (P,)
    flat = values.reshape(-1, values.shape[-1])
    out = torch.zeros(flat.shape[0], cells * cells, dtype=torch.float64, device=values.device)
    step = max(1, (1 << 22) // max(1, flat.shape[1]))  # rows widened to float64 at a time: about 4M values (32 MiB), not all (L, H, P)
    for start in range(0, flat.shape[0], step):  # each row's sums are added in pair order whatever the rows taken together
        out[start : start + step].index_add_(1, target, flat[start : start + step].double())
    return out.reshape(*values.shape[:-1], cells, cells)


__all__ = [
    "listed_pair_classes",
    "POOL_ABOVE",
    "MATRIX_CELLS",
    "pool_cell",
    "pool_pairs",
    "PAIR_CLASSES",
    "context_similarity",
    "token_mask",
    "pair_indices",
    "valid_pairs",
    "grid_distance",
    "pair_distance",
    "distance_onehot",
    "same_sentence_pairs",
    "cross_sentence_pairs",
    "identical_pairs",
    "pair_classes",
]
