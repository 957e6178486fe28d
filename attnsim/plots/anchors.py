"""Anchor-token table per head: each head's most frequent anchor token on a layer x head grid."""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from attnsim.plots.common import INDEX_NOTE, colorbar_beside, inch_axes, layer_note, shown_layers, wrap_title


def anchor_table(tokens: Sequence[Sequence[str]], consistency: torch.Tensor, max_chars: int = 8):
    """A layer x head grid naming each head's top anchor token, coloured by its consistency, for the
    layers :func:`~attnsim.plots.common.shown_layers` picks by mean consistency (every layer of models up
    to six layers deep; every head's anchor is in ``tables/anchors_top.csv``).

    Args:
        tokens: n_layers lists of n_heads token strings (the head's most frequent anchor).
        consistency: (layer, head) share of windows whose anchor is that token (0..1).
        max_chars: longer token strings are cut (with "…").

    Returns:
        A matplotlib figure (one axes).
    """
    all_layers = consistency.shape[0]
    layers = shown_layers(all_layers, consistency)
    note = layer_note(layers, all_layers, "mean consistency", "every head in tables/anchors_top.csv")
    data = consistency[layers].detach().double().cpu().numpy()
    n_layers, n_heads = data.shape
    title = wrap_title(f"Most frequent anchor token of each head (colour: consistency; {INDEX_NOTE})" + (f"\n{note}" if note else ""), 0.72 * n_heads + 1.7, 9)
    fig, ax = inch_axes(0.72 * n_heads, 0.42 * n_layers, left=0.6, right=1.1, bottom=0.5, top=max(0.45, 0.15 + 0.15 * len(title)))
    cmap = plt.get_cmap("Blues").with_extremes(bad="white")
    image = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, vmin=0, vmax=1, aspect="auto")
    colorbar_beside(fig, ax, image, "anchor consistency (share of windows)")
    for (row, head), value in np.ndenumerate(data):
        text = str(tokens[layers[row]][head])
        text = text if len(text) <= max_chars else text[: max_chars - 1] + "…"
        ax.text(head, row, text, ha="center", va="center", fontsize=9, color="white" if np.isfinite(value) and value > 0.6 else "black")
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers), [str(layer) for layer in layers])
    ax.set_xlabel("head", fontsize=9)
    ax.set_ylabel("layer", fontsize=9)
    ax.tick_params(labelsize=9)
    ax.set_title("\n".join(title), fontsize=9)
    return fig
