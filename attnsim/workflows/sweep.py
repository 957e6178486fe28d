"""The sweep workflow (``attnsim sweep EXPERIMENT --checkpoints DIR_OR_RUN_ID``): one experiment over fine-tuning checkpoints.

The experiment runs once per checkpoint, plus the base model as step 0, each
run a child (MLflow nested run, tag ``mlflow.parentRunId``) of one parent run
(tag ``attnsim.kind=sweep``; each child ``attnsim.kind=sweep_child``). The windows are built once
(:func:`attnsim.workflows.run.prepare` with the base model's tokenizer) and reused by
every child, so every child carries the same ``attnsim.corpus_hash``; a
checkpoint whose vocabulary differs from the base model's is refused before
anything runs.

The parent logs every statistic's model mean (``csm/mean``) and layer means
(``csm/mean/L03``) with MLflow ``step`` = the checkpoint's global step (and
``sweep/global_step``), so the MLflow UI draws each as a curve over training.
A statistic's chance level (``csm/short_range_share_chance``) is logged at the
same steps under the same key prefix, so it sits in the statistic's chart
section; the parent's ``figures/sweep/<finding>.png`` draws each statistic over
the global step with its chance dashed on the same axes (and its layer means).

Each child is named by its checkpoint (``step-000050``; the base model is
``step-000000``), logs every metric at MLflow step = its global step, and
carries the step as the param ``attnsim.global_step`` (the alphabetically first
param, so the MLflow compare page's scatter plot takes it as its x axis) and
the metric ``sweep/global_step``.

Step 0 is a checkpoint of step 0 when the source has one (a randomly
initialised fine-tuning saves it); else ``--base``; else the ``base_model``
recorded in the checkpoints' ``attnsim_checkpoint.json``; else the
experiment's ``model.path``.

Resuming: the parent is identified by ``attnsim.sweep_key``, a hash of the
experiment name, the resolved checkpoint directory, the base model and the
sorted overrides. Running the same sweep again reopens that parent, skips
every checkpoint that already has a FINISHED child, and measures the rest;
a crash (or Ctrl-C) ends the parent FAILED (KILLED) with its finished children
kept. Children that a killed process (SIGKILL) left RUNNING are ended as
KILLED when the sweep is resumed.

Fanning out (``jobs`` > 1, ``attnsim sweep ... --jobs N``): up to N children are
measured at once, each in its own process (``concurrent.futures.ProcessPoolExecutor``
with the ``spawn`` start method), on the windows built once here. Each worker
process opens the tracking store itself and creates its child under the same
parent (tag ``mlflow.parentRunId``). The parent logs the children's curves only
after all of them end, in step order whatever the finish order, so a sweep
with ``--jobs 2`` logs what ``--jobs 1`` logs, to the float. With CUDA GPUs,
worker i sees one GPU, ``CUDA_VISIBLE_DEVICES`` = GPU ``i % n_gpus`` (of those
visible to the sweep). A child that fails lets the others that are running
finish (their results are kept and logged on the parent), cancels those not
started, and ends the parent FAILED with the child's error (KILLED for Ctrl-C
or SIGTERM, which also stops the workers); running the sweep again measures
the rest. The workers share the CPU cores: on a CPU-only machine, set
``trainer.threads`` to cores / N to avoid oversubscription (this may change
the last bits of the statistics against a run with other thread counts).

Unreadable checkpoints: a checkpoint that cannot be loaded, for any reason (no
weights file, a missing shard, a damaged or truncated file, weights that leave
parameters at random, a bad config or tokenizer), is recorded, not measured:
status ``unreadable: REASON`` in the result and ``sweep/runs.csv``, tags
``attnsim.sweep_unreadable`` (each step and reason) and
``attnsim.sweep_unreadable_count`` on the parent, no child run; the sweep
measures the others, one after another or in workers alike, and the parent ends
FINISHED (``attnsim sweep`` exits 3). When no checkpoint can be read, the parent
ends FAILED. Running the sweep again retries them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from attnsim.errors import AttnsimError, ConfigError, ModelError, WeightsError
from attnsim.keys import MetricKey, RunKind, Tag
from attnsim.workflows.sweep_workers import STEP_KEY, child_note, fan_out, measure

log = logging.getLogger(__name__)

KIND = RunKind.SWEEP.value


class SweepError(AttnsimError):
    """The sweep's checkpoints, base model or earlier attempt do not fit together."""


def check_jobs(jobs: Any) -> int:
    """``jobs`` as an int >= 1 (the number of children measured at once).

    Raises:
        SweepError: ``jobs`` is not a whole number of at least 1.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SweepError(
            f"jobs={jobs!r}: the number of children measured at once must be a whole number of at least 1 (e.g. --jobs 2); use 1 to measure them one after another."
        )
    return jobs


@dataclass
class SweepResult:
    """What a sweep produced.

    Attributes:
        parent_run_id, experiment_id, tracking_uri: where the parent run is.
        runs: one row per step: ``step`` (global step, int), ``checkpoint`` (model path),
            ``run_id`` (the FINISHED child), ``status`` (``measured`` now, ``skipped``: finished earlier, or
            ``unreadable: REASON``: a damaged checkpoint, not measured; the parent's tag ``attnsim.sweep_unreadable`` says why).
        metrics: index ``step``, one column per model-mean statistic (``csm/mean``, ...), as logged on the parent.
        unreadable: how many checkpoints could not be read (skipped; the parent's tag ``attnsim.sweep_unreadable_count``).
    """

    parent_run_id: str
    experiment_id: str
    tracking_uri: str
    runs: Any  # pandas.DataFrame
    metrics: Any  # pandas.DataFrame
    unreadable: int = 0


def checkpoint_folder(source: str) -> Optional[Tuple[List[Any], Path]]:
    """(checkpoints sorted by step, resolved folder) of the folder ``--checkpoints`` names
    (:func:`~attnsim.training.checkpoints.list_checkpoints`); None for a fine-tuning run's id, which only the tracking
    store can resolve. Reads no weights and imports nothing heavy.

    Raises:
        SweepError: ``source`` is neither an existing path nor an MLflow run id (32 hexadecimal digits).
        CheckpointError: the folder holds no checkpoint, or two claim one step.
    """
    from attnsim.training.checkpoints import list_checkpoints

    path = Path(source).expanduser()
    if path.exists():
        return list_checkpoints(path), path.resolve()
    if not re.fullmatch(r"[0-9a-f]{32}", source):
        raise SweepError(
            f"--checkpoints '{source}' is neither an existing directory nor an MLflow run id. Give the directory `attnsim finetune` printed, or its run id."
        )
    return None


def resolve_checkpoints(source: str, tracker: Any) -> Tuple[List[Any], Path]:
    """Checkpoints of ``source``: a checkpoint directory (or one checkpoint), or a fine-tuning run id.

    A run id is looked up in the tracking store; its ``attnsim.checkpoint_dir``
    tag names the directory.

    Returns:
        (checkpoints sorted by step, resolved directory).

    Raises:
        SweepError: ``source`` is neither an existing directory nor a run with checkpoints.
        CheckpointError: the directory holds no usable checkpoint.
    """
    from attnsim.training.checkpoints import list_checkpoints

    local = checkpoint_folder(source)
    if local is not None:
        return local
    try:
        run = tracker.client.get_run(source)
    except Exception as exc:  # noqa: BLE001 - MlflowException for unknown ids
        raise SweepError(
            f"--checkpoints '{source}' is not an existing directory, and no run with that id exists in {tracker.uri}. Check the id or the tracking store (tracking.uri / MLFLOW_TRACKING_URI)."
        ) from exc
    kind = RunKind.of(run.data.tags)
    if kind in (RunKind.SWEEP, RunKind.SWEEP_CHILD, RunKind.COMPARE, RunKind.REPORT):  # they carry a sweep's tags, not checkpoints of their own
        parent = run.data.tags.get("mlflow.parentRunId") if kind is RunKind.SWEEP_CHILD else None
        raise SweepError(
            f"Run {source} ('{run.info.run_name}') is a {kind.value} run, not a run of `attnsim finetune`; --checkpoints takes a "
            "fine-tuning run's id or its checkpoint directory"
            + (f" (its sweep's parent is {parent})" if parent else "")
            + ". To measure a sweep's checkpoints again, give the same fine-tuning run or directory: the sweep's parent run is reopened."
        )
    directory = run.data.tags.get(Tag.CHECKPOINT_DIR.value)
    if not directory:
        raise SweepError(
            f"Run {source} has no attnsim.checkpoint_dir tag, so it did not save checkpoints. Give a run of `attnsim finetune`, or the checkpoint directory itself."
        )
    path = Path(directory)
    if not path.is_dir():
        raise SweepError(
            f"Run {source} saved its checkpoints in '{directory}', which no longer exists on this machine. Copy them back or give their new directory."
        )
    return list_checkpoints(path), path.resolve()


def base_model(checkpoints: Iterable[Any], explicit: Optional[str], fallback: str) -> Optional[str]:
    """The model measured as step 0 (None when a step-0 checkpoint exists). See the module docstring.

    Raises:
        SweepError: the checkpoints record different base models and none was given.
    """
    checkpoints = list(checkpoints)
    if any(c.step == 0 for c in checkpoints):
        if explicit:
            raise SweepError("The checkpoints include a step-0 checkpoint, which is step 0 of the sweep; drop --base.")
        return None
    if explicit:
        return explicit
    recorded = {c.meta.get("base_model") for c in checkpoints if c.meta.get("base_model")}
    if len(recorded) > 1:
        raise SweepError(f"The checkpoints record different base models ({', '.join(sorted(recorded))}); name step 0 with --base.")
    return recorded.pop() if recorded else fallback


def sweep_key(experiment: str, directory: Path, base: Optional[str], overrides: Iterable[str]) -> str:
    """Deterministic identity of a sweep: SHA-256 (first 16 hex digits) of its inputs."""
    payload = json.dumps({"experiment": experiment, "checkpoints": str(directory), "base": base, "overrides": sorted(overrides)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def headline_from_run(run: Any, findings: Iterable[str], client: Any = None) -> Dict[str, float]:
    """The model and layer means of a finished child (``finding/stat`` and ``finding/stat/LNN``): as logged,
    and the layer means it did not log (``stats.per_layer``) from its heads tables through ``client``
    (:meth:`attnsim.analysis.runs.LoggedRun.means`), so a resumed sweep's parent gets every layer mean."""
    from attnsim.analysis.runs import LoggedRun

    return {key.format(): value for key, value in LoggedRun.of(run, client).means(findings).items()}


def _with_model(cfg: Any, path: str) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.merge(cfg, {"model": {"path": path}})


def _find_parent(tracker: Any, experiment_id: str, key: str) -> Optional[Any]:
    runs = tracker.client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{Tag.SWEEP_KEY}` = '{key}' AND tags.`{Tag.KIND}` = '{KIND}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def _finished_children(tracker: Any, experiment_id: str, parent_id: str) -> Dict[int, Any]:
    children = tracker.client.search_runs(
        [experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}' AND attributes.status = 'FINISHED'", order_by=["attributes.start_time ASC"]
    )
    done: Dict[int, Any] = {}
    for child in children:
        step = child.data.tags.get(Tag.SWEEP_STEP.value)
        if step is not None and int(step) not in done:
            done[int(step)] = child
    return done


def _end_abandoned_children(tracker: Any, experiment_id: str, parent_id: str) -> List[str]:
    """End children left RUNNING by a process that died (e.g. SIGKILL) as KILLED; return their ids."""
    from attnsim.tracking.sink import RunSink

    stale = tracker.client.search_runs([experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}' AND attributes.status = 'RUNNING'")
    for child in stale:
        RunSink(tracker.client, child.info.run_id).fail(
            RuntimeError("abandoned: the process measuring it ended without ending the run; found when the sweep was resumed"), status="KILLED"
        )
    return [child.info.run_id for child in stale]


def _logged_steps(tracker: Any, parent_id: str) -> set:
    return {int(m.step) for m in tracker.client.get_metric_history(parent_id, STEP_KEY)}


def _metrics_by_step(tracker: Any, parent_id: str, layers: bool = False) -> Any:
    """The parent's curves: index ``step``, one column per model mean (and per layer mean when ``layers``)."""
    import pandas as pd

    run = tracker.client.get_run(parent_id)
    columns: Dict[str, Dict[int, float]] = {}
    for key in sorted(run.data.metrics):
        parsed = MetricKey.try_parse(key)
        if key == STEP_KEY or (not layers and parsed is not None and not parsed.is_model_mean):
            continue
        columns[key] = {int(m.step): m.value for m in tracker.client.get_metric_history(parent_id, key)}
    frame = pd.DataFrame(columns)
    frame.index.name = "step"
    return frame.sort_index()


def _log_figures(sink: Any, curves: Any, findings: Iterable[str], title: str, dpi: int) -> None:
    """``figures/sweep/<finding>.png`` for every finding with curves (see :func:`attnsim.plots.sweep.sweep_curves`)."""
    from attnsim.plots.common import has_fixed_layout
    from attnsim.plots.sweep import sweep_curves

    for finding in findings:
        figure = sweep_curves(curves, finding, f"{title}: {finding}")
        if figure is not None:
            sink.log_figure(figure, f"figures/sweep/{finding}.png", dpi, fixed_layout=has_fixed_layout(figure))


def sweep(experiment: str, checkpoints: str, overrides: Optional[List[str]] = None, base: Optional[str] = None, jobs: int = 1) -> SweepResult:
    """Run ``experiment`` on every checkpoint of ``checkpoints`` and on the base model, as one parent run's children.

    Args:
        experiment: experiment name or YAML path (e.g. ``csm``).
        checkpoints: a directory of ``save_pretrained`` checkpoints (``step-NNNNNN``), one checkpoint,
            or the run id of an ``attnsim finetune`` run.
        overrides: dot-list overrides for every child (``corpus.limit=64``); ``model.path`` is set per child.
        base: model measured as step 0 (default: see the module docstring).
        jobs: children measured at once, each in its own process (one GPU each when there are GPUs);
            1 (default) measures them one after another in this process. See the module docstring.

    Example (the checkpoints of :func:`attnsim.finetune`'s example; ``tests/test_docstring_examples.py`` runs it):

        >>> import attnsim
        >>> tuned = attnsim.finetune(overrides=["corpus.limit=16", "corpus.seq_len=32", "trainer.batch_size=4", "trainer.max_steps=2",
        ...     "checkpoint.every_n_steps=1", "trainer.val_every_n_steps=1", "trainer.val_limit=4", "trainer.warmup_steps=1",
        ...     "trainer.progress_bar=false"])
        >>> result = attnsim.sweep("csm", tuned.checkpoint_dir, ["corpus.limit=2", "corpus.seq_len=32", "tracking.figures=false", "plots.examples=0", "trainer.progress_bar=false"])
        >>> result.metrics["distance/short_range_share"].index.tolist()  # one value per global step (0: the base model)
        [0, 1, 2]

    Returns:
        :class:`SweepResult`: parent run id, children (step, run id, measured/skipped/unreadable), model means by step,
        the number of unreadable checkpoints (a checkpoint that cannot be loaded, for any reason, is recorded and
        skipped; the others are measured and the parent ends FINISHED).

    Raises:
        ConfigError, CorpusError, ModelError, TrackingError, SweepError: bad input (also ``jobs`` < 1), before any run is created or reopened.
        SweepError: no checkpoint could be read (step 0 included); the parent ends FAILED with ``sweep/runs.csv`` giving each reason.
        Exception: any other error of a child, after ending it and the parent FAILED (KILLED for Ctrl-C/SIGTERM);
            a later call with the same arguments continues where this one stopped.
    """
    from attnsim.tracking.store import api_call

    with api_call(f"attnsim.sweep({experiment!r}, {checkpoints!r}, {list(overrides or [])!r}, base={base!r}, jobs={jobs!r})"):
        return _sweep(experiment, checkpoints, list(overrides or []), base, check_jobs(jobs))


def _children(cfg: Any, prepared: Any, entries: List[Tuple[int, str]]) -> Tuple[Dict[int, Any], Dict[int, str]]:
    """Each checkpoint's prepared run (step -> it, step 0's ``prepared`` included) and the checkpoints that cannot be
    read (step -> reason: a missing, incomplete or damaged folder, recorded and skipped).

    Raises:
        SweepError: a checkpoint's tokenizer differs from step 0's (every child must see the same windows).
    """
    from attnsim.capture.load import inspect_model, load_tokenizer

    vocab = prepared.tokenizer.get_vocab()
    children = {entries[0][0]: prepared}
    unreadable: Dict[int, str] = {}
    for step, path in entries[1:]:
        try:
            info = inspect_model(path, cfg.corpus.seq_len)
            tokenizer = load_tokenizer(info, cfg.corpus.seq_len)
        except (ModelError, ConfigError) as exc:  # a missing, damaged or incomplete folder; windows longer than its positions
            unreadable[step] = str(exc)
            log.warning("checkpoint '%s' (step %d) is skipped: %s", path, step, exc)
            continue
        if tokenizer.get_vocab() != vocab:
            raise SweepError(
                f"The tokenizer of checkpoint '{path}' (step {step}) differs from that of '{entries[0][1]}'; a sweep needs one tokenizer so that every child sees the same windows."
            )
        # the model's name (tag attnsim.model) says which checkpoint of which model; its path is attnsim.model_path
        children[step] = dataclasses.replace(prepared, cfg=_with_model(cfg, path), info=dataclasses.replace(info, name=f"{prepared.info.name} step {step}"))
    return children, unreadable


def _open_parent(tracker: Any, experiment_id: str, cfg: Any, prepared: Any, key: str, source: Tuple[str, Path, Optional[str]], entries: List[Tuple[int, str]]):
    """``(the parent's run context, the earlier parent or None)``: the sweep's parent run, reopened when it exists.
    ``source``: (``--checkpoints`` as given, the checkpoint directory, the base model or None).

    Raises:
        SweepError: the earlier parent measured other windows (the corpus changed).
    """
    from attnsim.tracking.store import NOTE_TAG, run_note
    from attnsim.workflows.common import run_tags

    checkpoints, directory, base_path = source
    parent = _find_parent(tracker, experiment_id, key)
    if parent is not None:
        earlier = parent.data.tags.get(Tag.CORPUS_HASH.value)
        if earlier != prepared.corpus.content_hash:
            raise SweepError(
                f"Sweep run {parent.info.run_id} (the same experiment, checkpoints and overrides) measured windows with content hash {str(earlier)[:12]}, "
                f"but the corpus now gives {prepared.corpus.content_hash[:12]}: the corpus changed. Restore it, or delete that run to start the sweep afresh."
            )
        if parent.info.status == "RUNNING":
            log.warning(
                "sweep run %s is marked RUNNING: another process may be running this sweep, or one died without ending it; continuing it", parent.info.run_id
            )
        return tracker.resume(parent.info.run_id), parent
    tags = run_tags(prepared.cfg, prepared.info, prepared.corpus)
    tags.update(
        {
            Tag.KIND.value: KIND,
            Tag.SWEEP_KEY.value: key,
            Tag.SWEEP_SOURCE.value: checkpoints,
            Tag.CHECKPOINT_DIR.value: str(directory),
            Tag.BASE_MODEL.value: str(base_path or entries[0][1]),
            Tag.SWEEP_STEPS.value: ",".join(str(step) for step, _ in entries),
            NOTE_TAG: run_note(
                cfg.description,
                [
                    f"Sweep of `{cfg.name}` over the checkpoints in `{directory}` (step 0: `{base_path or entries[0][1]}`); one child run per checkpoint, named by it."
                ],
            ),
        }
    )
    return tracker.run(cfg.tracking.experiment, f"sweep {cfg.name} · {prepared.info.name}", tags, description=cfg.description), None


def _sweep(experiment: str, checkpoints: str, overrides: List[str], base: Optional[str], jobs: int = 1) -> SweepResult:
    import pandas as pd

    from attnsim.config import load_config, to_yaml
    from attnsim.findings.registry import FINDINGS
    from attnsim.tracking.store import measure_params
    from attnsim.workflows.common import open_tracker
    from attnsim.workflows.run import prepare

    cfg = load_config(experiment, overrides, known_findings=FINDINGS)
    tracker = open_tracker(cfg.tracking.uri, cfg.tracking.experiment)  # a deleted experiment is refused before any model loads
    found, directory = resolve_checkpoints(checkpoints, tracker)
    base_path = base_model(found, base, str(cfg.model.path))
    entries: List[Tuple[int, str]] = ([(0, base_path)] if base_path is not None else []) + [(c.step, c.path) for c in found]
    key = sweep_key(cfg.name, directory, base_path, overrides)

    # windows once, with the step-0 model's tokenizer; every child reuses them
    prepared = prepare(_with_model(cfg, entries[0][1]))
    children, unreadable = _children(cfg, prepared, entries)  # unreadable: step -> why (recorded, and the sweep goes on)
    experiment_id = tracker.experiment_id(cfg.tracking.experiment)
    context, parent = _open_parent(tracker, experiment_id, cfg, prepared, key, (checkpoints, directory, base_path), entries)
    with context as parent_sink:
        parent_id = parent_sink.run_id
        if parent is None:
            parent_sink.log_params(measure_params(prepared.cfg))
            parent_sink.log_text(to_yaml(prepared.cfg), "config.yaml")
        else:  # checkpoints may have been added to the directory since (a fine-tuning still running)
            parent_sink.set_tags({Tag.SWEEP_STEPS.value: ",".join(str(step) for step, _ in entries)})
            for run_id in _end_abandoned_children(tracker, experiment_id, parent_id):
                log.warning("child run %s of sweep %s was left RUNNING by a process that died; ended it as KILLED", run_id, parent_id)
        try:
            rows = _measure_children(tracker, cfg, parent_sink, children, entries, unreadable, jobs, key, experiment_id)
        finally:  # also on a parent that ends FAILED
            _record_unreadable(tracker, parent_sink, parent, unreadable)
        runs = pd.DataFrame(rows, columns=["step", "checkpoint", "run_id", "status"])
        if len(unreadable) == len(entries):  # nothing to draw: the parent ends FAILED with the table of reasons
            parent_sink.log_table(runs, "sweep/runs.csv")
            raise SweepError(
                f"No checkpoint of the sweep could be read ({len(entries)} unreadable; sweep run {parent_id} ends FAILED): "
                + "; ".join(f"step {step}: {why}" for step, why in sorted(unreadable.items()))[:2000]
            )
        curves = _metrics_by_step(tracker, parent_id, layers=bool(cfg.tracking.figures))
        metrics_frame = curves[[c for c in curves.columns if getattr(MetricKey.try_parse(c), "is_model_mean", True)]]
        parent_sink.log_table(runs, "sweep/runs.csv")
        parent_sink.log_table(metrics_frame.reset_index(), "sweep/model_means.csv")
        if cfg.tracking.figures:
            _log_figures(parent_sink, curves, cfg.findings, f"sweep {cfg.name}", cfg.plots.dpi)
    return SweepResult(parent_id, experiment_id, tracker.uri, runs, metrics_frame, len(unreadable))


def _record_unreadable(tracker: Any, parent_sink: Any, parent: Optional[Any], unreadable: Dict[int, str]) -> None:
    """The parent's tags ``attnsim.sweep_unreadable_count`` (always) and ``attnsim.sweep_unreadable`` (each unreadable
    checkpoint's step and reason; removed from a reopened parent whose checkpoints now all read)."""
    parent_sink.set_tags({Tag.SWEEP_UNREADABLE_COUNT.value: str(len(unreadable))})
    if unreadable:
        parent_sink.set_tags({Tag.SWEEP_UNREADABLE.value: "; ".join(f"step {step}: {why}" for step, why in sorted(unreadable.items()))[:5000]})
    elif parent is not None and Tag.SWEEP_UNREADABLE.value in parent.data.tags:
        tracker.client.delete_tag(parent_sink.run_id, Tag.SWEEP_UNREADABLE.value)


def _measure_children(
    tracker: Any,
    cfg: Any,
    parent_sink: Any,
    children: Dict[int, Any],
    entries: List[Tuple[int, str]],
    unreadable: Dict[int, str],
    jobs: int,
    key: str,
    experiment_id: str,
) -> List[Dict[str, Any]]:
    """Measure every checkpoint not yet measured (``jobs`` at once), log its means on the parent at its step, and return
    one row per step (``sweep/runs.csv``). A checkpoint whose weights cannot be loaded (a
    :class:`~attnsim.errors.WeightsError`, raised before its child run is created) is added to ``unreadable`` and the
    others are measured.

    Raises:
        Exception: any other error of a child, after the other children ended (the parent then ends FAILED).
    """
    parent_id = parent_sink.run_id
    done = _finished_children(tracker, experiment_id, parent_id)
    logged = _logged_steps(tracker, parent_id)
    pending = [(step, path) for step, path in entries if step not in done and step not in unreadable]
    fanned: Dict[int, Tuple[str, Dict[str, float]]] = {}
    failure: Optional[BaseException] = None
    if jobs > 1 and len(pending) > 1:
        fanned, failure, lost = fan_out(children, pending, jobs, tracker.uri, parent_id, key)
        unreadable.update(lost)
    rows: List[Dict[str, Any]] = []
    for step, path in entries:
        if step in done:
            child_id, status = done[step].info.run_id, "skipped"
            metrics = headline_from_run(done[step], cfg.findings, tracker.client) if step not in logged else {}
        elif step in fanned:
            (child_id, metrics), status = fanned[step], "measured"
        elif failure is not None or step in unreadable:
            child_id = ""  # unreadable; or failed or cancelled: measured when the sweep is run again
        else:
            try:
                (child_id, metrics), status = measure(children[step], parent_id, step, path, key, child_note(children[step], parent_id, step, path)), "measured"
            except WeightsError as exc:
                unreadable[step], child_id = str(exc), ""
                log.warning("checkpoint '%s' (step %d) is skipped: %s", path, step, exc)
        if step in unreadable:
            rows.append({"step": step, "checkpoint": path, "run_id": "", "status": f"unreadable: {unreadable[step]}"})
            continue
        if not child_id:
            continue
        if step not in logged:
            parent_sink.log_metrics({**metrics, STEP_KEY: float(step)}, step=step)
            parent_sink.flush()
        rows.append({"step": step, "checkpoint": path, "run_id": child_id, "status": status})
    if failure is not None:
        raise failure
    return rows
