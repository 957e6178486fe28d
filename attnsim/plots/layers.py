"""Statistics by layer beside their chance values (one axes per figure)."""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np
import torch

from attnsim.plots.common import INDEX_NOTE, inch_axes, wrap_title


def layer_means(values: torch.Tensor) -> np.ndarray:
    """(layer,) mean over heads of a (layer, head) statistic, undefined heads left out."""
    return values.detach().double().cpu().nanmean(-1).numpy()


def by_layer(
    series: Dict[str, torch.Tensor], title: str, ylabel: str, chance: Optional[Dict[str, torch.Tensor]] = None, heads: bool = True, log_y: bool = False
):
    """Layer means of (layer, head) statistics, each beside its chance value.

    Args:
        series: label -> (layer, head) statistic; drawn as a solid line of layer means,
            with every head as a faint dot when ``heads``.
        title, ylabel: text of the figure.
        chance: label -> (layer, head) chance value, drawn dashed in the colour of the
            statistic with the same label.
        log_y: logarithmic y axis (e.g. for ratios to chance).

    Returns:
        A matplotlib figure.
    """
    # a 4.5 x 2.45 inch plot with fixed margins for the labels and the two-line title
    fig, ax = inch_axes(4.5, 2.45, left=0.75, right=0.25, bottom=0.45, top=0.45)
    for index, (label, values) in enumerate(series.items()):
        colour = f"C{index}"
        means = layer_means(values)
        layers = np.arange(len(means))
        ax.plot(layers, means, "o-", color=colour, label=label, linewidth=1.4, markersize=4)
        if heads:
            data = values.detach().double().cpu().numpy()
            ax.scatter(np.repeat(layers, data.shape[1]), data.reshape(-1), s=5, color=colour, alpha=0.25, linewidths=0)
        if chance is not None and label in chance:
            ax.plot(layers, layer_means(chance[label]), "--", color=colour, linewidth=1.0, label=f"{label} (chance)")
    ax.set_xlabel("layer")
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log")
    n_layers = len(next(iter(series.values())))
    ax.set_xticks(range(0, n_layers, max(1, -(-n_layers // 16))))  # every layer up to 16, else every k-th
    ax.legend(fontsize=6, frameon=False)
    ax.set_title(f"{title}\n(lines: mean over heads; dots: heads; {INDEX_NOTE})", fontsize=8)
    ax.tick_params(labelsize=7)
    return fig


def position_profile(mass: torch.Tensor, chance: torch.Tensor, positions: torch.Tensor, layers: Optional[Sequence[int]] = None, note: str = ""):
    """Attention by absolute position: the mass each position bin receives per query, one line per layer
    (mean over heads), over the same under uniform attention (dashed at 1); positions on a log axis.

    Args:
        mass, chance: (layer, head, K) mass per query received by the key positions of each bin.
        positions: (K,) the first position of each bin (one bin per position up to 512, logarithmic beyond).
        layers: the layers drawn (:func:`~attnsim.plots.common.shown_layers`); None: every layer.
        note: what the title says of the layers drawn (:func:`~attnsim.plots.common.layer_note`).
    """
    import matplotlib.pyplot as plt

    layers = list(range(mass.shape[0])) if layers is None else list(layers)
    ratio = (mass[layers] / chance[layers]).detach().double().cpu().nanmean(1).numpy()  # (shown layers, K)
    x = positions.detach().cpu().double().numpy() + 1  # 1-based on the log axis: position 0 at 1
    title = wrap_title(f"Attention by absolute position, mean over heads ({INDEX_NOTE})" + (f"\n{note}" if note else ""), 6.4, 9)
    fig, ax = inch_axes(5.5, 2.7, left=0.75, right=0.15, bottom=0.5, top=max(0.35, 0.1 + 0.16 * len(title)))  # laid out by hand: drawn once
    colours = plt.get_cmap("viridis")(np.linspace(0, 1, max(2, mass.shape[0])))  # colour = depth, as with every layer
    for row, layer in enumerate(layers):
        ax.plot(x, ratio[row], color=colours[layer], linewidth=1.0, label=f"layer {layer}")
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("key position + 1 (tokens; bins logarithmic beyond 512)", fontsize=8)
    ax.set_ylabel("mass received / uniform attention", fontsize=8)
    ax.set_title("\n".join(title), fontsize=9)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, ncol=2)
    return fig
