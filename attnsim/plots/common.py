"""Shared drawing helpers: pooling long axes, layer x head heatmaps, matrix grids.

Readability rule: a T x T matrix with T > ``max_tokens`` is average-pooled
(NaN-aware) over blocks of ``ceil(T / max_tokens)`` tokens before drawing; a
pooled cell is labelled with its first token. Tick labels are thinned so that
at most 32 are drawn per axis. Layers and heads are labelled 0-indexed, as in
metric keys, and every figure says so.
"""

from __future__ import annotations

import math
import warnings
from typing import List, Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

INDEX_NOTE = "layers and heads 0-indexed"


def pool_matrix(matrix: np.ndarray, max_tokens: int) -> tuple:
    """Average-pool the last two axes to at most ``max_tokens`` cells (NaN-aware).

    Returns:
        (pooled array, block size in tokens).
    """
    size = matrix.shape[-1]
    block = max(1, math.ceil(size / max_tokens))
    if block == 1:
        return matrix, 1
    cells = math.ceil(size / block)
    pad = cells * block - size
    padded = np.pad(matrix, [(0, 0)] * (matrix.ndim - 2) + [(0, pad), (0, pad)], constant_values=np.nan)
    shaped = padded.reshape(*matrix.shape[:-2], cells, block, cells, block)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN blocks stay NaN
        pooled = np.nanmean(shaped, axis=(-3, -1))
    return pooled, block


def thin_ticks(labels: Sequence[str], block: int, most: int = 32) -> tuple:
    """Positions and labels of at most ``most`` ticks for an axis of pooled cells."""
    cells = math.ceil(len(labels) / block)
    step = max(1, math.ceil(cells / most))
    positions = list(range(0, cells, step))
    return positions, [labels[p * block] for p in positions]


def layer_head_heatmap(values: torch.Tensor, title: str, chance: Optional[torch.Tensor] = None, cmap: str = "viridis"):
    """A (layer, head) heatmap with values written in cells; ``chance`` (scalar or (layer, head)) in the title."""
    data = values.detach().cpu().double().numpy()
    n_layers, n_heads = data.shape
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * n_heads, 1.0 + 0.45 * n_layers))
    image = ax.imshow(data, cmap=cmap, aspect="auto")
    fig.colorbar(image, ax=ax, fraction=0.04)
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    if n_heads * n_layers <= 200:
        finite = data[np.isfinite(data)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0
        for (layer, head), value in np.ndenumerate(data):
            ax.text(head, layer, f"{value:.2g}", ha="center", va="center", fontsize=6, color="white" if value < mid else "black")
    suffix = ""
    if chance is not None:
        c = chance.detach().double()
        suffix = f" (chance {float(c.nanmean()):.3g})"
    ax.set_title(f"{title}{suffix}\n{INDEX_NOTE}", fontsize=9)
    return fig


def _scale_panel(panel: np.ndarray) -> np.ndarray:
    finite = panel[np.isfinite(panel)]
    if not finite.size:
        return panel
    low, high = finite.min(), finite.max()
    return (panel - low) / (high - low) if high > low else panel * 0.0


def matrix_grid(matrices: np.ndarray, titles: List[str], suptitle: str, max_tokens: int, labels: Optional[Sequence[str]] = None, boundaries: Optional[Sequence[int]] = None, outlines: Optional[np.ndarray] = None, cmap: str = "magma", cols: int = 4):
    """A grid of square heatmaps (e.g. one per head), drawn as one mosaic image.

    Each panel is scaled to its own range (min -> 0, max -> 1), as heads differ
    in scale; the values themselves are in the run's tables. One image instead
    of one axes per panel keeps drawing fast.

    Args:
        matrices: (panels, T, T).
        titles: one title per panel, written in its corner.
        labels: T token labels, drawn (thinned) along the left column and bottom row.
        boundaries: token positions where a new sentence starts (white lines before them).
        outlines: (panels, T, T) bool regions to outline in cyan, optional.
    """
    panels = matrices.shape[0]
    cols = min(panels, cols)
    rows = math.ceil(panels / cols)
    pooled, block = pool_matrix(matrices, max_tokens)
    size = pooled.shape[-1]
    gap = max(1, size // 16)
    stride = size + gap
    mosaic = np.full((rows * stride - gap, cols * stride - gap), np.nan)
    outline_mosaic = np.zeros_like(mosaic) if outlines is not None else None
    pooled_outlines = pool_matrix(outlines.astype(float), max_tokens)[0] if outlines is not None else None
    for index in range(panels):
        r, c = divmod(index, cols)
        mosaic[r * stride : r * stride + size, c * stride : c * stride + size] = _scale_panel(pooled[index])
        if outline_mosaic is not None:
            outline_mosaic[r * stride : r * stride + size, c * stride : c * stride + size] = np.nan_to_num(pooled_outlines[index]) > 0
    fig, ax = plt.subplots(figsize=(2.4 * cols + 1.2, 2.4 * rows + 1.0))
    image = ax.imshow(mosaic, cmap=cmap, interpolation="nearest", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02, label="scaled within each panel (0 = min, 1 = max)")
    if outline_mosaic is not None and outline_mosaic.any():
        ax.contour(outline_mosaic, levels=[0.5], colors="cyan", linewidths=0.5)
    for index in range(panels):
        r, c = divmod(index, cols)
        ax.text(c * stride + 1, r * stride + 1, titles[index], color="white", fontsize=7, va="top", ha="left")
        for start in boundaries or ():
            edge = start / block - 0.5
            ax.plot([c * stride + edge] * 2, [r * stride - 0.5, r * stride + size - 0.5], color="white", linewidth=0.4, alpha=0.7)
            ax.plot([c * stride - 0.5, c * stride + size - 0.5], [r * stride + edge] * 2, color="white", linewidth=0.4, alpha=0.7)
    if labels is not None:
        positions, names = thin_ticks(labels, block)
        ax.set_yticks(positions, names, fontsize=5)
        ax.set_xticks(positions, names, fontsize=5, rotation=90)
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    note = f"; cells pooled over {block} tokens" if block > 1 else ""
    ax.set_title(f"{suptitle}\n({INDEX_NOTE}{note})", fontsize=9)
    return fig


def sentence_starts(sentence_ids: Sequence[int]) -> List[int]:
    """Positions where the sentence id changes to a new non-negative id."""
    starts, previous = [], None
    for position, sid in enumerate(sentence_ids):
        if sid >= 0 and previous is not None and sid != previous:
            starts.append(position)
        if sid >= 0:
            previous = sid
    return starts
