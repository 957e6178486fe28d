"""Per-layer comparison figures: one statistic, one line per run, layers on the x axis (0-indexed)."""

from __future__ import annotations

from typing import Optional

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd


def _colours(n: int) -> list:
    """Distinct colours for up to 10 lines; a sequential map beyond (e.g. many checkpoints, in order)."""
    if n <= 10:
        return [plt.get_cmap("tab10")(i) for i in range(n)]
    return [plt.get_cmap("viridis")(x) for x in np.linspace(0.0, 0.95, n)]


def layer_comparison(values: pd.DataFrame, statistic: str, chance: Optional[pd.DataFrame] = None, means: Optional[pd.Series] = None):
    """A figure of ``statistic`` by layer, one line per run.

    Args:
        values: index = layer labels ``L00``, ``L01``, ... (0-indexed), one column per run; NaN where a run
            has no such layer (models of different depth) or no value.
        statistic: ``finding/statistic``, used in the title.
        chance: same shape as ``values``: the statistic's chance value, drawn dotted in each run's colour.
        means: model mean per run (the ``finding/statistic`` metric), shown in the legend.

    Returns:
        A matplotlib figure (the caller saves and closes it).
    """
    layers = [int(str(label).lstrip("L")) for label in values.index]
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    for colour, run in zip(_colours(values.shape[1]), values.columns):
        label = str(run)
        if means is not None and run in means and np.isfinite(means[run]):
            label += f"  (mean {means[run]:.4g})"
        ax.plot(layers, values[run].to_numpy(dtype=float), marker="o", color=colour, label=label)
        if chance is not None and run in chance:
            ax.plot(layers, chance[run].to_numpy(dtype=float), linestyle=":", color=colour)
    ax.set_xticks(layers)
    ax.set_xlabel("layer (0-indexed, as in metric keys)")
    ax.set_ylabel(statistic.split("/", 1)[-1])
    title = f"{statistic} by layer (mean over heads)"
    if chance is not None:
        title += "\ndotted: the same under a uniform choice of pairs (chance)"
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig
