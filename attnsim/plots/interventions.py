"""Figures of interventions: single-head effects against a statistic of an earlier run."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from attnsim.plots.common import INDEX_NOTE, inch_axes


def effect_scatter(
    effects: torch.Tensor,
    statistic: torch.Tensor,
    effect_label: str,
    statistic_label: str,
    random_mean: Optional[float] = None,
    random_std: Optional[float] = None,
    label_top: int = 5,
):
    """Each head's ablation effect (y) against a statistic of the same head (x).

    Args:
        effects: (layer, head) single-head effects (NaN: not ablated alone).
        statistic: (layer, head) the statistic (e.g. ``repetition/repetition_score``).
        effect_label, statistic_label: axis labels.
        random_mean, random_std: the random single heads' mean effect and spread, drawn as a band.
        label_top: the heads with the largest effects are labelled ``L<layer>H<head>``.

    Returns:
        A matplotlib figure.
    """
    eff = effects.detach().double().cpu().numpy()
    stat = statistic.detach().double().cpu().numpy()
    fig, ax = inch_axes(4.5, 3.0, left=0.8, right=0.25, bottom=0.5, top=0.45)
    keep = np.isfinite(eff) & np.isfinite(stat)
    layers = np.repeat(np.arange(eff.shape[0])[:, None], eff.shape[1], axis=1)
    points = ax.scatter(stat[keep], eff[keep], c=layers[keep], cmap="viridis", s=14, linewidths=0)
    if random_mean is not None and np.isfinite(random_mean):
        ax.axhline(random_mean, color="grey", linewidth=1.0, linestyle="--", label="random heads: mean")
        if random_std is not None and np.isfinite(random_std):
            ax.axhspan(random_mean - random_std, random_mean + random_std, color="grey", alpha=0.15, label="± 1 spread")
        ax.legend(fontsize=6, frameon=False)
    order = np.argsort(np.where(keep, eff, -np.inf), axis=None)[::-1][: min(label_top, int(keep.sum()))]
    for flat in order:
        layer, head = np.unravel_index(flat, eff.shape)
        ax.annotate(f"L{layer}H{head}", (stat[layer, head], eff[layer, head]), fontsize=6, xytext=(2, 2), textcoords="offset points")
    bar = fig.colorbar(points, ax=ax, pad=0.01)
    bar.set_label("layer", fontsize=7)
    bar.ax.tick_params(labelsize=6)
    ax.set_xlabel(statistic_label, fontsize=8)
    ax.set_ylabel(effect_label, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_title(f"single-head ablation effect against {statistic_label}\n({INDEX_NOTE})", fontsize=8)
    return fig
