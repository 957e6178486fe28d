"""Figures of the attention-visualisation family: attention maps, rollout, flow, gradient maps, image overlays.

Readability rule (shared with :mod:`attnsim.plots.common`): a token axis
longer than ``max_tokens`` is average-pooled over blocks of
``ceil(T / max_tokens)`` consecutive tokens (NaN-aware), each block labelled
with its first token, and token labels are 8-point, cut to 12 characters and
thinned to what fits (:func:`attnsim.plots.common.labels_fitting`). Token
strips (one row per layer or method, one column per token) follow the same
rule along the token axis. Vision maps are never pooled along a sequence:
they are drawn on the patch grid (rows x cols) and upsampled onto the image.
Layers and heads are 0-indexed, as in metric keys.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import matplotlib.pyplot as plt
import numpy as np
import torch

from attnsim.plots.common import INDEX_NOTE, TOKEN_FONT, labels_fitting, matrix_grid, short_label, thin_ticks


def pool_tokens(values: np.ndarray, max_tokens: int) -> Tuple[np.ndarray, int]:
    """Average-pool the last (token) axis to at most ``max_tokens`` cells (NaN-aware).

    Returns:
        (pooled array, block size in tokens).
    """
    size = values.shape[-1]
    block = max(1, math.ceil(size / max_tokens))
    if block == 1:
        return values, 1
    cells = math.ceil(size / block)
    padded = np.pad(values.astype(float), [(0, 0)] * (values.ndim - 1) + [(0, cells * block - size)], constant_values=np.nan)
    shaped = padded.reshape(*values.shape[:-1], cells, block)
    with np.errstate(invalid="ignore"):
        counts = np.isfinite(shaped).sum(-1)
        sums = np.nansum(shaped, -1)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan), block


def mean_attention(matrix: torch.Tensor, max_tokens: int, finding: str) -> Iterator[Tuple[str, Any]]:
    """One figure per layer: the corpus-mean attention map of each head. ``matrix``: (layer, head, T, T)."""
    data = matrix.detach().cpu().double().numpy()
    for layer in range(data.shape[0]):
        titles = [f"L{layer} H{head}" for head in range(data.shape[1])]
        yield (
            f"figures/{finding}/mean_attention_L{layer:02d}.png",
            matrix_grid(data[layer], titles, f"Corpus-mean attention (rows: query, columns: key), layer {layer}", max_tokens, cmap="viridis"),
        )


def example_attention(examples, max_tokens: int, finding: str) -> Iterator[Tuple[str, Any]]:  # noqa: ANN001
    """For each example window and layer, every head's attention map with token labels (query rows, key columns)."""
    if examples is None or examples.attention is None:
        return
    n_layers = examples.attention.shape[0]
    for e in range(len(examples)):
        pooled, block, length = examples.maps("attention", e, max_tokens)  # pooled by the figures' rule (recorded pooled at length)
        labels = examples.tokens[e][:length]
        for layer in range(n_layers):
            data = pooled[layer]
            titles = [f"L{layer} H{h}" for h in range(data.shape[0])]
            yield (
                f"figures/{finding}/window{e}_attention_L{layer:02d}.png",
                matrix_grid(
                    data,
                    titles,
                    f"Attention of window {e} ({examples.label(e)}), layer {layer} (rows: query, columns: key)",
                    max_tokens,
                    labels,
                    cmap="viridis",
                    block=block,
                ),
            )


def real_length(examples, index: int) -> int:  # noqa: ANN001
    """Number of leading positions up to the last valid token of example ``index``."""
    valid = examples.valid[index].numpy()
    return int(valid.nonzero()[0].max()) + 1 if valid.any() else 0


def token_strip(values: np.ndarray, labels: Sequence[str], row_names: Sequence[str], title: str, max_tokens: int, signed: bool = False, unit: str = ""):
    """Rows of per-token scores (e.g. one per layer depth), tokens along x.

    Args:
        values: (rows, T) scores.
        labels: T token labels.
        row_names: one name per row.
        signed: draw with a diverging colour map centred on 0 (CDAM), else sequential.
    """
    pooled, block = pool_tokens(np.asarray(values, dtype=float), max_tokens)
    rows, cells = pooled.shape
    width = min(2.0 + 0.22 * cells, 16.0)
    fig, ax = plt.subplots(figsize=(width, 1.6 + 0.32 * rows))
    if signed:
        finite = pooled[np.isfinite(pooled)]
        bound = float(np.abs(finite).max()) if finite.size else 1.0
        image = ax.imshow(pooled, cmap="RdBu_r", vmin=-bound or -1, vmax=bound or 1, aspect="auto", interpolation="nearest")
    else:
        image = ax.imshow(pooled, cmap="magma", aspect="auto", interpolation="nearest")
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01, label=unit)
    positions, names = thin_ticks(list(labels), block, most=labels_fitting(0.85 * width - 1.0, 48))  # the axes' share of the width
    ax.set_xticks(positions, [short_label(n) for n in names], fontsize=TOKEN_FONT, rotation=90)
    ax.set_yticks(range(rows), row_names, fontsize=9)
    note = f"; cells pooled over {block} tokens" if block > 1 else ""
    ax.set_title(f"{title}\n({INDEX_NOTE}{note})", fontsize=9)
    fig.tight_layout()
    return fig


def depth_profiles(scalars: Dict[str, torch.Tensor], finding: str, title: str):
    """Each ``<category>_mass`` (layer, 1) against layer depth, its ``_chance`` value dashed."""
    masses = [name for name in scalars if name.endswith("_mass")]
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    for name in masses:
        values = scalars[name][:, 0].detach().cpu().double().numpy()
        depth = np.arange(len(values))
        line = ax.plot(depth, values, marker="o", label=name.removesuffix("_mass"))[0]
        chance = scalars.get(f"{name}_chance")
        if chance is not None:
            ax.plot(depth, chance[:, 0].detach().cpu().double().numpy(), linestyle="--", color=line.get_color(), linewidth=0.8)
    ax.set_xlabel("rollout through layers 0..l (layer l, 0-indexed)")
    ax.set_ylabel("rollout mass (share)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    ax.set_title(f"{title}\n(dashed: uniform mixing)", fontsize=9)
    fig.tight_layout()
    return fig


def flow_and_rollout(flow: np.ndarray, rollout: np.ndarray, labels: Sequence[str], title: str, max_tokens: int):
    """Attention flow and rollout of the readout token, side by side as two strips."""
    return token_strip(np.stack([rollout, flow]), labels, ["rollout", "flow"], title, max_tokens, unit="share / flow value")


def saliency_overlay(image: np.ndarray, maps: List[np.ndarray], titles: List[str], suptitle: str, alpha: float = 0.5):
    """Saliency maps on the patch grid drawn over the image, one panel per map.

    Args:
        image: (H, W, 3) uint8, the model input as a picture.
        maps: (rows, cols) saliency per patch; each panel is scaled to its own range.
        titles: one per map.
    """
    panels = len(maps) + 1
    fig, axes = plt.subplots(1, panels, figsize=(2.6 * panels, 2.9), squeeze=False)
    height, width = image.shape[:2]
    axes[0, 0].imshow(image)
    axes[0, 0].set_title("input", fontsize=8)
    for ax, grid, name in zip(axes[0, 1:], maps, titles, strict=True):
        ax.imshow(image)
        finite = grid[np.isfinite(grid)]
        low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        scaled = (grid - low) / (high - low) if high > low else np.zeros_like(grid)
        # extent maps patch cells onto pixels; bilinear smoothing only for display
        ax.imshow(scaled, cmap="jet", alpha=alpha, extent=(0, width, height, 0), interpolation="bilinear", vmin=0, vmax=1)
        ax.set_title(name, fontsize=8)
    for ax in axes[0]:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"{suptitle}\n(each overlay scaled to its own range)", fontsize=9)
    fig.tight_layout()
    return fig


def grid_heatmaps(maps: List[np.ndarray], titles: List[str], suptitle: str, unit: str = ""):
    """Maps on the patch grid (rows x cols), one panel each, on a shared colour scale (no image underneath)."""
    finite = np.concatenate([m[np.isfinite(m)] for m in maps]) if maps else np.zeros(0)
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    fig, axes = plt.subplots(1, len(maps), figsize=(2.6 * len(maps) + 0.8, 2.9), squeeze=False)
    image = None
    for ax, grid, name in zip(axes[0], maps, titles, strict=True):
        image = ax.imshow(grid, cmap="magma", vmin=low, vmax=high, interpolation="nearest")
        ax.set_title(name, fontsize=8)
        ax.set_xlabel("patch column", fontsize=7)
        ax.set_ylabel("patch row", fontsize=7)
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), fraction=0.03, label=unit)
    fig.suptitle(f"{suptitle}\n(patch rows and columns 0-indexed)", fontsize=9)
    return fig


def grid_values(row: np.ndarray, n_extra: int, grid: Tuple[int, int]) -> np.ndarray:
    """The patch tokens of a per-token row (T,) as a (rows, cols) grid (extra tokens dropped)."""
    return np.asarray(row[n_extra:], dtype=float).reshape(grid)


__all__ = [
    "pool_tokens",
    "mean_attention",
    "example_attention",
    "real_length",
    "token_strip",
    "depth_profiles",
    "flow_and_rollout",
    "saliency_overlay",
    "grid_heatmaps",
    "grid_values",
]
