"""Turn finding summaries into metrics, tables and figures of one run."""

from __future__ import annotations

import fnmatch
from typing import Dict, Iterable, List

import pandas as pd
import torch

from attnsim.findings.base import Summary


def layer_key(finding: str, stat: str, layer: int, head: int | None = None) -> str:
    """Metric name by the documented rule: ``finding/stat/L03/H07``, ``finding/stat/L03``."""
    key = f"{finding}/{stat}/L{layer:02d}"
    return key if head is None else f"{key}/H{head:02d}"


def per_head_selected(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``finding/stat`` is logged per head (fnmatch against ``stats.per_head``)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def summary_metrics(summary: Summary, per_head: Iterable[str]) -> Dict[str, float]:
    """Per-head (selected), layer-mean and model-mean metrics of a summary.

    Layer and model means are ``nanmean`` over heads (a head whose statistic is
    undefined does not count); non-finite results are left for the sink's guard.
    """
    metrics: Dict[str, float] = {}
    patterns = list(per_head)
    for stat, values in summary.scalars.items():
        values = values.detach().double().cpu()
        name = f"{summary.finding}/{stat}"
        metrics[name] = float(values.nanmean())
        for layer in range(values.shape[0]):
            metrics[layer_key(summary.finding, stat, layer)] = float(values[layer].nanmean())
            if per_head_selected(name, patterns):
                for head in range(values.shape[1]):
                    metrics[layer_key(summary.finding, stat, layer, head)] = float(values[layer, head])
    return metrics


def head_table(summary: Summary) -> pd.DataFrame:
    """One row per (layer, head), one column per scalar statistic."""
    rows: List[dict] = []
    if not summary.scalars:
        return pd.DataFrame(rows)
    first = next(iter(summary.scalars.values()))
    for layer in range(first.shape[0]):
        for head in range(first.shape[1]):
            row = {"layer": layer, "head": head}
            row.update({stat: float(v[layer, head]) for stat, v in summary.scalars.items()})
            rows.append(row)
    return pd.DataFrame(rows)


def profile_table(profile: torch.Tensor, index_name: str = "distance", value_name: str = "value") -> pd.DataFrame:
    """Long table of a (layer, head, K) profile: columns layer, head, ``index_name``, ``value_name``."""
    data = profile.detach().double().cpu()
    n_layers, n_heads, size = data.shape
    layer = torch.arange(n_layers).repeat_interleave(n_heads * size)
    head = torch.arange(n_heads).repeat_interleave(size).repeat(n_layers)
    index = torch.arange(size).repeat(n_layers * n_heads)
    return pd.DataFrame({"layer": layer.numpy(), "head": head.numpy(), index_name: index.numpy(), value_name: data.reshape(-1).numpy()})
