"""Layer x head heatmaps of many statistics in one figure (``figures/<finding>/heads.png``).

Each statistic is a panel of n_layers rows (layer 0 at the top) by n_heads
columns (head 0 at the left), every layer shown (rows of a deep model
:data:`LABEL_SPACING` tall, the heatmap at most :data:`MOST_HEIGHT`; every layer labelled up to 24 layers), with its layers and heads labelled along its
edges (0-indexed, as in metric keys) and a colour bar of its own values beside
it: statistics differ in units and range, so each panel has its own scale, and
the colour bar says which value a colour is. Undefined (NaN) cells are white.
Every text is at least :data:`MIN_FONT` points. The values themselves are in
the run's per-head tables (``tables/<finding>_heads.csv``).

Drawing cost: the figure is one axes whose data coordinates are inches from the
top left corner, holding an image per panel and per colour bar and plain texts
(an axes with matplotlib ticks and a colorbar per panel draws about three times
slower, and a ``paper`` run draws eight of these figures). Each text carries a
``gid`` naming its role, ``<statistic>:head``, ``<statistic>:layer``,
``<statistic>:bar`` or ``<statistic>:title``, so that tests and readers of the
figure object can find them.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.ticker import MaxNLocator

from attnsim.plots.common import INDEX_NOTE, draw_segments, fixed_layout, wrap_title

MIN_FONT = 9  # points: the smallest text of the figure
CELL = (0.3, 0.26)  # inches per head (x) and per layer (y)
LABEL_SPACING = 0.2  # inches between two index labels of MIN_FONT points
# inches: heatmaps up to 3.2 inches tall have rows of CELL[1]; a deeper model's rows are LABEL_SPACING tall, the least
# that keeps every layer labelled, up to 24 layers; deeper still, the heatmap stays MOST_HEIGHT tall and every k-th
# layer is labelled (30 layers: 4.8 inches, not 7.8), so that the figure's pixels and texts grow little with depth
ROWS_HEIGHT = 3.2
MOST_HEIGHT = LABEL_SPACING * 24
FLAT = plt.matplotlib.colors.ListedColormap(["#e4e4e4"]).with_extremes(bad="white")  # a constant panel: one light grey


def index_ticks(count: int, inches: float) -> List[int]:
    """Positions 0..count-1 to label along an axis of ``inches``: every one when they fit
    :data:`LABEL_SPACING` apart, else every k-th (always starting at 0)."""
    step = max(1, math.ceil(count * LABEL_SPACING / max(inches, 1e-9)))
    return list(range(0, count, step))


def bar_ticks(low: float, high: float) -> List[float]:
    """Up to five round values between ``low`` and ``high`` (both included when nothing rounder is near)."""
    values = [float(v) for v in MaxNLocator(4).tick_values(low, high) if low - 1e-12 * abs(high - low) <= v <= high + 1e-12 * abs(high - low)]
    return values if len(values) >= 2 else [low, high]


def _panel_title(name: str, scalars: Dict[str, torch.Tensor]) -> str:
    chance = scalars.get(f"{name}_chance")
    if chance is not None and torch.isfinite(chance).any():
        return f"{name} (chance {float(chance.double().nanmean()):.3g})"
    return name


def _frame(x: float, y: float, width: float, height: float) -> list:
    """The four sides of the box with top left corner (x, y), as segments ((x0, y0), (x1, y1)) in inches."""
    return [((x, y), (x + width, y)), ((x, y + height), (x + width, y + height)), ((x, y), (x, y + height)), ((x + width, y), (x + width, y + height))]


def _index_labels(ax, name: str, box: tuple, xticks, yticks, cell: tuple) -> list:
    """Head numbers below and layer numbers left of the heatmap ``box`` (x0, y0, width, height; inches) of ``name``;
    ``cell``: (dx, dy), one head's width and one layer's height. Returns the tick marks, drawn by the caller."""
    x0, y0, width, height = box
    dx, dy = cell
    marks = []
    for head in xticks:
        x = x0 + (head + 0.5) * dx
        marks.append(((x, y0 + height), (x, y0 + height + 0.03)))
        ax.text(x, y0 + height + 0.05, str(head), fontsize=MIN_FONT, ha="center", va="top", gid=f"{name}:head")
    for layer in yticks:
        y = y0 + (layer + 0.5) * dy
        marks.append(((x0 - 0.03, y), (x0, y)))
        ax.text(x0 - 0.05, y, str(layer), fontsize=MIN_FONT, ha="right", va="center", gid=f"{name}:layer")
    return marks


def scalar_mosaic(scalars: Dict[str, torch.Tensor], title: str, names: Optional[Sequence[str]] = None, cols: int = 3):
    """One figure with a layer x head heatmap and a value colour bar per statistic.

    Args:
        scalars: statistic -> (layer, head) tensor.
        title: figure title (e.g. the finding's name).
        names: statistics to draw, in order (default: every one not ending in ``_chance``,
            whose mean appears in the title of the statistic it belongs to).
        cols: panels per row.

    Returns:
        A matplotlib figure (fixed layout, one axes): per statistic a heatmap image whose colour
        limits are the statistic's own minimum and maximum, head labels below it, layer labels left
        of it, and a colour bar image with value labels right of it; every text at least
        :data:`MIN_FONT` points, each with a ``gid`` naming its role (module docstring).
    """
    names = [n for n in (names or scalars) if n in scalars and (names is not None or not n.endswith("_chance"))]
    n_layers, n_heads = next(iter(scalars.values())).shape
    cols = max(1, min(cols, len(names)))
    rows = math.ceil(len(names) / cols)
    width, height = max(2.2, CELL[0] * n_heads), max(1.2, CELL[1] * n_layers)
    if height > ROWS_HEIGHT:
        height = min(MOST_HEIGHT, max(ROWS_HEIGHT, LABEL_SPACING * n_layers))
    # inches around each heatmap: layer labels and "layer" left; colour bar and its values right;
    # the panel title above; head labels and "head" below
    left, bar_gap, bar, bar_labels = 0.62, 0.08, 0.12, 0.62
    above, below = 0.32, 0.5
    panel_w, panel_h = left + width + bar_gap + bar + bar_labels, above + height + below
    heading = wrap_title(
        f"{title}: one panel per statistic; rows: layers, columns: heads ({INDEX_NOTE}); each colour bar gives its panel's values", cols * panel_w, MIN_FONT + 1
    )
    top = 0.12 + 0.2 * len(heading)
    fig_w, fig_h = 0.1 + cols * panel_w, top + rows * panel_h
    fig = plt.figure(figsize=(fig_w, fig_h))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, fig_w)
    ax.set_ylim(fig_h, 0)  # data coordinates: inches from the top left corner
    ax.set_axis_off()
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    xticks, yticks = index_ticks(n_heads, width), index_ticks(n_layers, height)
    ramp = np.linspace(1.0, 0.0, 256)[:, None]  # colour bar: top = the panel's maximum
    marks = []  # tick marks of every panel and bar, drawn as one path
    for index, name in enumerate(names):
        r, c = divmod(index, cols)
        x0, y0 = 0.1 + c * panel_w + left, top + r * panel_h + above  # the heatmap's top left corner
        dx, dy = width / n_heads, height / n_layers
        data = scalars[name].detach().double().cpu().numpy()
        finite = data[np.isfinite(data)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        constant = finite.size > 0 and high <= low  # one value everywhere: said in words, not a colour on a made-up scale
        bx = x0 + width + bar_gap
        if constant:
            ax.imshow(
                np.ma.masked_invalid(data), cmap=FLAT, vmin=0, vmax=1, extent=(x0, x0 + width, y0 + height, y0), aspect="auto", interpolation="nearest"
            ).set_gid(f"{name}:panel")
            ax.text(x0 + width / 2, y0 + height / 2, f"constant\n{low:.3g}", fontsize=MIN_FONT + 1, ha="center", va="center", gid=f"{name}:constant")
        else:
            ax.imshow(
                np.ma.masked_invalid(data), cmap=cmap, vmin=low, vmax=high, extent=(x0, x0 + width, y0 + height, y0), aspect="auto", interpolation="nearest"
            ).set_gid(f"{name}:panel")
            ax.imshow(ramp, cmap=cmap, vmin=0, vmax=1, extent=(bx, bx + bar, y0 + height, y0), aspect="auto", interpolation="nearest").set_gid(f"{name}:bar")
            marks += _frame(bx, y0, bar, height)
        marks += _frame(x0, y0, width, height)
        marks += _index_labels(ax, name, (x0, y0, width, height), xticks, yticks, (dx, dy))
        for value in [] if constant else bar_ticks(low, high):
            y = y0 + height * (high - value) / (high - low)
            marks.append(((bx + bar, y), (bx + bar + 0.03, y)))
            ax.text(bx + bar + 0.05, y, f"{value:.3g}", fontsize=MIN_FONT, ha="left", va="center", gid=f"{name}:bar")
        ax.text(x0 + width / 2, y0 + height + 0.22, "head", fontsize=MIN_FONT, ha="center", va="top", gid=f"{name}:axis")
        ax.text(x0 - 0.38, y0 + height / 2, "layer", fontsize=MIN_FONT, ha="center", va="center", rotation=90, gid=f"{name}:axis")
        ax.text(x0, y0 - 0.06, _panel_title(name, scalars), fontsize=MIN_FONT + 1, ha="left", va="bottom", gid=f"{name}:title")
    draw_segments(ax, marks, color="black", linewidth=0.6)
    ax.text(fig_w / 2, 0.06, "\n".join(heading), fontsize=MIN_FONT + 1, ha="center", va="top", gid="title")
    return fixed_layout(fig)
