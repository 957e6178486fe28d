"""Layer x head heatmaps of many statistics in one figure (one image, one axes: cheap to draw).

Each statistic is a panel of n_layers rows (layer 0 at the top) by n_heads
columns (head 0 at the left), coloured on its own range (its minimum and
maximum are written in the panel's title, since statistics differ in units);
undefined (NaN) cells are white. The values themselves are in the run's
per-head tables.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from attnsim.plots.common import INDEX_NOTE, inch_axes, scale_strip, wrap_title


def _scaled(panel: np.ndarray) -> np.ndarray:
    finite = panel[np.isfinite(panel)]
    if not finite.size:
        return np.full_like(panel, np.nan)
    low, high = finite.min(), finite.max()
    return (panel - low) / (high - low) if high > low else np.where(np.isfinite(panel), 0.5, np.nan)


def scalar_mosaic(scalars: Dict[str, torch.Tensor], title: str, names: Optional[Sequence[str]] = None, cols: int = 3):
    """One figure with a layer x head heatmap per statistic.

    Args:
        scalars: statistic -> (layer, head) tensor.
        title: figure title (e.g. the finding's name).
        names: statistics to draw, in order (default: every one not ending in ``_chance``,
            whose values appear in the title of the statistic they belong to).
        cols: panels per row.

    Returns:
        A matplotlib figure.
    """
    names = [n for n in (names or scalars) if n in scalars and (names is not None or not n.endswith("_chance"))]
    n_layers, n_heads = next(iter(scalars.values())).shape
    cols = max(1, min(cols, len(names)))
    rows = math.ceil(len(names) / cols)
    gap_x, gap_y = 1, 3  # empty cells between panels; the vertical gap holds the panel titles
    width, height = cols * (n_heads + gap_x) - gap_x, rows * (n_layers + gap_y)
    mosaic = np.full((height, width), np.nan)
    # cells of 0.22 x 0.3 inch as before, placed by hand (no second drawing pass to measure the figure)
    strip = (1, 1)  # gap and width (cells) of the colour scale beside the panels (see scale_strip)
    fig, ax = inch_axes(0.22 * (width + sum(strip)), 0.3 * height, left=0.1, right=0.35, bottom=0.1, top=0.35)
    for index, name in enumerate(names):
        r, c = divmod(index, cols)
        top, left = r * (n_layers + gap_y) + gap_y, c * (n_heads + gap_x)
        data = scalars[name].detach().double().cpu().numpy()
        mosaic[top : top + n_layers, left : left + n_heads] = _scaled(data)
        finite = data[np.isfinite(data)]
        span = f"[{finite.min():.3g}, {finite.max():.3g}]" if finite.size else "[undefined]"
        chance = scalars.get(f"{name}_chance")
        extra = f", chance {float(chance.double().nanmean()):.3g}" if chance is not None and torch.isfinite(chance).any() else ""
        ax.text(left, top - 0.7, f"{name} {span}{extra}", fontsize=6, va="bottom", ha="left")
    mosaic = np.concatenate([mosaic, np.full((height, sum(strip)), np.nan)], 1)  # room for the colour scale
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    ax.imshow(np.ma.masked_invalid(mosaic), cmap=cmap, vmin=0, vmax=1, interpolation="nearest", aspect="auto")
    scale_strip(ax, width + strip[0] - 0.5, width + sum(strip) - 0.5, height, cmap)
    ax.set_xlim(-0.5, mosaic.shape[1] - 0.5)
    ax.set_ylim(height - 0.5, -0.5)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    heading = wrap_title(f"{title}: one panel per statistic, rows = layers (0 at top), columns = heads (0 at left); {INDEX_NOTE}", 0.22 * mosaic.shape[1] + 0.45, 8)
    fig.text(0.5, 1 - 0.05 / fig.get_size_inches()[1], "\n".join(heading), fontsize=8, ha="center", va="top")
    return fig
