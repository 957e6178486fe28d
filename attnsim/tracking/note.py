"""The "read this run" part of a run's description (tag ``mlflow.note.content``, Markdown in the MLflow UI).

A run's page opens on its Overview tab, whose first block is the description; MLflow shows its first
lines and a "Show more" link. What the description holds, first to last (:func:`reading_note`):

1. links to the run's heads mosaics (``figures/<finding>/heads.png``, every head of every statistic on
   one colour scale per panel), its tables (``tables/``) and its explorer page (``explorer.html``), as
   routes of MLflow's artifact view relative to the page (so they work under ``attnsim ui`` and on an
   MLflow server), and the ``attnsim explore --run RUN_ID`` command;
2. the first heads mosaic, drawn in the description (an image served by MLflow's ``get-artifact``; its
   top shows under the links before "Show more" is clicked);
3. the layer means of the run's headline statistics, one row per statistic, rounded to 4 significant
   digits (MLflow's own metric table prints 16);
4. the first statistic of ``stats.per_head`` by layer (rows) and head (columns), rounded likewise;
5. what the description held before (the experiment's description and how the run was started).

Headline statistics are those of ``stats.per_head``; a run with none (``paper``) lists those of
``stats.per_layer`` unless that is every statistic (``*``). At most :data:`MAX_ROWS` rows.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any, Dict, Iterable, List, Mapping, Sequence
from urllib.parse import quote

from attnsim.tracking.links import artifact_link

MAX_ROWS = 12  # statistics in the layer table
MAX_HEAD_TABLE_CHARS = 3000  # a larger layer x head table (a big model) is left to the mosaic and the tables


def rounded(value: float) -> str:
    """``value`` with 4 significant digits (``0.4644``, ``1.078``, ``1.234e+05``); ``–`` for NaN or infinity."""
    return f"{value:.4g}" if math.isfinite(value) else "–"


def headline_statistics(names: Iterable[str], per_head: Sequence[str], per_layer: Sequence[str]) -> List[str]:
    """The statistics (``finding/stat``) a description lists: those of ``per_head``, else those of ``per_layer``
    unless it lists every statistic (``*``); in order, at most :data:`MAX_ROWS`."""
    names = list(names)
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in per_head)]
    if not chosen and "*" not in per_layer:
        chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in per_layer)]
    return chosen[:MAX_ROWS]


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def reading_note(
    experiment_id: str,
    run_id: str,
    scalars: Mapping[str, Any],
    artifacts: Iterable[str],
    per_head: Sequence[str],
    per_layer: Sequence[str],
    before: str = "",
) -> str:
    """A run's description: the way to its mosaics, tables and explorer, its headline numbers, then ``before``.

    Args:
        experiment_id, run_id: the run.
        scalars: ``finding/stat`` -> its (layer, head) values (a tensor or nested lists), in logging order.
        artifacts: the run's artifact paths (``figures/csm/heads.png``, ``tables/csm_heads.csv``, ``explorer.html`` ...).
        per_head, per_layer: ``stats.per_head`` and ``stats.per_layer`` (which statistics are headlines).
        before: the description so far (experiment description, how the run was started), kept last.

    Returns:
        Markdown (module docstring); numbers rounded by :func:`rounded`.
    """
    artifacts = list(artifacts)
    mosaics = [path for path in artifacts if path.startswith("figures/") and path.endswith("/heads.png")]
    links = [f"[{path.split('/')[1]} heads]({artifact_link(experiment_id, run_id, path)})" for path in mosaics]
    if any(path.startswith("tables/") for path in artifacts):
        links.append(f"[tables]({artifact_link(experiment_id, run_id, 'tables')})")
    if "explorer.html" in artifacts:
        links.append(f"[explorer]({artifact_link(experiment_id, run_id, 'explorer.html')})")
    headlines = [name for name in scalars if any(fnmatch.fnmatchcase(name, p) for p in per_head)]
    charts = (
        "`0_heads` charts put a layer's heads on one axis (x: head), `0_layers` the layers (x: layer)"
        if headlines
        else "`0_layers` charts put the layers on one axis (x: layer)"
    )
    parts = ["**Read this run:** " + " · ".join(links + [f"live explorer: `attnsim explore --run {run_id}`"]) + f". Model metrics: {charts}."]
    if mosaics:
        parts.append(f"![{mosaics[0]}](get-artifact?path={quote(mosaics[0])}&run_uuid={quote(run_id)})")
    chosen = headline_statistics(scalars, per_head, per_layer)
    values = {name: [[float(v) for v in row] for row in _rows(scalars[name])] for name in chosen}
    if values:
        n_layers = max(len(rows) for rows in values.values())
        header = ["statistic", "model mean", *(f"L{layer}" for layer in range(n_layers))]
        body = []
        for name, rows in values.items():
            means = [_nanmean(row) for row in rows]
            body.append([f"`{name}`", rounded(_nanmean([v for row in rows for v in row])), *(rounded(m) for m in means)])
        parts.append("Layer means (4 significant digits):\n\n" + _table(header, body))
    if headlines:  # the first per-head statistic by layer and head
        first, rows = headlines[0], _rows(scalars[headlines[0]])
        heads = _table(
            ["layer", *(f"H{h}" for h in range(max(len(row) for row in rows)))], ([f"L{i}", *(rounded(v) for v in row)] for i, row in enumerate(rows))
        )
        if len(heads) <= MAX_HEAD_TABLE_CHARS:
            parts.append(f"`{first}` by layer and head:\n\n" + heads)
    if before:
        parts.append(before)
    return "\n\n".join(parts)


def _rows(values: Any) -> List[List[float]]:
    if hasattr(values, "detach"):
        values = values.detach().double().cpu().tolist()
    return [list(row) for row in values]


def _nanmean(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else math.nan


def describe_run(client: Any, sink: Any, summaries: Mapping[str, Any], per_head: Sequence[str], per_layer: Sequence[str], before: str) -> str:
    """:func:`reading_note` for a run just logged through ``sink`` (a :class:`~attnsim.tracking.sink.RunSink`, which
    knows the artifacts it logged), from its summaries.

    Raises:
        MlflowException: the run cannot be read (its experiment id).
    """
    experiment_id = client.get_run(sink.run_id).info.experiment_id
    scalars: Dict[str, Any] = {f"{name}/{stat}": values for name, summary in summaries.items() for stat, values in summary.scalars.items()}
    return reading_note(experiment_id, sink.run_id, scalars, sink.artifacts, per_head, per_layer, before)
