"""Figures of the ``csm`` finding."""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.collections import LineCollection

from attnsim.plots.common import INDEX_NOTE, fixed_layout, layer_head_heatmap, layer_note, matrix_grid, sentence_starts

RULE_STATISTIC = "mean CSM"  # the statistic whose extreme layers the csm figures show (plots.common.shown_layers)


def _shown(note: str) -> str:
    return f"; {note}" if note else ""


def mean_matrices(matrix: torch.Tensor, max_tokens: int, layers: Optional[Sequence[int]] = None) -> Iterator[Tuple[str, Any]]:
    """One figure of the corpus-mean CSM of every head of the shown layers (rows: layers, columns: heads).

    Args:
        matrix: (layer, head, T, T) corpus-mean CSM (units of z²); each panel is scaled to its own range.
        layers: the layers drawn (:func:`~attnsim.plots.common.shown_layers`, named in the title when
            not every layer); None: every layer.
    """
    n_layers, n_heads = matrix.shape[:2]
    layers = list(range(n_layers)) if layers is None else list(layers)
    data = matrix[layers].detach().cpu().double().numpy()
    note = layer_note(layers, n_layers, RULE_STATISTIC, "every head's statistics in tables/csm_heads.csv")
    yield (
        "figures/csm/mean_csm.png",
        matrix_grid(
            data.reshape(len(layers) * n_heads, *data.shape[2:]),
            None,
            f"Corpus-mean CSM, every head of {'every layer' if not note else 'the shown layers'}{_shown(note)}",
            max_tokens,
            cols=n_heads,
            row_names=[f"L{layer}" for layer in layers],
            col_names=[f"H{head}" for head in range(n_heads)],
            panel_inches=1.3,  # about 2 pixels per pooled cell at 100 dpi
        ),
    )


def distance_profiles(
    distance_mean: torch.Tensor, high_ratio: torch.Tensor, distances: Optional[torch.Tensor] = None, layers: Optional[Sequence[int]] = None, note: str = ""
):
    """Mean CSM by distance (top) and high-pair count over chance by distance (bottom), a line per head.

    The layers sit side by side along each axes' x axis (one segment of distances 1..T-1 per
    layer), so that the figure has two axes and two line collections whatever the model size.

    Args:
        distance_mean, high_ratio: (layer, head, K) indexed by distance bin (bin 0, distance 0, unused).
        distances: (K,) lower edge of each bin (one bin per distance up to 512 tokens, logarithmic
            beyond); None: bin k is distance k. Tick labels name the distances.
        layers: the layers drawn (:func:`~attnsim.plots.common.shown_layers`); None: every layer.
        note: what the title says of the layers drawn (:func:`~attnsim.plots.common.layer_note`).
    """
    all_layers, n_heads, size = distance_mean.shape
    layers = list(range(all_layers)) if layers is None else list(layers)
    n_layers = len(layers)
    d = np.arange(1, size, dtype=float)
    span = size - 1 + max(2, size // 8)  # x extent of one layer's segment, gap included
    means = distance_mean[layers][..., 1:].detach().cpu().double().numpy()
    ratios = high_ratio[layers][..., 1:].detach().cpu().double().numpy()
    finite = ratios[np.isfinite(ratios)]
    top = max(float(np.percentile(finite, 99)) * 1.05 if finite.size else 1.0, 1.1)
    fig, axes = plt.subplots(2, 1, figsize=(max(8.0, 1.9 * n_layers), 5.2), sharex=True)
    fig.subplots_adjust(left=0.07, right=0.99, top=0.82 if note else 0.86, bottom=0.1, hspace=0.12)
    colours = plt.get_cmap("tab20")(np.arange(n_heads) % 20)
    for ax, data in zip(axes, (means, ratios)):
        lines = [np.column_stack([layer * span + d, data[layer, head]]) for layer in range(n_layers) for head in range(n_heads)]
        ax.add_collection(LineCollection(lines, colors=np.tile(colours, (n_layers, 1)), linewidths=0.6))
        finite_data = data[np.isfinite(data)]
        low, high = (float(finite_data.min()), float(finite_data.max())) if finite_data.size else (0.0, 1.0)
        ax.set_ylim(*((0.0, top) if data is ratios else (low - 0.05 * (high - low + 1e-12), high + 0.05 * (high - low + 1e-12))))
        ax.vlines(
            [layer * span - (span - size + 1) / 2 for layer in range(1, n_layers)], 0, 1, transform=ax.get_xaxis_transform(), colors="grey", linewidths=0.5
        )
        ax.tick_params(labelsize=7)
    axes[1].axhline(1.0, color="black", linewidth=0.6, linestyle="--")
    for position, layer in enumerate(layers):
        axes[0].text(position * span + size / 2, 1.02, f"layer {layer}", transform=axes[0].get_xaxis_transform(), ha="center", va="bottom", fontsize=8)
    ticks = [t for t in (1, size // 2) if 1 <= t < size]  # two labelled distances per layer keep the axis readable
    names = [str(int(distances[t])) if distances is not None else str(t) for t in ticks]
    axes[1].set_xticks([layer * span + t for layer in range(n_layers) for t in ticks], [n for _ in range(n_layers) for n in names])
    axes[1].set_xlim(0, n_layers * span)
    binned = distances is not None and size > 1 and int(distances[-1]) != size - 1
    axes[1].set_xlabel("distance j - i (tokens; logarithmic bins beyond 512), per layer" if binned else "distance j - i (tokens), per layer", fontsize=8)
    axes[0].set_ylabel("mean CSM", fontsize=8)
    axes[1].set_ylabel("high pairs / chance", fontsize=8)
    fig.suptitle(f"Distance profiles, one line per head (colour = head; {INDEX_NOTE}); dashed: chance" + (f"\n{note}" if note else ""), fontsize=10)
    return fixed_layout(fig)


def scalar_heatmaps(scalars: Dict[str, torch.Tensor], finding: str) -> Iterator[Tuple[str, Any]]:
    """A layer x head heatmap of each scalar; ``*_chance`` scalars are shown in their statistic's title."""
    for name, values in scalars.items():
        if name.endswith("_chance"):
            continue
        chance = scalars.get(f"{name}_chance")
        yield f"figures/{finding}/heads_{name}.png", layer_head_heatmap(values, f"{finding}/{name}", chance)


def example_csms(examples, max_tokens: int, layers: Optional[Sequence[int]] = None) -> Iterator[Tuple[str, Any]]:
    """For each example window, the CSM of every head of the shown layers (rows: layers, columns: heads)
    in one figure, with token labels and sentence boundaries.

    Args:
        layers: the layers drawn (:func:`~attnsim.plots.common.shown_layers`, named in the title when
            not every layer; every layer is in the run's ``explorer.html``); None: every layer.
    """
    if examples is None or examples.csm is None:
        return
    n_layers, _, n_heads = examples.csm.shape[:3]
    layers = list(range(n_layers)) if layers is None else list(layers)
    note = layer_note(layers, n_layers, RULE_STATISTIC, "every layer in the run's explorer.html")
    for e in range(len(examples)):
        pooled, block, length = examples.maps("csm", e, max_tokens)  # pooled by the figures' rule (recorded pooled at length)
        if length < 2:
            continue
        labels = examples.tokens[e][:length]
        starts = sentence_starts(examples.sentence_ids[e, :length].tolist())
        data = pooled[layers].reshape(len(layers) * n_heads, *pooled.shape[-2:])
        yield (
            f"figures/examples/window{e}_csm.png",
            matrix_grid(
                data,
                None,
                f"CSM of window {e} ({examples.label(e)}), every head of {'every layer' if not note else 'the shown layers'}; lines: sentence boundaries{_shown(note)}",
                max_tokens,
                labels,
                starts,
                cols=n_heads,
                row_names=[f"L{layer}" for layer in layers],
                col_names=[f"H{head}" for head in range(n_heads)],
                panel_inches=1.3,  # about 2 pixels per pooled cell at 100 dpi
                block=block,
                max_labels=16,
            ),
        )
