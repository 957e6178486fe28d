"""The attention probabilities recomputed from captured queries and keys, with the model's own score rule.

Pure tensor functions (no model): the capture (:mod:`attnsim.capture.queries`) records, per layer, the
queries, keys, scaling and mask the model's SDPA kernel received (a ``QueryKey``: attributes ``query``,
``key`` (batch, kv_head, T, d_head), ``scaling``, ``mask`` and ``causal``; grouped key/value heads are kept
once and repeated to the query heads where scores are computed, :func:`head_keys`); the blockwise view
(:mod:`attnsim.stats.pairs.blocks`) recomputes the probabilities from them one block of query rows at a time.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch


def head_keys(key: torch.Tensor, heads: int, dim: int) -> torch.Tensor:
    """``key`` with its grouped key/value heads (GQA) repeated to ``heads`` query heads along axis ``dim``: query
    head h reads key head ``h // (heads / kv_heads)``, as transformers' ``repeat_kv``; the same tensor when the counts
    match. The capture keeps each layer's keys once per key/value head (a third of the memory for SmolLM2's 9
    query and 3 key/value heads).

    Raises:
        ValueError: ``heads`` is not a multiple of the key's heads.
    """
    kv_heads = key.shape[dim]
    if kv_heads == heads:
        return key
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads do not share {kv_heads} key/value heads evenly")
    return key.repeat_interleave(heads // kv_heads, dim)


def masked_scores(qk: Any, window: int, start: int, stop: int, transposed: bool = False, columns: Optional[Tuple[int, int]] = None) -> torch.Tensor:
    """The scores the model's kernel softmaxes, for query rows ``start..stop-1`` of batch element ``window`` (float32).

    ``Q[rows] Kᵀ · scaling`` plus the mask: a boolean mask's False cells get float32's lowest value (as
    eager attention's mask does, so that a fully masked row is uniform rather than NaN), an additive mask
    is added (and clamped to that value), and SDPA's own causal rule masks keys j > i.

    Each score is one dot product over d_head, accumulated in the same order whatever the number of rows
    computed together, so whole rows (:func:`attention_rows`) and the blockwise view's blocks give the same
    scores and probabilities (tests/test_blockwise.py checks it).

    Args:
        qk: one layer's ``QueryKey`` (:mod:`attnsim.capture.queries`).
        window: the batch element.
        start, stop: rows i (or, ``transposed``, the keys i).
        transposed: the scores ``S[j, i]`` of every query j against the keys i of ``start..stop-1``, laid out (head, i, j).
        columns: ``(first, last)``: only the keys j (or, ``transposed``, the queries j) ``first..last-1``; None: all T.

    Returns:
        (head, stop - start, last - first) float32.
    """
    q = qk.query[window].float()  # (H, T, d)
    k = head_keys(qk.key[window], q.shape[0], 0).float()  # (H, T, d)
    lowest = float(torch.finfo(torch.float32).min)
    full = None if qk.mask is None else qk.mask[window if qk.mask.shape[0] > 1 else 0]  # (1 or H, T or 1, T)
    first, last = columns if columns is not None else (0, k.shape[1])
    rows = torch.arange(start, stop, device=q.device)[:, None]
    cols = torch.arange(first, last, device=q.device)[None, :]
    if not transposed:
        scores = (q[:, start:stop] @ k[:, first:last].transpose(-1, -2)).mul_(qk.scaling)  # (H, rows, columns)
        mask = None if full is None else (full[..., start:stop, first:last] if full.shape[-2] > 1 else full[..., first:last])
        causal = cols > rows if qk.causal else None  # key j after query i
    else:
        scores = (k[:, start:stop] @ q[:, first:last].transpose(-1, -2)).mul_(qk.scaling)  # (H, key i, query j)
        mask = None if full is None else full[..., first:last, start:stop].transpose(-1, -2)  # mask[j, i] laid out (i, j); broadcasts
        causal = rows > cols if qk.causal else None  # key i after query j
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, lowest)
        else:
            scores = (scores + mask.float()).clamp_(min=lowest)
    if causal is not None:
        scores = scores.masked_fill(causal, lowest)
    return scores


def attention_rows(qk: Any, start: int, stop: int) -> torch.Tensor:
    """Recompute the attention probabilities of query rows ``start..stop-1``, as the model's kernel does:
    ``exp(S - logsumexp(S))`` of the :func:`masked_scores` S (float32).

    Args:
        qk: one layer's ``QueryKey`` (:mod:`attnsim.capture.queries`).
        start, stop: the query rows.

    Returns:
        (batch, head, stop - start, T) float32.
    """
    out = []
    for window in range(qk.query.shape[0]):
        scores = masked_scores(qk, window, start, stop)
        out.append(torch.exp(scores - scores.logsumexp(-1, keepdim=True)))
    return torch.stack(out)


__all__ = ["head_keys", "masked_scores", "attention_rows"]
