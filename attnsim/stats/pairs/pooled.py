"""Example windows' per-head maps already pooled for figures, computed block by block on the blockwise path.

Figures and the explorer draw an example window's CSM and attention over its real positions ``0..n-1`` (n:
the last token entering statistics, plus one) and average-pool both axes to at most ``max_tokens`` cells
(:func:`attnsim.plots.common.pool_matrix`: blocks of ``b = ceil(n / max_tokens)`` tokens, a cell being the
NaN-aware mean of its ``b`` x ``b`` entries, the last cell of an axis holding the remaining tokens). On the
blockwise path a long window's n x n map is never held: :func:`pooled_example_maps` walks the window's query
rows one block (``view.block_rows``) at a time, computes those rows' CSM (``Z[rows] Zᵀ``, zero diagonal as :func:`~attnsim.stats.pairs.geometry.context_similarity`) and recomputed
attention (``exp(S - logsumexp(S))``, as :func:`~attnsim.stats.pairs.scores.attention_rows`), sums them into
their pooled cells and divides by the number of finite entries at the end. The result equals pooling the
full maps (the same float32 entries summed in float64), so figures drawn from it are those of the dense path.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List

import torch

from attnsim.stats.pairs.geometry import similarity_rows
from attnsim.stats.pairs.scores import masked_scores


def real_lengths(tokens: torch.Tensor) -> List[int]:
    """Per window, the number of leading positions up to its last token entering statistics (0 when none).

    Args:
        tokens: (windows, T) bool, tokens entering statistics.
    """
    out = []
    for row in tokens.cpu():
        where = row.nonzero()
        out.append(int(where.max()) + 1 if len(where) else 0)
    return out


def pool_block(length: int, max_tokens: int) -> int:
    """Tokens per pooled cell along an axis of ``length`` tokens: ``ceil(length / max_tokens)`` (at least 1),
    the rule of :func:`attnsim.plots.common.pool_matrix`."""
    return max(1, math.ceil(length / max_tokens))


class _PooledSums:
    """NaN-aware sums and counts of (head, n, n) maps pooled over ``block`` x ``block`` cells, fed by row blocks."""

    def __init__(self, heads: int, length: int, block: int, device: torch.device):
        self.length, self.block = length, block
        self.cells = -(-length // block) if length else 0
        self.sums = torch.zeros(heads, self.cells, self.cells, dtype=torch.float64, device=device)
        self.counts = torch.zeros(heads, self.cells, self.cells, dtype=torch.float64, device=device)

    def add(self, rows: torch.Tensor, start: int) -> None:
        """Add rows ``start..start + r - 1`` of the map: (head, r, >= n) values (columns past n ignored)."""
        heads, r = rows.shape[:2]
        values = rows[..., : self.length].double()
        pad = self.cells * self.block - self.length
        values = torch.nn.functional.pad(values, (0, pad), value=float("nan")).reshape(heads, r, self.cells, self.block)
        finite = torch.isfinite(values)
        col_sums = torch.where(finite, values, torch.zeros_like(values)).sum(-1)  # (head, r, cells)
        col_counts = finite.sum(-1).double()
        group = torch.arange(start, start + r, device=values.device) // self.block  # pooled row of each row
        self.sums.index_add_(1, group, col_sums)
        self.counts.index_add_(1, group, col_counts)

    def mean(self) -> torch.Tensor:
        """(head, cells, cells) float64 means, NaN in cells without a finite entry."""
        return torch.where(self.counts > 0, self.sums / self.counts.clamp_min(1), torch.full_like(self.sums, float("nan")))


def pooled_example_maps(view: Any, stop: int, max_tokens: int) -> Dict[str, Any]:
    """The pooled CSM (and recomputed attention) of the first ``stop`` windows of a blockwise batch.

    No map larger than one block of rows, (head, ``view.block_rows``, T), is held.

    Args:
        view: a :class:`~attnsim.stats.pairs.blocks.BlockPairView` (its Z per layer, and queries and keys
            when attention was captured).
        stop: number of leading windows.
        max_tokens: most cells per axis (``plots.max_tokens``).

    Returns:
        ``csm``: (layer, stop, head, C, C) float64 with C = min(T, max_tokens), window e's pooled map in its
        leading ``ceil(n_e / block_e)`` cells and NaN beyond; ``attention``: the same for the attention
        (None without queries and keys); ``blocks``: per window, block_e (tokens per pooled cell, 1 when its
        n_e <= max_tokens, the map then unpooled); ``lengths``: per window, n_e.
    """
    L, H, T = view.n_layers, view.n_heads, view.seq_len
    lengths = real_lengths(view.tokens[:stop])
    blocks = [pool_block(n, max_tokens) for n in lengths]
    size = min(T, max_tokens)
    has_attention = view.query_keys is not None
    csm = torch.full((L, stop, H, size, size), float("nan"), dtype=torch.float64)
    attention = torch.full_like(csm, float("nan")) if has_attention else None
    step = max(1, int(view.block_rows))
    for b in range(stop):
        n, block = lengths[b], blocks[b]
        for layer in range(L):
            sums = _PooledSums(H, n, block, view.device)
            z = view._vector_layers[layer][b].float()  # (H, T, d)
            att = _PooledSums(H, n, block, view.device) if has_attention else None
            for start in range(0, n, step):
                end = min(start + step, n)
                rows = similarity_rows(z[:, start:end], z, view.normalise)  # (H, rows, T), as the dense view's
                rows[:, torch.arange(end - start, device=rows.device), torch.arange(start, end, device=rows.device)] = (
                    0.0  # the CSM's zero diagonal (context_similarity)
                )
                sums.add(rows, start)
                if att is not None:
                    scores = masked_scores(view.query_keys[layer], b, start, end)  # (H, rows, T)
                    att.add(torch.exp(scores - scores.logsumexp(-1, keepdim=True)), start)
            cells = sums.cells
            csm[layer, b, :, :cells, :cells] = sums.mean().cpu()
            if att is not None:
                attention[layer, b, :, :cells, :cells] = att.mean().cpu()
    return {"csm": csm, "attention": attention, "blocks": blocks, "lengths": lengths}


__all__ = ["pooled_example_maps", "pool_block", "real_lengths"]
