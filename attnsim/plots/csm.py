"""Figures of the ``csm`` finding."""

from __future__ import annotations

from typing import Any, Dict, Iterator, Tuple

import matplotlib.pyplot as plt
import numpy as np
import torch

from attnsim.plots.common import INDEX_NOTE, layer_head_heatmap, matrix_grid, sentence_starts


def mean_matrices(matrix: torch.Tensor, max_tokens: int) -> Iterator[Tuple[str, Any]]:
    """One figure per layer: a grid of the corpus-mean CSM of each head. ``matrix``: (layer, head, T, T)."""
    data = matrix.detach().cpu().double().numpy()
    for layer in range(data.shape[0]):
        titles = [f"L{layer} H{head}" for head in range(data.shape[1])]
        yield f"figures/csm/mean_csm_L{layer:02d}.png", matrix_grid(data[layer], titles, f"Corpus-mean CSM, layer {layer}", max_tokens)


def distance_profiles(distance_mean: torch.Tensor, high_ratio: torch.Tensor):
    """Per layer: mean CSM by distance and high-pair count over chance by distance, a line per head.

    Args:
        distance_mean, high_ratio: (layer, head, T) indexed by distance (index 0 unused).
    """
    n_layers, n_heads, size = distance_mean.shape
    fig, axes = plt.subplots(2, n_layers, figsize=(2.4 * n_layers, 5.0), squeeze=False, sharex=True)
    d = np.arange(1, size)
    means = distance_mean[..., 1:].detach().cpu().double().numpy()
    ratios = high_ratio[..., 1:].detach().cpu().double().numpy()
    finite = ratios[np.isfinite(ratios)]
    top = float(np.percentile(finite, 99)) * 1.05 if finite.size else 1.0
    for layer in range(n_layers):
        axes[0, layer].plot(d, means[layer].T, linewidth=0.6)
        axes[1, layer].plot(d, ratios[layer].T, linewidth=0.6)
        axes[0, layer].set_title(f"layer {layer}", fontsize=9)
        axes[1, layer].axhline(1.0, color="black", linewidth=0.6, linestyle="--")
        axes[1, layer].set_ylim(0, max(top, 1.1))
        axes[1, layer].set_xlabel("distance j - i (tokens)", fontsize=8)
    axes[0, 0].set_ylabel("mean CSM")
    axes[1, 0].set_ylabel("high pairs / chance")
    fig.suptitle(f"Distance profiles, one line per head ({INDEX_NOTE}); dashed: chance", fontsize=10)
    fig.subplots_adjust(left=0.06, right=0.99, top=0.88, bottom=0.1, wspace=0.3)
    return fig


def scalar_heatmaps(scalars: Dict[str, torch.Tensor], finding: str) -> Iterator[Tuple[str, Any]]:
    """A layer x head heatmap of each scalar; ``*_chance`` scalars are shown in their statistic's title."""
    for name, values in scalars.items():
        if name.endswith("_chance"):
            continue
        chance = scalars.get(f"{name}_chance")
        yield f"figures/{finding}/heads_{name}.png", layer_head_heatmap(values, f"{finding}/{name}", chance)


def example_csms(examples, max_tokens: int) -> Iterator[Tuple[str, Any]]:
    """For each example window and layer, the CSM of every head with token labels and sentence boundaries."""
    if examples is None or examples.csm is None:
        return
    n_layers = examples.csm.shape[0]
    for e in range(len(examples)):
        valid = examples.valid[e].numpy()
        length = int(valid.nonzero()[0].max()) + 1 if valid.any() else 0
        labels = examples.tokens[e][:length]
        starts = sentence_starts(examples.sentence_ids[e, :length].tolist())
        for layer in range(n_layers):
            data = examples.csm[layer, e, :, :length, :length].double().numpy()
            titles = [f"L{layer} H{h}" for h in range(data.shape[0])]
            yield f"figures/examples/window{e}_csm_L{layer:02d}.png", matrix_grid(
                data, titles, f"CSM of window {e} ({examples.doc_ids[e]}), layer {layer}; lines: sentence boundaries", max_tokens, labels, starts
            )
