"""The sweep figure: each statistic of a finding over fine-tuning steps, its chance level on the same axes."""

from __future__ import annotations

import math
import re
from typing import Dict, List, Optional

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

CHANCE_SUFFIX = "_chance"


def statistics_with_chance(columns, finding: str) -> Dict[str, Optional[str]]:
    """Model-mean statistics of ``finding`` among ``columns`` (``finding/stat``), each mapped to its chance column or None.

    ``finding/S_chance`` is the chance of ``finding/S`` when both are present; it is then not a
    statistic of its own. A ``_chance`` column without its statistic is kept as a statistic.
    """
    names = [c for c in columns if re.fullmatch(rf"{re.escape(finding)}/[^/]+", str(c))]
    out: Dict[str, Optional[str]] = {}
    for name in names:
        if name.endswith(CHANCE_SUFFIX) and name[: -len(CHANCE_SUFFIX)] in names:
            continue
        chance = name + CHANCE_SUFFIX
        out[name] = chance if chance in names else None
    return out


def sweep_curves(curves: pd.DataFrame, finding: str, title: str, columns: int = 3):
    """One panel per statistic of ``finding``, each over the global step, with its chance level on the same axes.

    In each panel: the model mean (``finding/stat``, black, markers), the chance level
    (``finding/stat_chance``, black dashed) when the statistic has one, and each layer mean
    (``finding/stat/L03``, thin lines coloured by depth; layers 0-indexed, as in metric keys).

    Args:
        curves: index = global step (int), columns = the sweep parent's metric keys: model means
            ``finding/stat``, layer means ``finding/stat/LNN`` (optional), chance ``finding/stat_chance``.
            NaN where a step has no value.
        finding: the finding whose statistics are drawn (metric-key prefix, e.g. ``csm``).
        title: figure title.
        columns: panels per row.

    Returns:
        A matplotlib figure (the caller saves and closes it), or None when ``curves`` has no
        statistic of ``finding``.
    """
    stats = statistics_with_chance(curves.columns, finding)
    if not stats:
        return None
    curves = curves.sort_index()
    steps = curves.index.to_numpy(dtype=float)
    n = len(stats)
    ncols = min(columns, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.0 * ncols, 2.9 * nrows + 0.6), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, (name, chance) in zip(axes.flat, stats.items()):
        layer_columns: List[str] = sorted(c for c in curves.columns if re.fullmatch(rf"{re.escape(name)}/L\d+", str(c)))
        colours = plt.get_cmap("viridis")(np.linspace(0.0, 0.9, max(len(layer_columns), 1)))
        for colour, column in zip(colours, layer_columns):
            ax.plot(steps, curves[column].to_numpy(dtype=float), color=colour, linewidth=0.9, alpha=0.8, label=column.rsplit("/", 1)[1])
        ax.plot(steps, curves[name].to_numpy(dtype=float), color="black", linewidth=2.0, marker="o", markersize=3.5, label="model mean")
        if chance is not None:
            ax.plot(steps, curves[chance].to_numpy(dtype=float), color="black", linestyle="--", linewidth=1.2, label="chance (model mean)")
        ax.set_title(name.split("/", 1)[1], fontsize=9)
        ax.set_xlabel("global step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    legend: Dict[str, object] = {}
    for ax in axes.flat[:n]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    labels = sorted(legend, key=lambda label: (not label.startswith("L"), label))
    handles = [legend[label] for label in labels]
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize=7, frameon=False)
    fig.suptitle(f"{title}\nmodel mean (black), chance (dashed), layer means (0-indexed, as in metric keys) over fine-tuning", fontsize=9)
    fig.tight_layout(rect=(0, 0.6 / (2.9 * nrows + 0.6) + 0.02, 1, 1))
    return fig
