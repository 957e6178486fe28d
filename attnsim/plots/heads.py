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

from attnsim.plots.common import INDEX_NOTE


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
    fig, ax = plt.subplots(figsize=(0.22 * width + 1.5, 0.3 * height + 1.0))
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
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    image = ax.imshow(np.ma.masked_invalid(mosaic), cmap=cmap, vmin=0, vmax=1, interpolation="nearest", aspect="equal")
    fig.colorbar(image, ax=ax, fraction=0.025, pad=0.01, label="scaled within each panel (0 = min, 1 = max)")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"{title}: one panel per statistic, rows = layers (0 at top), columns = heads (0 at left); {INDEX_NOTE}", fontsize=8)
    return fig
