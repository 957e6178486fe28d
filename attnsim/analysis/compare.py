"""The comparison (``attnsim compare``): per-layer statistics of several runs side by side.

Runs are chosen by id (``attnsim compare ID ID ...``), as every finished
measurement run of an MLflow experiment (``--experiment NAME``), or as the
finished children of a sweep (``--parent ID``, ordered by global step). The
table has one row per (statistic, layer): ``L00``, ``L01``, ... are layer
means over heads (0-indexed, as in metric keys) and ``mean`` the model mean;
one column per run. It is read from the runs' logged metrics
(``finding/statistic/LNN`` and ``finding/statistic``), and layer means a run
did not log (``stats.per_layer``) from its ``tables/<finding>_heads.csv`` as
the nanmean over each layer's heads (:mod:`attnsim.analysis.runs`), so it
works across models (a shallower model has NaN in the deeper rows),
checkpoints and corpora.

Comparability: two runs' statistics mean the same thing only when they were
measured on windows of the same length (tag ``attnsim.seq_len``: CSM values,
distances and chance levels all depend on T) and with the same statistic
definitions (tag ``attnsim.stats_definition``, the code's definition
version, and the params ``stats.high_rule`` with its threshold
``stats.top_fraction`` or ``stats.zscore``, ``stats.include_special``,
``stats.normalise``, ``stats.short_range``). Runs that differ are refused
with a message listing the differences, unless ``force``. Unfinished or
partial runs are refused unless ``force`` too; runs without statistics and
sweep parents, fine-tuning and comparison runs are always refused.

Output: the table (the command line prints it), as CSV, and as a comparison run (tag
``attnsim.kind=compare``, MLflow experiment ``compare`` unless told otherwise)
holding ``comparison.csv``, ``runs.csv`` (which column is which run: id, name, model, corpus, windows, T,
and how each was measured: capture path, statistics path, attention implementation) and one
figure per statistic under ``figures/compare/`` (one line per run over
layers, the chance level dotted where the statistic has one).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from attnsim.analysis.listing import measured_windows
from attnsim.analysis.runs import LoggedRun, run_id_list
from attnsim.errors import AttnsimError
from attnsim.keys import RunKind, Tag

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas

log = logging.getLogger(__name__)

NOT_MEASUREMENTS = tuple(kind.value for kind in RunKind if not kind.is_measurement)
MEAN_ROW = "mean"


class ComparisonError(AttnsimError):
    """The runs cannot be put side by side (unknown, unfinished, without statistics, or not comparable)."""


def _definition(run: Any) -> Dict[str, Optional[str]]:
    """What a run's statistics mean: window length and statistic definitions (see module docstring)."""
    tags, params = run.data.tags, run.data.params
    rule = params.get("stats.high_rule")
    return {
        Tag.SEQ_LEN.value: tags.get(Tag.SEQ_LEN.value),
        Tag.STATS_DEFINITION.value: tags.get(Tag.STATS_DEFINITION.value),
        "stats.high_rule": rule,
        "stats.zscore" if rule == "zscore" else "stats.top_fraction": params.get("stats.zscore" if rule == "zscore" else "stats.top_fraction"),
        "stats.include_special": params.get("stats.include_special"),
        "stats.normalise": params.get("stats.normalise"),
        "stats.short_range": params.get("stats.short_range"),
    }


def check_comparable(runs: Sequence[Any], force: bool = False) -> List[str]:
    """Differences in what the runs' statistics mean, one line each (empty when comparable).

    Raises:
        ComparisonError: there are differences and ``force`` is false.
    """
    definitions = [_definition(run) for run in runs]
    keys = list(dict.fromkeys(k for d in definitions for k in d))
    problems = []
    for key in keys:
        values = [d.get(key) for d in definitions]
        if len(set(values)) > 1:
            listing = "; ".join(f"{run.info.run_id[:8]} '{run.info.run_name}': {value}" for run, value in zip(runs, values))
            problems.append(f"{key} differs ({listing})")
    if problems and not force:
        raise ComparisonError(
            "These runs' statistics are not comparable: "
            + "; ".join(problems)
            + ". CSM values, distances and chance levels depend on the window length and on "
            "the statistic definitions, so side by side they would mislead. Compare runs measured with the same corpus.seq_len and stats.* settings, "
            "or pass --force (force=True) to put them side by side anyway."
        )
    return problems


#: The description of the experiment that ``attnsim compare`` logs its comparisons into (shown above its runs).
COMPARE_DESCRIPTION = (
    "Comparisons made by `attnsim compare`: each run holds `comparison.csv` (the layer means of every statistic, one column "
    "per compared run), `runs.csv` (which run each column is) and figures of them; its tags name the compared runs."
)


def _label_runs(runs: Sequence[Any], by_step: bool) -> List[str]:
    """Column names: ``step N`` for sweep children, else run names; runs sharing a name are told
    apart by corpus, else by model (the first tag that differs among them), else by run id."""
    labels = []
    for run in runs:
        step = run.data.tags.get(Tag.GLOBAL_STEP.value)
        labels.append(f"step {step}" if by_step and step is not None else (run.info.run_name or run.info.run_id[:8]))
    out = list(labels)
    for label in set(labels):
        group = [i for i, other in enumerate(labels) if other == label]
        if len(group) == 1:
            continue
        for tag in (Tag.CORPUS.value, Tag.MODEL.value):
            values = [str(runs[i].data.tags.get(tag)) for i in group]
            if len(set(values)) == len(values):
                for i, value in zip(group, values):
                    out[i] = f"{label} {value}"
                break
        else:
            for i in group:
                out[i] = f"{label} [{runs[i].info.run_id[:6]}]"
    return out


def statistics_table(runs: Sequence[Any], labels: Sequence[str], client: Any = None):
    """Per-layer and model-mean statistics of ``runs`` side by side.

    Only metrics of the findings a run lists in its ``findings`` param are read. Layer means a run
    did not log as metrics (``stats.per_layer``) are read from its heads tables through ``client``
    (:meth:`attnsim.analysis.runs.LoggedRun.means`); without ``client``, metrics only.

    Returns:
        DataFrame with index (``statistic`` = ``finding/stat``, ``layer`` = ``L00``.. or ``mean``)
        and one float column per run, named by ``labels``; NaN where a run has no value.

    Raises:
        ComparisonError: a run has no per-layer statistics.
    """
    import pandas as pd

    columns: Dict[str, Dict[Tuple[str, str], float]] = {}
    for run, label in zip(runs, labels):
        logged = LoggedRun.of(run, client)
        values: Dict[Tuple[str, str], float] = {}
        for key, value in logged.means().items():
            values[(key.name, f"L{key.layer:02d}" if key.layer is not None else MEAN_ROW)] = value
        if not any(layer != MEAN_ROW for _, layer in values):
            raise ComparisonError(
                f"Run {run.info.run_id} ('{run.info.run_name}') has no per-layer statistics (no finding/statistic/LNN metrics of its findings). Give runs of `attnsim run` or `attnsim sweep` children."
            )
        columns[label] = values
    rows = sorted({row for values in columns.values() for row in values}, key=lambda r: (r[0], r[1] == MEAN_ROW, r[1]))
    index = pd.MultiIndex.from_tuples(rows, names=["statistic", "layer"])
    return pd.DataFrame({label: [values.get(row, float("nan")) for row in rows] for label, values in columns.items()}, index=index)


def select_runs(
    tracker: Any, run_ids: Sequence[str] = (), experiment: Optional[str] = None, parent: Optional[str] = None, force: bool = False
) -> Tuple[List[Any], str]:
    """The runs to compare and a description of the choice.

    Raises:
        ComparisonError: none or more than one way of choosing was given; an id or experiment is
            unknown; nothing is left to compare; a chosen run is unfinished or partial (unless ``force``)
            or is not a measurement run.
    """
    run_ids = run_id_list(run_ids, ComparisonError)
    chosen = [bool(run_ids), experiment is not None, parent is not None]
    ways = "run ids (attnsim compare ID ID ...; compare([ID, ID]) in Python), --experiment NAME (experiment=), or --parent SWEEP_RUN_ID (parent=)"
    if sum(chosen) == 0:
        raise ComparisonError(f"No runs to compare were given. Choose them in one way: {ways}.")
    if sum(chosen) > 1:
        raise ComparisonError(f"Choose the runs in one way only, not several: {ways}.")
    client = tracker.client
    if run_ids:
        twice = sorted({r for r in run_ids if list(run_ids).count(r) > 1})
        if twice:
            raise ComparisonError(f"Run {', '.join(twice)} is given more than once; each run is one column. Give each run id once.")
        runs = []
        for run_id in run_ids:
            try:
                runs.append(client.get_run(run_id))
            except Exception as exc:  # noqa: BLE001 - MlflowException for unknown ids
                raise ComparisonError(
                    f"No run '{run_id}' in the tracking store {tracker.uri}. Check the id (the MLflow UI shows it) or point --uri / MLFLOW_TRACKING_URI at the right store."
                ) from exc
        source = "runs"
        described = "the runs given"
    elif experiment is not None:
        found = client.get_experiment_by_name(experiment)
        if found is None:
            names = sorted(e.name for e in client.search_experiments())
            raise ComparisonError(f"No MLflow experiment '{experiment}' in {tracker.uri}. Experiments there: {', '.join(names) or '(none)'}.")
        candidates = client.search_runs([found.experiment_id], filter_string="attributes.status = 'FINISHED'", order_by=["attributes.start_time ASC"])
        runs = [
            r
            for r in candidates
            if RunKind.of(r.data.tags).is_measurement and Tag.STATS_DEFINITION.value in r.data.tags and r.data.tags.get(Tag.PARTIAL.value) != "true"
        ]
        source = f"experiment:{experiment}"
        described = f"MLflow experiment '{experiment}'"
    else:
        try:
            parent_run = client.get_run(parent)
        except Exception as exc:  # noqa: BLE001
            raise ComparisonError(f"No run '{parent}' in the tracking store {tracker.uri}; --parent takes the run id `attnsim sweep` printed.") from exc
        parent_kind = RunKind.of(parent_run.data.tags)
        if parent_kind is not RunKind.SWEEP:
            raise ComparisonError(
                f"Run {parent} ('{parent_run.info.run_name}') is a {parent_kind.value} run, not a sweep's parent run; --parent takes the run id "
                "`attnsim sweep` printed. To compare measurement runs, give their ids (attnsim compare ID ID ...) or --experiment NAME."
            )
        children = client.search_runs(
            [parent_run.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent}' AND attributes.status = 'FINISHED'"
        )
        runs = sorted(children, key=lambda r: (int(r.data.tags.get(Tag.GLOBAL_STEP.value, 0)), r.info.start_time))
        source = f"parent:{parent}"
        described = f"sweep {parent}"
    if not runs:
        raise ComparisonError(f"Nothing to compare: {described} has no finished measurement runs.")
    for run in runs:
        kind = RunKind.of(run.data.tags)
        if not kind.is_measurement:
            hint = f" Use --parent {run.info.run_id} to compare its children." if kind is RunKind.SWEEP else ""
            raise ComparisonError(
                f"Run {run.info.run_id} ('{run.info.run_name}') is a {kind.value} run, not a measurement; it has no per-layer statistics of its own.{hint}"
            )
        partial = run.data.tags.get(Tag.PARTIAL.value) == "true"
        unfinished = run.info.status != "FINISHED" or partial
        if unfinished and not force:
            raise ComparisonError(
                f"Run {run.info.run_id} ('{run.info.run_name}') is {run.info.status}{' with partial statistics' if partial else ''}; its statistics cover only part of its corpus. Re-run it, or pass --force to include it anyway."
            )
    return runs, source


def _runs_legend(runs: Sequence[Any], labels: Sequence[str]):
    import pandas as pd

    rows = []
    for run, label in zip(runs, labels):
        tags = run.data.tags
        rows.append(
            {
                "column": label,
                "run_id": run.info.run_id,
                "run_name": run.info.run_name,
                "status": run.info.status,
                "model": tags.get(Tag.MODEL.value),
                "global_step": tags.get(Tag.GLOBAL_STEP.value),
                "corpus": tags.get(Tag.CORPUS.value),
                "corpus_hash": (tags.get(Tag.CORPUS_HASH.value) or "")[:12],
                "windows": measured_windows(run),  # measured/planned for a run that did not finish (compared with --force)
                "seq_len": tags.get(Tag.SEQ_LEN.value),
                # how it was measured: equal statistics within float32 rounding, but a reader tracing a difference asks
                "capture_path": tags.get(Tag.CAPTURE_PATH.value),
                "statistics_path": tags.get(Tag.STATISTICS_PATH.value),
                "attn_implementation": tags.get(Tag.ATTN_IMPLEMENTATION.value),
            }
        )
    return pd.DataFrame(rows)


def _figures(table: Any):
    """Yield (artifact path, figure, whether it is laid out by hand): one per statistic that is not itself a chance level."""
    from attnsim.plots.common import has_fixed_layout
    from attnsim.plots.compare import layer_comparison

    statistics = list(dict.fromkeys(table.index.get_level_values("statistic")))
    for statistic in statistics:
        if statistic.endswith("_chance"):
            continue
        block = table.xs(statistic, level="statistic")
        layers = block.drop(index=MEAN_ROW, errors="ignore")
        means = block.loc[MEAN_ROW] if MEAN_ROW in block.index else None
        chance = None
        if f"{statistic}_chance" in statistics:
            chance = table.xs(f"{statistic}_chance", level="statistic").drop(index=MEAN_ROW, errors="ignore").reindex(layers.index)
        name = statistic.replace("/", "_")
        figure = layer_comparison(layers, statistic, chance, means)
        yield f"figures/compare/{name}.png", figure, has_fixed_layout(figure)


def _write_csv(table: pandas.DataFrame, csv_path: str) -> None:
    """Write ``table`` as CSV to ``csv_path`` (``~`` expanded), creating missing folders.

    Raises:
        ComparisonError: ``csv_path`` is a folder or cannot be written.
    """
    target = Path(csv_path).expanduser()
    try:
        if target.is_dir():
            raise IsADirectoryError(21, "it is a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(target)
    except OSError as exc:
        raise ComparisonError(
            f"Cannot write the table to {target}: {exc.strerror or exc}. Give --csv a file in a folder you can write to (missing folders are created)."
        ) from exc


def compare(
    run_ids: Optional[Sequence[str]] = None,
    experiment: Optional[str] = None,
    parent: Optional[str] = None,
    force: bool = False,
    csv_path: Optional[str] = None,
    log_run: bool = True,
    log_experiment: str = "compare",
    uri: Optional[str] = None,
) -> pandas.DataFrame:
    """Per-layer statistics of several runs side by side (see the module docstring).

    Args:
        run_ids: runs to compare, in column order; or
        experiment: every finished measurement run of this MLflow experiment, oldest first; or
        parent: the finished children of this sweep run, by global step.
        force: put runs side by side even when their statistics are not comparable or unfinished.
        csv_path: also write the table there as CSV.
        log_run: log the table, the run legend and the figures as a comparison run.
        log_experiment: MLflow experiment of the comparison run.
        uri: tracking store (default: ``$MLFLOW_TRACKING_URI``, else ``./mlruns/mlflow.db``).

    Example (two runs of the bundled MiniLM on the same windows, one of them its random-weights control;
    ``tests/test_docstring_examples.py`` runs it):

        >>> import attnsim
        >>> trained = attnsim.run("csm", ["corpus.limit=2", "corpus.seq_len=32", "tracking.figures=false", "plots.examples=0", "trainer.progress_bar=false"])
        >>> control = attnsim.run("csm", ["corpus.limit=2", "corpus.seq_len=32", "tracking.figures=false", "plots.examples=0", "trainer.progress_bar=false", "model.init=random"])
        >>> table = attnsim.compare([trained.run_id, control.run_id])
        >>> table.loc["distance/short_range_share"].shape  # (the model mean and 6 layer means) x runs
        (7, 2)

    Returns:
        index (``statistic``, ``layer``), one column per run (``table.attrs["runs"]``
            maps columns to run ids, models and corpora; ``table.attrs["comparison_run_id"]`` is the
            comparison run, when logged, in experiment ``table.attrs["comparison_experiment_id"]`` of store
            ``table.attrs["tracking_uri"]``; ``table.attrs["differences"]`` lists what ``force`` overrode).

    Raises:
        ComparisonError: see :func:`select_runs`, :func:`check_comparable`, :func:`statistics_table`; or ``csv_path`` cannot be written.
        TrackingError: the store cannot be used.
    """
    import attnsim
    from attnsim.tracking.store import existing_tracker

    tracker = existing_tracker(uri)
    runs, source = select_runs(tracker, run_ids, experiment, parent, force)
    differences = check_comparable(runs, force)
    for line in differences:
        log.warning("compared anyway (--force): %s", line)
    labels = _label_runs(runs, by_step=parent is not None)
    table = statistics_table(runs, labels, tracker.client)
    legend = _runs_legend(runs, labels)
    table.attrs["runs"] = legend.to_dict("records")
    table.attrs["differences"] = differences
    if csv_path:
        _write_csv(table, csv_path)
    if log_run:
        first = runs[0].data.tags
        tags = {
            Tag.KIND.value: RunKind.COMPARE.value,
            Tag.COMPARE_SOURCE.value: source,
            Tag.COMPARE_RUNS.value: ",".join(r.info.run_id for r in runs),
            Tag.COMPARE_FORCED.value: "true" if differences else "false",
            Tag.VERSION.value: attnsim.__version__,
        }
        if not differences:
            tags.update({k: first[k] for k in (Tag.SEQ_LEN.value, Tag.STATS_DEFINITION.value) if k in first})
        with tracker.run(log_experiment, f"compare {len(runs)} runs", tags, description=COMPARE_DESCRIPTION) as sink:
            sink.log_table(table.reset_index(), "comparison.csv")
            sink.log_table(legend, "runs.csv")
            if differences:
                sink.log_text("\n".join(differences) + "\n", "differences.txt")
            for path, figure, fixed in _figures(table):
                sink.log_figure(figure, path, fixed_layout=fixed)
        table.attrs["comparison_run_id"] = sink.run_id
        table.attrs["comparison_experiment_id"] = tracker.experiment_id(log_experiment)
        table.attrs["tracking_uri"] = tracker.uri
    return table


def format_table(table: Any, digits: int = 4) -> str:
    """The table as fixed-width text (all rows and columns, ``digits`` significant digits)."""
    import pandas as pd

    with pd.option_context("display.width", 250, "display.max_rows", None, "display.max_columns", None):
        return table.to_string(float_format=lambda v: f"{v:.{digits}g}")
