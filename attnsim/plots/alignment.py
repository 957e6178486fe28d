"""Figures of encoder–decoder cross-attention: target rows × source columns, per layer and head plus the layer mean.

One figure is a grid: a row of panels per decoder layer, a column per head and a last column with
the layer mean (mean over heads). Every panel shares one colour scale from 0 to the figure's largest
value (probabilities are comparable across heads). Token axes longer than ``max_tokens`` are
average-pooled (:func:`attnsim.plots.maps.pool_tokens`); labels are drawn along the first column
(target tokens) and the last row (source tokens). Layers and heads are 0-indexed, as in metric keys.
The band of the alignment statistic can be outlined on each panel.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np

from attnsim.plots.common import INDEX_NOTE, TOKEN_FONT, TOKEN_SPACING, labels_fitting, short_label
from attnsim.plots.maps import pool_tokens


def _pool2(values: np.ndarray, max_tokens: int) -> tuple:
    """Pool the last two axes (rows, columns) of ``values`` separately to at most ``max_tokens`` cells."""
    cols, col_block = pool_tokens(values, max_tokens)
    rows, row_block = pool_tokens(np.swapaxes(cols, -1, -2), max_tokens)
    return np.swapaxes(rows, -1, -2), row_block, col_block


def cross_attention_grid(
    maps: np.ndarray,
    title: str,
    row_labels: Optional[Sequence[str]] = None,
    col_labels: Optional[Sequence[str]] = None,
    max_tokens: int = 64,
    row_axis: str = "target token",
    col_axis: str = "source token",
    band: Optional[np.ndarray] = None,
):
    """Cross-attention maps per layer and head, with the layer mean in the last column.

    Args:
        maps: (layer, head, rows, columns): target rows × source columns (probabilities or corpus means).
        title: the figure's title.
        row_labels, col_labels: token labels of the rows and columns (None: no labels, e.g. relative bins).
        max_tokens: most cells per axis (longer axes are pooled).
        row_axis, col_axis: axis names.
        band: (rows, columns) bool, the alignment band, outlined on each panel (None: none).

    Returns:
        The matplotlib figure.
    """
    data = np.asarray(maps, dtype=float)
    n_layers, n_heads = data.shape[:2]
    full = np.concatenate([data, np.nanmean(data, axis=1, keepdims=True)], axis=1)  # (L, H+1, R, C)
    pooled, row_block, col_block = _pool2(full, max_tokens)
    finite = pooled[np.isfinite(pooled)]
    high = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    rows, cols = pooled.shape[-2:]
    # a panel's longer side grows with its tokens (labels need TOKEN_SPACING each), within 1.7..4 inches
    side = min(4.0, max(1.7, TOKEN_SPACING * max(rows, cols) if (row_labels is not None or col_labels is not None) else 1.7))
    width = side * max(cols / max(rows, cols), 0.35)
    height = side * max(rows / max(rows, cols), 0.35)
    fig, axes = plt.subplots(n_layers, n_heads + 1, figsize=((n_heads + 1) * width + 1.8, n_layers * height + 1.6), squeeze=False)
    image = None
    for layer in range(n_layers):
        for head in range(n_heads + 1):
            ax = axes[layer, head]
            image = ax.imshow(pooled[layer, head], cmap="viridis", vmin=0.0, vmax=high, aspect="auto", interpolation="nearest")
            if band is not None and row_block == col_block == 1:
                ax.contour(band.astype(float), levels=[0.5], colors="white", linewidths=0.5)
            ax.set_title(f"L{layer} {'mean' if head == n_heads else f'H{head}'}", fontsize=8, pad=2)
            ax.set_xticks([])
            ax.set_yticks([])
            if head == 0 and row_labels is not None:
                ticks = list(range(0, rows, math.ceil(rows / labels_fitting(height, 48))))
                ax.set_yticks(ticks, [short_label(row_labels[t * row_block]) for t in ticks], fontsize=TOKEN_FONT)
            if layer == n_layers - 1 and col_labels is not None:
                ticks = list(range(0, cols, math.ceil(cols / labels_fitting(width, 48))))
                ax.set_xticks(ticks, [short_label(col_labels[t * col_block]) for t in ticks], fontsize=TOKEN_FONT, rotation=90)
    for ax in axes[:, 0]:
        ax.set_ylabel(row_axis, fontsize=8)
    for ax in axes[-1, :]:
        ax.set_xlabel(col_axis, fontsize=8)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), fraction=0.02, pad=0.01, label="attention")
    pooled_note = f"; cells pooled over {max(row_block, col_block)} tokens" if max(row_block, col_block) > 1 else ""
    fig.suptitle(f"{title}\n(rows: {row_axis}s, columns: {col_axis}s; last column: mean over heads; {INDEX_NOTE}{pooled_note})", fontsize=9)
    return fig


__all__ = ["cross_attention_grid"]
