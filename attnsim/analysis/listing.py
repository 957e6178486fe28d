"""The runs of a tracking store, listed, and one run described (``attnsim runs``, ``attnsim runs RUN_ID``).

A run id is what ``report``, ``compare``, ``sweep --checkpoints`` and ``explore --run`` take; this module finds it
again without the MLflow UI, and prints what one run logged: its ``attnsim.*`` tags (what it measured and how), its
params (the resolved config) and the model means of its statistics (``finding/stat``). Layer and head values stay
where ``attnsim compare``, the run's ``tables/<finding>_heads.csv`` and the UI show them; only their count is given.

It reads the store through MLflow's client and imports neither torch nor Lightning, as ``report`` and ``compare``.
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from attnsim.analysis.runs import statistics
from attnsim.errors import TrackingError
from attnsim.keys import RunKind, Tag

LIST_COLUMNS = ("run_id", "experiment", "kind", "status", "model", "corpus", "windows", "seq_len", "capture_path", "start", "run_name")
"""The columns of :func:`list_runs`, in order: ``corpus`` is :func:`corpus_of`'s, ``start`` the run's start in UTC
(``YYYY-MM-DD HH:MM:SS``)."""

MAX_RUNS = 50_000
"""The most runs one listing returns: MLflow's largest ``max_results`` of a run search."""

BOOKKEEPING = "zz_run/"
"""Prefix of a run's own bookkeeping metrics (windows folded in, seconds by stage, peak memory)."""


def _start(millis: Optional[int]) -> str:
    """A run's start (MLflow's milliseconds since the epoch) as ``YYYY-MM-DD HH:MM:SS`` UTC; empty when unknown."""
    if not millis:
        return ""
    return datetime.datetime.fromtimestamp(millis / 1000, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _status(run: Any) -> str:
    """A run's status, ``RUNNING (process gone)`` where the process that holds a RUNNING run on this machine has
    ended (nothing will close it; the next ``attnsim run`` of its experiment marks it FAILED)."""
    from attnsim.tracking.store import process_gone

    if run.info.status == "RUNNING" and process_gone(run.data.tags):
        return "RUNNING (process gone)"
    return run.info.status


def measured_windows(run: Any) -> str:
    """Windows of a run: the tag (what it set out to measure), or ``measured/planned`` for a partial run (ended by
    Ctrl-C or a failure: ``zz_run/windows`` holds what was folded in) or a run whose process is gone."""
    planned = run.data.tags.get(Tag.WINDOWS.value, "")
    measured = run.data.metrics.get(f"{BOOKKEEPING}windows")
    partial = run.data.tags.get(Tag.PARTIAL.value) == "true" or run.info.status != "FINISHED"
    if partial and planned:
        return f"{int(measured) if measured is not None else 0}/{planned}"
    return planned


def corpus_of(run: Any) -> str:
    """What a run measured: its tag ``attnsim.corpus`` (``bbc``, ``text:/path/to/dir``, ``repeated_tokens:20x3``; see
    :func:`attnsim.workflows.common.corpus_label`), followed by `` (limit N)`` when its param ``corpus.limit`` is set;
    empty when the run has neither."""
    corpus = run.data.tags.get(Tag.CORPUS.value, "")
    limit = run.data.params.get("corpus.limit", "")
    if limit in ("", "None", "null"):
        return corpus
    return f"{corpus} (limit {limit})" if corpus else f"(limit {limit})"


def list_runs(uri: Optional[str] = None, experiment: Optional[str] = None, limit: int = 20) -> List[Dict[str, str]]:
    """The newest runs of a tracking store, newest first.

    Args:
        uri: tracking store (default: ``$MLFLOW_TRACKING_URI``, else ``./mlruns/mlflow.db``).
        experiment: only the runs of this MLflow experiment (the name ``attnsim run`` logged to, e.g. ``csm``);
            None: every active experiment.
        limit: at most this many runs (1 to :data:`MAX_RUNS`).

    Returns:
        One dict per run with the keys of :data:`LIST_COLUMNS` (strings; empty where a run lacks the tag). ``corpus`` is
        the corpus and its limit (:func:`corpus_of`), so that runs of one model on two corpora differ. ``windows``
        is ``measured/planned`` for a run that did not finish (partial, FAILED, KILLED, RUNNING), and ``status``
        ``RUNNING (process gone)`` for a RUNNING run whose process on this machine has ended.

    Raises:
        ValueError: ``limit`` is not a whole number from 1 to :data:`MAX_RUNS`.
        TrackingError: the store cannot be used or is an SQLite file that does not exist, or ``experiment`` is not in
            it (the message lists those that are).
    """
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError(f"limit must be a whole number of runs, 1 to {MAX_RUNS}; got {limit!r}")
    if not 1 <= limit <= MAX_RUNS:
        raise ValueError(f"limit must be 1 to {MAX_RUNS} runs (MLflow's most per search), got {limit}")
    from attnsim.tracking.store import existing_tracker

    tracker = existing_tracker(uri)
    client = tracker.client
    experiments = {e.experiment_id: e.name for e in client.search_experiments()}
    if experiment is not None:
        chosen = [eid for eid, name in experiments.items() if name == experiment]
        if not chosen:
            known = ", ".join(sorted(experiments.values())) or "none"
            raise TrackingError(
                f"MLflow experiment '{experiment}' is not in the tracking store {tracker.uri} (its experiments: {known}). Give one of those names."
            )
        experiments = {chosen[0]: experiment}
    if not experiments:
        return []
    runs = client.search_runs(list(experiments), order_by=["attributes.start_time DESC"], max_results=limit)
    rows = []
    for run in runs:
        tags = run.data.tags
        rows.append(
            {
                "run_id": run.info.run_id,
                "experiment": experiments.get(run.info.experiment_id, run.info.experiment_id),
                "kind": RunKind.of(tags).value,
                "status": _status(run),
                "model": tags.get(Tag.MODEL.value, ""),
                "corpus": corpus_of(run),
                "windows": measured_windows(run),
                "seq_len": tags.get(Tag.SEQ_LEN.value, ""),
                "capture_path": tags.get(Tag.CAPTURE_PATH.value, ""),
                "start": _start(run.info.start_time),
                "run_name": run.info.run_name or "",
            }
        )
    return rows


@dataclass
class RunDescription:
    """What one run logged (:func:`describe_run`).

    Attributes:
        run_id, run_name, experiment (its MLflow experiment's name), status, kind (:class:`~attnsim.keys.RunKind` value).
        start, end: UTC ``YYYY-MM-DD HH:MM:SS`` (end empty while the run has not ended).
        tags: the ``attnsim.*`` tags, by name, sorted.
        params: the logged params (the resolved config, dot-list keys), sorted.
        statistics: the model means of the statistics (``finding/stat``), sorted; NaN where a run logged one.
        layer_and_head_keys: how many layer-mean and per-head metric keys the run logged besides them.
        bookkeeping: the run's ``zz_run/*`` metrics (windows, seconds by stage, peak memory), sorted.
        artifacts: the run's top-level artifact paths (folders end in ``/``), e.g. ``tables/``, ``figures/``,
            ``explorer.html``; a comparison's ``comparison.csv``; empty when it logged none or they cannot be listed.
    """

    run_id: str
    run_name: str
    experiment: str
    status: str
    kind: str
    start: str
    end: str
    tags: Dict[str, str] = field(default_factory=dict)
    params: Dict[str, str] = field(default_factory=dict)
    statistics: Dict[str, float] = field(default_factory=dict)
    layer_and_head_keys: int = 0
    bookkeeping: Dict[str, float] = field(default_factory=dict)
    artifacts: List[str] = field(default_factory=list)


def _artifacts(client: Any, run_id: str) -> List[str]:
    """Top-level artifact paths of a run, folders marked with ``/``; empty when the store cannot list them."""
    try:
        return sorted(f"{a.path}/" if a.is_dir else a.path for a in client.list_artifacts(run_id))
    except Exception:  # noqa: BLE001 - an artifact store out of reach: the rest of the description stands
        return []


def describe_run(run_id: str, uri: Optional[str] = None) -> RunDescription:
    """One run's tags, params and statistics' model means, read from the tracking store.

    Args:
        run_id: the id ``attnsim run`` printed (or :func:`list_runs` lists).
        uri: tracking store (default: ``$MLFLOW_TRACKING_URI``, else ``./mlruns/mlflow.db``).

    Raises:
        TrackingError: ``run_id`` is not a string, the store cannot be used or is an SQLite file that does not exist,
            or the run is not in it.
    """
    from attnsim.tracking.store import existing_tracker

    if not isinstance(run_id, str):
        raise TrackingError(f"A run id is a string of 32 hexadecimal characters, as `attnsim run` prints it; got {run_id!r}.")
    tracker = existing_tracker(uri)
    try:
        run = tracker.client.get_run(run_id)
    except Exception as exc:  # noqa: BLE001 - MLflow raises its own exception types
        whole = "" if re.fullmatch(r"[0-9a-f]{32}", run_id) else " A run id is 32 lower-case hexadecimal characters, as `attnsim run` prints it."
        raise TrackingError(
            f"Run '{run_id}' is not in the tracking store {tracker.uri}.{whole} "
            "`attnsim runs` lists the store's runs; give --uri (or MLFLOW_TRACKING_URI) for another store."
        ) from exc
    try:
        experiment = tracker.client.get_experiment(run.info.experiment_id).name
    except Exception:  # noqa: BLE001 - a deleted experiment still names its runs' id
        experiment = run.info.experiment_id
    metrics = run.data.metrics
    parsed = statistics({k: v for k, v in metrics.items() if not k.startswith(BOOKKEEPING)})
    return RunDescription(
        run_id=run.info.run_id,
        run_name=run.info.run_name or "",
        experiment=experiment,
        status=_status(run),
        kind=RunKind.of(run.data.tags).value,
        start=_start(run.info.start_time),
        end=_start(run.info.end_time),
        tags={k: v for k, v in sorted(run.data.tags.items()) if k.startswith("attnsim.")},
        params=dict(sorted(run.data.params.items())),
        statistics={key.format(): value for key, value in sorted(parsed.items(), key=lambda kv: kv[0].format()) if key.layer is None},
        layer_and_head_keys=sum(key.layer is not None for key in parsed),
        bookkeeping={k: v for k, v in sorted(metrics.items()) if k.startswith(BOOKKEEPING)},
        artifacts=_artifacts(tracker.client, run.info.run_id),
    )


_HEADER = {"run_id": "run id", "seq_len": "T", "capture_path": "capture", "start": "start (UTC)", "run_name": "name"}
_FIRST = ("run_id", "status", "experiment", "kind", "start")
"""The columns of a run's first line when :func:`format_runs` splits each run over two lines; the rest go on the second."""


def _aligned(table: List[List[str]], indent: str = "") -> List[str]:
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return [(indent + "  ".join(cell.ljust(width) for cell, width in zip(line, widths))).rstrip() for line in table]


def format_runs(rows: List[Dict[str, str]], width: Optional[int] = None) -> str:
    """:func:`list_runs`'s rows as an aligned text table: a header line, then one line per run.

    Args:
        width: the widest line wanted (a terminal's columns); None: no limit. When the one-line table is wider, each
            run takes two lines: run id, status, experiment, kind and start, then, indented, the model, corpus,
            windows, T, capture path and name (cut with ``...`` at ``width``, taken as at least 60; the first line is never
            cut, so that the run id stays whole: about 84 characters).
    """
    if not rows:
        return "no runs"
    table = [[_HEADER.get(c, c) for c in LIST_COLUMNS]] + [[row[c] for c in LIST_COLUMNS] for row in rows]
    lines = _aligned(table)
    if width is None or max(len(line) for line in lines) <= width:
        return "\n".join(lines)
    width = max(width, 60)
    rest = [c for c in LIST_COLUMNS if c not in _FIRST]
    first = _aligned([[_HEADER.get(c, c) for c in _FIRST]] + [[row[c] for c in _FIRST] for row in rows])
    second = _aligned([[_HEADER.get(c, c) for c in rest]] + [[row[c] for c in rest] for row in rows], indent="    ")
    cut = [line if len(line) <= width else line[: width - 3] + "..." for line in second]
    return "\n".join(line for pair in zip(first, cut) for line in pair)


def _number(value: Any) -> str:
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.6g}"


def format_run(run: RunDescription) -> str:
    """A :class:`RunDescription` as text: the run, its tags, params, statistics, bookkeeping and artifacts, one section each."""
    ended = f", ended {run.end}" if run.end else ""
    lines = [f"run {run.run_id} '{run.run_name}': experiment '{run.experiment}', {run.kind}, {run.status}; started {run.start}{ended} (UTC)"]

    def section(title: str, items: Dict[str, Any], number: bool = False) -> None:
        lines.append(f"\n{title}:")
        if not items:
            lines.append("  (none)")
            return
        width = max(len(k) for k in items)
        lines.extend(f"  {k:<{width}}  {_number(v) if number else v}" for k, v in items.items())

    section("tags", run.tags)
    section("params", run.params)
    section("statistics (model means)", run.statistics, number=True)
    if run.layer_and_head_keys:
        lines.append(f"  and {run.layer_and_head_keys} layer-mean and per-head keys: `attnsim compare {run.run_id}` or the MLflow UI show them")
    section("bookkeeping", run.bookkeeping, number=True)
    lines.append("\nartifacts: " + (", ".join(run.artifacts) if run.artifacts else "(none)"))
    return "\n".join(lines)


__all__ = ["LIST_COLUMNS", "MAX_RUNS", "corpus_of", "measured_windows", "RunDescription", "describe_run", "format_run", "format_runs", "list_runs"]
