"""Turn finding summaries into metrics, tables and figures of one run.

Which metric keys a run logs (README, "Metric keys"), for a model of L layers and H heads:

- ``finding/stat``, the model mean of every statistic (1 key each);
- ``finding/stat/LNN``, the layer means, of the statistics matching a pattern of
  ``stats.per_layer`` or of ``stats.per_head`` (L keys each; schema default ``["*"]``: every
  statistic; ``paper`` lists its headline statistics);
- ``finding/stat/LNN/HNN`` only for the experiment's headline statistics, those matching a
  pattern of ``stats.per_head`` (L x H keys each);
- run bookkeeping under ``zz_run/`` (:func:`attnsim.tracking.sink.run_key`), last in MLflow's
  chart view;
- comparison series (:func:`comparison_series`), first in MLflow's chart view: for each statistic
  with layer means, ``0_layers/<finding>/<stat>`` at MLflow step = layer (1 key each), and for each
  headline statistic ``0_heads/<finding>/<stat>/layer NN`` at step = head (L keys each).

Every head of every statistic is in the table ``tables/<finding>_heads.csv`` (:func:`head_table`)
and the figure ``figures/<finding>/heads.png``: in MLflow's chart view each metric key is its own
chart scaled on its own, so a grid of per-head keys compares nothing; the figure does. A layer
mean that is not logged is the ``nanmean`` of its layer's heads in that table, which is how
:mod:`attnsim.analysis.runs` reads it back (``attnsim compare``, ``attnsim report``, sweeps).

The comparison series repeat those numbers in the one form MLflow draws on one axis: a key logged at
several steps is drawn as a line chart (a single-step key is one bar), so ``0_heads/csm/mean/layer 03``
puts layer 3's heads side by side (x: head index) and ``0_layers/csm/mean`` the layers (x: layer), for
one run and, overlaid, for several runs in the experiment's chart view. MLflow sorts its chart sections
by name, so ``0_...`` opens the page. They are views only: no reader in attnsim reads them back (they do
not parse as :class:`~attnsim.keys.MetricKey`), and a sweep child's statistics stay at its checkpoint's step.
"""

from __future__ import annotations

import difflib
import fnmatch
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import pandas as pd
import torch

from attnsim.keys import MetricKey
from attnsim.results import Summary


def per_head_selected(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``finding/stat`` is logged per head (fnmatch against ``stats.per_head``)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def per_layer_selected(name: str, per_layer: Iterable[str], per_head: Iterable[str] = ()) -> bool:
    """Whether ``finding/stat`` is logged as layer means: it matches ``stats.per_layer`` or
    ``stats.per_head`` (per-head keys without their layer means would be odd)."""
    return per_head_selected(name, per_layer) or per_head_selected(name, per_head)


def check_per_head(patterns: Iterable[str], statistics: Mapping[str, Sequence[str]], option: str = "stats.per_head") -> None:
    """Refuse a ``stats.per_head`` (or ``stats.per_layer``) pattern that names a finding of the run but
    none of its statistics (a misspelt statistic would otherwise log no such key, silently).

    Patterns naming a finding the run does not have (such as the schema default ``csm/*`` in a run
    without ``csm``, or ``*``), and patterns of findings that declare no statistics, are let through.

    Args:
        patterns: fnmatch patterns over ``finding/stat``.
        statistics: finding name -> its declared statistics (``Finding.statistics``).
        option: the config key the patterns come from, for the message.

    Raises:
        ConfigError: naming the pattern, the finding's statistics and the closest one.
    """
    from attnsim.errors import ConfigError

    what = "per-head" if option.endswith("per_head") else "layer-mean"
    for pattern in patterns:
        finding = str(pattern).split("/", 1)[0]
        names = [f"{finding}/{stat}" for stat in statistics.get(finding, ())]
        if not names or any(fnmatch.fnmatchcase(name, pattern) for name in names):
            continue
        close = difflib.get_close_matches(str(pattern), names, n=1, cutoff=0.5)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"{option} names '{pattern}', which matches no statistic of the finding '{finding}' "
            f"(it has {', '.join(names)}), so no {what} key would be logged for it.{hint} "
            f"Give statistics as finding/statistic (wildcards allowed, e.g. '{finding}/*'), or drop the entry."
        )


def check_per_layer(patterns: Iterable[str], statistics: Mapping[str, Sequence[str]]) -> None:
    """:func:`check_per_head` for ``stats.per_layer``.

    Raises:
        ConfigError: a pattern names a finding of the run but none of its statistics.
    """
    check_per_head(patterns, statistics, option="stats.per_layer")


def summary_metrics(summary: Summary, per_head: Iterable[str], per_layer: Iterable[str] = ("*",)) -> Dict[str, float]:
    """Model-mean metrics of every statistic of a summary, layer-mean metrics of the statistics selected
    by ``per_layer`` or ``per_head``, per-head metrics of those selected by ``per_head``.

    Args:
        summary: a finding's summary; each scalar is a (layer, head) tensor.
        per_head: fnmatch patterns over ``finding/stat`` (``stats.per_head``): the statistics also
            logged per head (and so as layer means).
        per_layer: fnmatch patterns over ``finding/stat`` (``stats.per_layer``; default ``("*",)``,
            every statistic): the statistics also logged as layer means.

    Returns:
        key -> value: ``finding/stat`` for every statistic (1 key), ``finding/stat/LNN`` for the
        statistics selected by either list (L keys each), ``finding/stat/LNN/HNN`` for those of
        ``per_head`` (L x H more keys each). Layer and model means are ``nanmean`` over heads (a head
        whose statistic is undefined does not count); non-finite results are left for the sink's guard.
    """
    metrics: Dict[str, float] = {}
    heads, layers = list(per_head), list(per_layer)
    for stat, values in summary.scalars.items():
        values = values.detach().double().cpu()
        key = MetricKey(summary.finding, stat)
        metrics[key.format()] = float(values.nanmean())
        if not per_layer_selected(key.name, layers, heads):
            continue
        for layer in range(values.shape[0]):
            metrics[MetricKey(summary.finding, stat, layer).format()] = float(values[layer].nanmean())
            if per_head_selected(key.name, heads):
                for head in range(values.shape[1]):
                    metrics[MetricKey(summary.finding, stat, layer, head).format()] = float(values[layer, head])
    return metrics


HEADS_SECTION = "0_heads"  # per-layer series over heads; sorts before every finding name in MLflow's chart view
LAYERS_SECTION = "0_layers"  # per-statistic series over layers


def comparison_series(summary: Summary, per_head: Iterable[str], per_layer: Iterable[str] = ("*",)) -> Dict[str, Dict[int, float]]:
    """The series MLflow draws as line charts (see module docstring): key -> {MLflow step: value}.

    Args:
        summary: a finding's summary; each scalar is a (layer, head) tensor.
        per_head: ``stats.per_head`` patterns: the headline statistics, also logged per head.
        per_layer: ``stats.per_layer`` patterns: the statistics also logged as layer means.

    Returns:
        ``0_layers/<finding>/<stat>`` -> {layer: layer mean} for every statistic selected by either list
        (the same ``nanmean`` as ``finding/stat/LNN``); ``0_heads/<finding>/<stat>/layer NN`` ->
        {head: value} for the statistics of ``per_head`` (the values of ``finding/stat/LNN/HNN``).
        Non-finite values are left for the sink's guard.
    """
    series: Dict[str, Dict[int, float]] = {}
    heads, layers = list(per_head), list(per_layer)
    for stat, values in summary.scalars.items():
        name = MetricKey(summary.finding, stat).format()
        if not per_layer_selected(name, layers, heads):
            continue
        values = values.detach().double().cpu()
        series[f"{LAYERS_SECTION}/{name}"] = {layer: float(values[layer].nanmean()) for layer in range(values.shape[0])}
        if per_head_selected(name, heads):
            for layer in range(values.shape[0]):
                series[f"{HEADS_SECTION}/{name}/layer {layer:02d}"] = {head: float(values[layer, head]) for head in range(values.shape[1])}
    return series


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


def profile_table(profile: torch.Tensor, index_name: str = "distance", value_name: str = "value", index: Optional[torch.Tensor] = None) -> pd.DataFrame:
    """Long table of a (layer, head, K) profile: columns layer, head, ``index_name``, ``value_name``.

    ``index``: (K,) the index value of each entry (e.g. the lower edge of a distance bin); None: 0..K-1.
    """
    data = profile.detach().double().cpu()
    n_layers, n_heads, size = data.shape
    layer = torch.arange(n_layers).repeat_interleave(n_heads * size)
    head = torch.arange(n_heads).repeat_interleave(size).repeat(n_layers)
    index = (torch.arange(size) if index is None else index.detach().cpu().long()).repeat(n_layers * n_heads)
    return pd.DataFrame({"layer": layer.numpy(), "head": head.numpy(), index_name: index.numpy(), value_name: data.reshape(-1).numpy()})
