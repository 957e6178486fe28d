"""Turn finding summaries into metrics, tables and figures of one run."""

from __future__ import annotations

import fnmatch
from typing import Dict, Iterable, List

import pandas as pd
import torch

from attnsim.keys import MetricKey
from attnsim.results import Summary


def per_head_selected(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``finding/stat`` is logged per head (fnmatch against ``stats.per_head``)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def summary_metrics(summary: Summary, per_head: Iterable[str]) -> Dict[str, float]:
    """Per-head (selected), layer-mean and model-mean metrics of a summary's scalars, keyed by
    :meth:`MetricKey.format <attnsim.keys.MetricKey.format>`.

    Layer and model means are ``nanmean`` over heads (a head whose statistic is
    undefined does not count); non-finite results are left for the sink's guard.
    """
    metrics: Dict[str, float] = {}
    patterns = list(per_head)
    for stat, values in summary.scalars.items():
        values = values.detach().double().cpu()
        key = MetricKey(summary.finding, stat)
        metrics[key.format()] = float(values.nanmean())
        for layer in range(values.shape[0]):
            metrics[MetricKey(summary.finding, stat, layer).format()] = float(values[layer].nanmean())
            if per_head_selected(key.name, patterns):
                for head in range(values.shape[1]):
                    metrics[MetricKey(summary.finding, stat, layer, head).format()] = float(values[layer, head])
    return metrics


def corpus_metrics(summary: Summary) -> Dict[str, float]:
    """A summary's corpus-level numbers as metrics: ``<finding>/<name>`` -> float (:attr:`Summary.metrics`)."""
    return {MetricKey(summary.finding, name).format(): float(value) for name, value in summary.metrics.items()}


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
