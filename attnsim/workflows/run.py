"""The measurement workflow (``attnsim run``, :func:`run`): config → data → capture → stats → findings → tracking.

The kind of run (text, images, gradients, encoder–decoder, interventions) is chosen once, in
:func:`prepare`, by :func:`attnsim.workflows.kinds.choose_kind`; this module then calls the kind's hooks
(inputs, model, predict) and never asks which kind it holds. Figures are drawn by each finding's
``figures``, in helper processes where the machine allows (:mod:`attnsim.workflows.figures`), and handed
to the tracking sink.

Every check that can fail on bad input (config, tracking store, model config,
tokenizer, corpus) runs before the model weights are loaded and before the
MLflow run is created.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

from attnsim.capture.load import ModelInfo, check_dense_fits, choose_capture_path, inspect_model
from attnsim.config import load_config, to_yaml
from attnsim.data.corpus import MeasuredCorpus
from attnsim.errors import ConfigError
from attnsim.findings.base import Finding, FindingContext, Needs, reduce_findings
from attnsim.findings.examples import ExampleRecorder
from attnsim.findings.registry import FINDINGS
from attnsim.keys import RunKind, Stage, Tag
from attnsim.plots.common import has_fixed_layout
from attnsim.results import Summary
from attnsim.stats.pairs.kernels import requested as compiled_requested
from attnsim.tracking import summaries as tables
from attnsim.tracking.note import describe_run
from attnsim.tracking.sink import RunSink, check_key, run_key
from attnsim.tracking.store import NOTE_TAG, Tracker, api_call, measure_params
from attnsim.workflows.common import (
    DatasetInput,
    Interrupted,
    corpus_source,
    dataset_name,
    log_datasets,
    open_tracker,
    run_tags,
    seed_and_threads,
)
from attnsim.workflows.figures import log_figures
from attnsim.workflows.kinds import MeasurementKind, choose_kind
from attnsim.workflows.loop import check_shards, distributed, global_rank, make_trainer, name_progress_bar, predict_loop
from attnsim.workflows.startup import freeze_if_exiting_soon

log = logging.getLogger(__name__)

__all__ = [
    "RunResult",
    "Prepared",
    "Interrupted",
    "prepare",
    "execute",
    "run",
    "build_findings",
    "build_module",
    "log_results",
    "headline_metrics",
]


@dataclass
class RunResult:
    """What a finished measurement run produced (:func:`run`, ``attnsim run``); ``attnsim.RunResult``.

    A run that fails or is interrupted raises instead (after ending the MLflow run FAILED or
    KILLED), so a returned result is always a FINISHED run. These fields are stable.

    Attributes:
        run_id: the MLflow run id (32 hex digits).
        experiment_id: id of the MLflow experiment holding the run.
        tracking_uri: the tracking store it was logged to (``attnsim ui --uri URI`` serves it).
        summaries: finding name -> :class:`~attnsim.results.Summary`: ``scalars``
            statistic -> (layer, head) tensor, ``profiles`` name -> (layer, head, K) tensor.
        windows: number of windows measured (each ``corpus.seq_len`` tokens, or an image's patches).
        timings: seconds spent per stage (:class:`~attnsim.keys.Stage`: ``config``, ``windows``, ``tracker``,
            ``setup``, ``load_model``, ``open_run``, ``predict``, ``summarise``, ``log``, ``figures``; ``imports``
            from the command line; ``reduce`` in a DDP run), their ``total`` and the ``unattributed`` rest.
        metrics: per statistic, without the per-head values: model means (``csm/mean``: mean
            over layers and heads), layer means (``csm/mean/L03``, layers 0-indexed, mean over heads)
            of every statistic (logged only for ``stats.per_layer``; the rest are in the heads tables)
            and a finding's corpus-level numbers; NaN where undefined.
        status: the MLflow run status, ``FINISHED``.
        run_name: the MLflow run name (``tracking.run_name``, else the experiment's name).
        experiment: name of the MLflow experiment (``tracking.experiment``).
        rank: this process's global rank in a distributed run (``trainer.strategy=ddp``), 0 otherwise.
            Only rank 0 creates and logs the run; a result of rank > 0 has an empty ``run_id`` and
            ``experiment_id``, no summaries or metrics, and status ``NOT_LOGGED``.
    """

    run_id: str
    experiment_id: str
    tracking_uri: str
    summaries: Dict[str, Summary]
    windows: int
    timings: Dict[str, float] = field(default_factory=dict)
    metrics: Dict[str, float] = field(default_factory=dict)
    status: str = "FINISHED"
    run_name: str = ""
    experiment: str = ""
    rank: int = 0

    def __repr__(self) -> str:
        """One line (a notebook cell or ``print`` shows it): the run, its findings and counts, not every tensor."""
        findings = ", ".join(self.summaries) or "none"
        return (
            f"RunResult(run_id={self.run_id!r}, run_name={self.run_name!r}, status={self.status!r}, windows={self.windows}, "
            f"findings=[{findings}], metrics={len(self.metrics)}, experiment={self.experiment!r}, tracking_uri={self.tracking_uri!r})"
        )


@dataclass
class Prepared:
    """Everything checked and built before the model weights load."""

    cfg: DictConfig
    tracker: Tracker
    info: ModelInfo
    tokenizer: object
    corpus: MeasuredCorpus
    finding_types: List[type]
    interventions: Optional[object] = None  # attnsim.workflows.interventions.InterventionSetup of an ablation/patching run
    timings: Dict[str, float] = field(default_factory=dict)  # Stage.WINDOWS and Stage.TRACKER, seconds
    kind: Optional[MeasurementKind] = None  # the kind of run (attnsim.workflows.kinds.choose_kind)


def prepare(cfg: DictConfig) -> Prepared:
    """All input checks and the windows, with no model weights loaded and no run created.

    Raises:
        AttnsimError subclasses naming the problem and its fix.
    """
    accelerator = cfg.trainer.accelerator
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={accelerator} but no CUDA GPU is visible to torch on this machine. Use trainer.accelerator=auto (GPU when present, else CPU) or cpu."
        )
    if accelerator == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("trainer.accelerator=mps but Apple's MPS backend is not available here. Use trainer.accelerator=auto or cpu.")
    if cfg.task != "measure":
        raise ConfigError(
            f"Experiment '{cfg.name}' is a {cfg.task} experiment (task: {cfg.task}); run it with `attnsim {cfg.task} {cfg.name}`, not `attnsim run` or `attnsim sweep`."
        )
    for key in cfg.tracking.tags:  # MLflow refuses keys over 250 characters, and attnsim never cuts one
        check_key(str(key))
    try:
        compiled_requested()  # ATTNSIM_COMPILED, read before the model loads
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    finding_types = [FINDINGS[name] for name in cfg.findings]
    declared = {kind.name: kind.statistics for kind in finding_types}
    tables.check_per_head(cfg.stats.per_head, declared)  # a misspelt headline statistic
    tables.check_per_layer(cfg.stats.per_layer, declared)
    from omegaconf import OmegaConf

    start = time.perf_counter()
    info = inspect_model(cfg.model.path, cfg.corpus.seq_len, OmegaConf.to_container(cfg.model.build))
    kind = choose_kind(cfg, info, finding_types)  # the one place the kind of run is decided (its refusals first: they name the run's shape)
    # the capture path's refusals (images, gradients, unreproducible scores) before any weights or run
    needs = Needs.of(finding_types)
    path = choose_capture_path(
        cfg.capture.path,
        cfg.corpus.seq_len,
        cfg.capture.blockwise_above,
        info,
        needs.attention,
        needs.gradients,
        cfg.stats.high_rule,
        list(needs.without_blockwise),
    )

    def check_fits(windows: int) -> None:  # before any weights or run, with the batch actually run (a corpus may hold fewer windows)
        check_dense_fits(info, cfg.corpus.seq_len, cfg.trainer.batch_size, path, needs.attention, windows, bool(needs.without_blockwise), compiled_requested())

    tokenizer, corpus = kind.inputs(cfg, info)
    counted = corpus is not None  # the windows are counted: checked before the tracking store is opened
    if counted:
        check_fits(len(corpus))
    windows = time.perf_counter()
    tracker = open_tracker(cfg.tracking.uri, cfg.tracking.experiment)
    tracked = time.perf_counter()
    # an intervention's inputs (prompt pairs, heads of an earlier run) count with the windows
    setup, corpus = kind.prepare(cfg, info, tokenizer, corpus, tracker, finding_types)
    if not counted and corpus is not None:  # a corpus made by the kind's prepare (an intervention's prompt pairs)
        check_fits(len(corpus))
    timings = {Stage.WINDOWS.value: windows - start + time.perf_counter() - tracked, Stage.TRACKER.value: tracked - windows}
    return Prepared(cfg, tracker, info, tokenizer, corpus, finding_types, setup, timings, kind)


def without_blockwise(findings: Sequence[Any]) -> List[str]:
    """Names of the findings (classes or instances) that have no blockwise form (``Finding.blockwise`` false)."""
    return list(Needs.of(findings).without_blockwise)


def build_findings(prepared: Prepared) -> List[Finding]:
    """One callback per finding of the experiment, all given one :class:`~attnsim.findings.base.FindingContext`."""
    cfg, info = prepared.cfg, prepared.info
    context = FindingContext(
        tokenizer=prepared.tokenizer,
        vocab_size=len(prepared.tokenizer),
        maps=cfg.maps,
        examples=cfg.plots.examples,
        vision=info.arch.vision,
        layout=prepared.corpus.layout,  # images: extra tokens and patch grid
        model=info,
    )
    # the corpus knows T: corpus.seq_len for text, extra tokens + patches for images, the target length of sentence pairs
    seq_len = prepared.corpus.measured_len
    return [finding(info.n_layers, info.n_heads, seq_len, cfg.stats, context) for finding in prepared.finding_types]


def build_module(prepared: Prepared, findings: List[Finding]) -> tuple:
    """Load the model and wrap it in the LightningModule of the run's kind (:meth:`~attnsim.workflows.kinds.MeasurementKind.load`).

    Returns:
        (LightningModule, model tags, whether predict needs gradients).

    Raises:
        ModelError: the weights cannot be loaded or do not match the image token layout.
        ConfigError: ``maps.target_class`` is not a class of the classifier.
    """
    module, model_tags = prepared.kind.load(prepared, findings)
    return module, model_tags, not prepared.kind.inference_mode


def log_results(sink: RunSink, cfg: DictConfig, findings: List[Finding], recorder: Optional[ExampleRecorder], partial: bool = False) -> tuple:
    """Summarise every finding that did not fail and log metrics, tables and (unless partial) figures.

    The metrics and tables are logged while the figure helpers draw (:func:`~attnsim.workflows.figures.log_figures`
    runs the logging in this process, which would otherwise wait for them), so their seconds overlap:
    ``log`` is the seconds spent logging, ``figures`` the seconds the figures took beyond it. If a
    finding's summary raises, the summaries made before it are logged first (nothing is lost).

    Returns:
        (summaries by finding name, seconds spent summarising, logging and drawing).
    """
    summaries: Dict[str, Summary] = {}
    timings = {"summarise": 0.0, "log": 0.0, "figures": 0.0}

    def log_summaries() -> None:
        start = time.perf_counter()
        for name, summary in summaries.items():
            _log_summary(sink, cfg, name, summary)
        sink.log_metrics({run_key("windows"): float(max((f.windows for f in findings), default=0))})
        sink.flush()  # metrics are buffered and sent in batches of 1,000 (and by the run's end on failure)
        timings["log"] += time.perf_counter() - start

    try:
        for finding in findings:
            if finding.error is not None or finding.windows == 0:
                continue
            start = time.perf_counter()
            summary = finding.summarise()
            timings["summarise"] += time.perf_counter() - start
            summaries[finding.name] = summary
    except BaseException:
        log_summaries()
        raise
    examples = recorder.examples if recorder is not None else None
    if cfg.tracking.figures and not partial:
        start = time.perf_counter()
        jobs = [(finding, summaries[finding.name]) for finding in findings if finding.name in summaries]
        log_figures(sink, jobs, examples, cfg.plots, f"attnsim explorer: {cfg.name}, run {sink.run_id}", has_fixed_layout, meanwhile=log_summaries)
        timings["figures"] += time.perf_counter() - start - timings["log"]
    else:
        log_summaries()
    if cfg.tracking.figures and cfg.plots.explorer and recorder is not None and not partial:
        from attnsim.plots.explorer import explorer_from_examples

        start = time.perf_counter()
        page = explorer_from_examples(examples, cfg.plots.max_tokens, f"attnsim explorer: {cfg.name}, run {sink.run_id}")
        if page is not None:
            sink.log_text(page, "explorer.html")
        timings["figures"] += time.perf_counter() - start
    start = time.perf_counter()
    sink.wait_for_figures()  # the last figures' encoding and upload (in the background while others are drawn)
    timings["figures"] += time.perf_counter() - start
    return summaries, timings


def _log_summary(sink: RunSink, cfg: DictConfig, name: str, summary: Summary) -> None:
    """Log one finding's metrics (buffered) and tables."""
    sink.log_metrics(tables.summary_metrics(summary, cfg.stats.per_head, cfg.stats.per_layer))
    sink.log_series(tables.comparison_series(summary, cfg.stats.per_head, cfg.stats.per_layer))
    heads = tables.head_table(summary)
    sink.log_table(heads, f"tables/{name}_heads.csv")
    sink.log_table(heads, f"tables/{name}_heads.json")
    for key, profile in summary.profiles.items():
        sink.log_table(tables.profile_table(profile, value_name=key, index=summary.profile_index.get(key)), f"tables/{name}_{key}.csv")
    for path, frame in summary.tables.items():  # a finding's own tables: artifact path -> DataFrame
        sink.log_table(frame, path)
    # a finding's corpus-level numbers (no layer or head axis): logged as finding/name
    sink.log_metrics(tables.corpus_metrics(summary))


def execute(
    prepared: Prepared,
    parent_run_id: Optional[str] = None,
    run_name: Optional[str] = None,
    extra_tags: Optional[Dict[str, str]] = None,
    step: int = 0,
    extra_params: Optional[Dict[str, str]] = None,
    extra_metrics: Optional[Dict[str, float]] = None,
    started: Optional[float] = None,
    timings: Optional[Dict[str, float]] = None,
) -> RunResult:
    """Load the model, create the run, predict, summarise and log. See :func:`run`.

    Args:
        prepared: from :func:`prepare`.
        parent_run_id: nest the run under this run (a sweep's parent).
        run_name: the MLflow run name (default ``tracking.run_name``, else the experiment's name).
        extra_tags: tags added to (and overriding) :func:`~attnsim.workflows.common.run_tags`.
        step: MLflow step of every metric the run logs (a sweep child: its checkpoint's global step).
        extra_params: params logged beside :func:`~attnsim.tracking.store.measure_params`.
        extra_metrics: metrics logged at ``step`` beside the statistics.
        started: ``time.perf_counter()`` when the command or call began, the start of ``zz_run/time_total``;
            with it, ``timings`` and :func:`prepare`'s own (``windows``, ``tracker``) are logged. Default:
            now, and only the stages of this call are logged (a sweep's children share one prepare).
        timings: seconds of the stages before :func:`prepare` (``imports``, ``config``; :class:`~attnsim.keys.Stage`).
    """
    cfg = prepared.cfg
    if started is None:  # the clock starts now: stages before it (a sweep's shared prepare) are not this run's
        started, timings = time.perf_counter(), {}
    else:
        timings = {**(timings or {}), **prepared.timings}  # every stage: logged as zz_run/time_<stage>
    parts = _assemble(prepared, timings, extra_tags, run_name)
    if parts.rank != 0:  # DDP: rank 0 creates, logs and ends the one run; this process only measures its windows
        predict_loop(prepared.kind, parts.trainer, parts.module, parts.datamodule)
        reduce_findings(parts.findings)  # a collective: every rank, after its windows
        _raise_failed(parts.findings)
        return RunResult(
            "",
            "",
            prepared.tracker.uri,
            {},
            len(prepared.corpus),
            timings,
            status="NOT_LOGGED",
            run_name=parts.name,
            experiment=cfg.tracking.experiment,
            rank=parts.rank,
        )
    opened = time.perf_counter()
    with prepared.tracker.run(cfg.tracking.experiment, parts.name, parts.tags, parent_run_id, step, description=cfg.description) as sink:
        _log_inputs(sink, prepared, parts.findings, parent_run_id, extra_params)
        timings[Stage.OPEN_RUN.value] = time.perf_counter() - opened
        timings.update(_predict_logging_partial(sink, prepared, parts))
        freeze_if_exiting_soon()  # `attnsim run` only: the figures' garbage collections skip the model and windows
        summaries, spent = log_results(sink, cfg, parts.findings, parts.recorder)
        timings.update(spent)
        if extra_metrics:  # after the statistics: MLflow's compare page plots the first metric a run logged
            sink.log_metrics(extra_metrics)
        sink.flush()
        _describe(sink, prepared, summaries, parts.tags)
        failed = [f for f in parts.findings if f.error is not None]
        if failed:
            sink.set_tags({Tag.PARTIAL.value: "true", Tag.FAILED_FINDINGS.value: ",".join(f.name for f in failed)})
        _raise_failed(parts.findings)
        _log_timings(sink, started, timings)
    ended = prepared.tracker.client.get_run(sink.run_id).info
    return RunResult(
        sink.run_id,
        ended.experiment_id,
        prepared.tracker.uri,
        summaries,
        len(prepared.corpus),
        timings,
        metrics=headline_metrics(summaries),
        status=ended.status,
        run_name=ended.run_name or parts.name,
        experiment=cfg.tracking.experiment,
    )


@dataclass
class _Parts:
    """What :func:`execute` measures with: the findings (Lightning callbacks), the examples' recorder, the Trainer and this
    process's rank, the Lightning module and data module, the run's tags and name."""

    findings: List[Finding]
    recorder: Optional[ExampleRecorder]
    trainer: pl.Trainer
    rank: int
    module: pl.LightningModule
    datamodule: pl.LightningDataModule
    tags: Dict[str, str]
    name: str


def _assemble(prepared: Prepared, timings: Dict[str, float], extra_tags: Optional[Dict[str, str]], run_name: Optional[str]) -> _Parts:
    """Build the findings, the Trainer (first: the rank and the shards are known before the model loads), the model's
    module and the data module; name and tag the run. Adds ``load_model`` and ``setup`` to ``timings`` (seconds)."""
    cfg, kind = prepared.cfg, prepared.kind
    setup = time.perf_counter()
    seed_and_threads(cfg.seed, cfg.trainer.threads)
    findings = build_findings(prepared)
    # encoder–decoder findings keep their own example pairs; interventions' batches are not the capture's
    recorder = ExampleRecorder(cfg.plots.examples, prepared.tokenizer, cfg.plots.max_tokens) if cfg.plots.examples and kind.examples else None
    trainer = make_trainer(cfg, list(findings), inference_mode=kind.inference_mode)
    rank = global_rank(trainer)
    check_shards(trainer, len(prepared.corpus), cfg.trainer.batch_size)
    if recorder is not None and rank == 0:  # examples and figures are rank 0's alone
        trainer.callbacks.insert(len(findings), recorder)
    start = time.perf_counter()
    module, model_tags, _ = build_module(prepared, findings)
    timings[Stage.LOAD_MODEL.value] = time.perf_counter() - start
    timings[Stage.SETUP.value] = start - setup
    setup = time.perf_counter()
    datamodule = prepared.corpus.datamodule(cfg.trainer.batch_size, cfg.trainer.num_workers)
    tags = run_tags(cfg, prepared.info, prepared.corpus, model_tags)
    tags[Tag.KIND.value] = RunKind.MEASURE.value
    tags.update(extra_tags or {})
    name = run_name or cfg.tracking.run_name or default_run_name(cfg.name, tags)
    name_progress_bar(trainer, name)
    timings[Stage.SETUP.value] += time.perf_counter() - setup
    return _Parts(findings, recorder, trainer, rank, module, datamodule, tags, name)


def _log_inputs(sink: RunSink, prepared: Prepared, findings: List[Finding], parent_run_id: Optional[str], extra_params: Optional[Dict[str, str]]) -> None:
    """Before predict: the metric keys checked, the params, the config as ``config.yaml`` and the corpus as the run's dataset input."""
    cfg = prepared.cfg
    sink.check_keys(name for f in findings for name in f.metric_names())
    params = measure_params(cfg)
    if parent_run_id:  # a sweep child: its checkpoint's path is its tag attnsim.checkpoint, no compare axis (MLflow cuts it to 10 characters)
        params.pop("model.path", None)
    sink.log_params({**params, **(extra_params or {})})
    sink.log_text(to_yaml(cfg), "config.yaml")
    log_datasets(sink, [DatasetInput(dataset_name(cfg), prepared.corpus, corpus_source(cfg), "predict")])


def _predict_logging_partial(sink: RunSink, prepared: Prepared, parts: _Parts) -> Dict[str, float]:
    """Predict and reduce the findings' states (DDP: across ranks); the stage timings (``predict``, and ``reduce`` under DDP).

    Raises:
        BaseException: whatever stopped predict (Ctrl-C and SIGTERM too), after the statistics measured so far were
            logged with the tag ``attnsim.partial``.
    """
    start = time.perf_counter()
    spent = {}
    try:
        predict_loop(prepared.kind, parts.trainer, parts.module, parts.datamodule)
        predicted = time.perf_counter()
        reduce_findings(parts.findings)  # DDP: sum the states of every rank (each window counted once)
        if distributed():
            spent["reduce"] = time.perf_counter() - predicted  # logged as zz_run/time_reduce
    except BaseException:
        sink.set_tags({Tag.PARTIAL.value: "true"})
        try:
            log_results(sink, prepared.cfg, parts.findings, parts.recorder, partial=True)
        except Exception:  # noqa: BLE001 - the original error matters more
            log.exception("could not log the partial statistics")
        raise
    spent["predict"] = predicted - start
    return spent


def _describe(sink: RunSink, prepared: Prepared, summaries: Dict[str, Summary], tags: Dict[str, str]) -> None:
    """The run's description (MLflow's note): the way to its mosaics, tables and explorer; a failure is only logged."""
    cfg = prepared.cfg
    try:
        sink.set_tags({NOTE_TAG: describe_run(prepared.tracker.client, sink, summaries, cfg.stats.per_head, cfg.stats.per_layer, tags.get(NOTE_TAG, ""))})
    except Exception:  # noqa: BLE001 - a description is not worth failing a run for
        log.warning("could not write the description of run %s; it keeps how it was started", sink.run_id, exc_info=True)


def _log_timings(sink: RunSink, started: float, timings: Dict[str, float]) -> None:
    """Log every stage's seconds as ``zz_run/time_<stage>``, with the run's total since ``started`` and what no stage
    accounts for (``unattributed``); both are added to ``timings``."""
    total = time.perf_counter() - started
    timings[Stage.UNATTRIBUTED.value] = max(0.0, total - sum(timings.values()))
    timings[Stage.TOTAL.value] = total
    sink.log_metrics({run_key(f"time_{k}"): v for k, v in timings.items()})  # seconds


def _raise_failed(findings: List[Finding]) -> None:
    """Raise the error of the first finding that failed during predict (each keeps its own, :attr:`Finding.error`)."""
    failed = [f for f in findings if f.error is not None]
    if failed:
        raise failed[0].error  # type: ignore[misc]


def default_run_name(experiment: str, tags: Dict[str, str]) -> str:
    """A run's name when ``tracking.run_name`` is not set: the experiment's name and the model's short name
    (tag ``attnsim.model``), ``paper · all-MiniLM-L6-v2``; a random-weights control (tag ``attnsim.control=random``)
    is named apart from its trained twin, ``paper-random · all-MiniLM-L6-v2``."""
    name = f"{experiment}-random" if tags.get(Tag.CONTROL.value) == "random" else experiment
    model = tags.get(Tag.MODEL.value)
    return f"{name} · {model}" if model else name


def headline_metrics(summaries: Dict[str, Summary]) -> Dict[str, float]:
    """Model and layer means of every statistic (``finding/stat``, ``finding/stat/LNN``) and each finding's
    corpus-level numbers (``finding/name``): what a run logs, less the per-head values."""
    metrics: Dict[str, float] = {}
    for summary in summaries.values():
        metrics.update(tables.summary_metrics(summary, per_head=[]))
        metrics.update(tables.corpus_metrics(summary))
    return metrics


def run(experiment: str, overrides: Optional[List[str]] = None) -> RunResult:
    """Run experiment ``experiment`` with dot-list ``overrides`` and log it to MLflow; ``attnsim.run``.

    Example (two windows of 32 tokens of the bundled MiniLM; ``tests/test_docstring_examples.py`` runs it):

        >>> import attnsim
        >>> result = attnsim.run("csm", ["corpus.limit=2", "corpus.seq_len=32", "tracking.figures=false", "plots.examples=0", "trainer.progress_bar=false"])
        >>> result.status
        'FINISHED'
        >>> 0.0 <= result.metrics["distance/short_range_share"] <= 1.0  # model mean: share of high-CSM pairs at distance <= 4
        True
        >>> tuple(result.summaries["csm"].scalars["mean"].shape)  # (layer, head)
        (6, 12)
        >>> result  # doctest: +ELLIPSIS
        RunResult(run_id='...', run_name='csm · all-MiniLM-L6-v2', status='FINISHED', windows=2, findings=[csm, distance], metrics=..., experiment='csm', tracking_uri='sqlite:///...')

    Args:
        experiment: experiment name (``attnsim list``) or path to a YAML file.
        overrides: ``KEY=VALUE`` strings (``corpus.limit=64``) and group swaps (``corpus=text``),
            as on the command line.

    Returns:
        :class:`RunResult` of the FINISHED run: ids, tracking URI, windows, metrics, summaries.

    Raises:
        ConfigError, CorpusError, ModelError, TrackingError: bad input, before any model loads or run exists.
        Exception: any error during the run, after marking it FAILED (KILLED for Ctrl-C/SIGTERM).
    """
    if isinstance(overrides, (str, bytes)) or (overrides is not None and not all(isinstance(o, str) for o in overrides)):
        raise ConfigError(
            f"attnsim.run(..., overrides={overrides!r}): overrides must be a list of 'KEY=VALUE' strings, "
            "e.g. attnsim.run('csm', ['corpus.limit=64', 'tracking.figures=false'])."
        )
    with api_call(f"attnsim.run({experiment!r}, {list(overrides or [])!r})"):
        started = time.perf_counter()
        cfg = load_config(experiment, overrides, known_findings=FINDINGS)
        configured = {Stage.CONFIG.value: time.perf_counter() - started}
        return execute(prepare(cfg), started=started, timings=configured)
