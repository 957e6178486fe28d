"""The fine-tuning workflow (``attnsim finetune``): a Lightning ``fit`` of an encoder with a sequence-classification head.

The default experiment ``finetune_bbc`` fine-tunes the bundled all-MiniLM-L6-v2
on the five BBC News categories. Documents are split into training and
validation sets by document, stratified by label and seeded
(:func:`attnsim.training.data.split_documents`); each document is cut into
windows by the same builder as every measurement run
(:func:`attnsim.data.windows.build_corpus`), each window labelled with its
document's label. The run logs ``train/loss``, ``train/accuracy``,
``train/lr`` per optimizer step and ``val/loss``, ``val/accuracy`` every
``trainer.val_every_n_steps`` steps and after the last one, the config keys a fit reads
(:func:`~attnsim.tracking.params.finetune_params`) as params and the tags of every attnsim run (plus
``attnsim.kind=finetune`` and ``attnsim.checkpoint_dir``).

Checkpoints (``checkpoint.every_n_steps`` and the last step) are
``save_pretrained`` directories ``step-NNNNNN`` under ``checkpoint.dir``
(default ``./checkpoints/<experiment>/<run id>``) that
``transformers`` loads directly and ``attnsim sweep`` measures. The Lightning module,
logger and checkpoint callback are in :mod:`attnsim.training`.

This module imports neither torch nor Lightning at import time, so that the
command line starts fast.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from attnsim.errors import ConfigError, ModelError
from attnsim.keys import RunKind, Tag
from attnsim.tracking.sink import run_key

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT = "finetune_bbc"


@dataclass
class FinetunePrepared:
    """Everything checked and built before weights load and before the MLflow run exists."""

    cfg: Any
    tracker: Any
    info: Any
    tokenizer: Any
    labels: List[str]
    train: Any  # attnsim.data.windows.Corpus
    val: Any  # attnsim.data.windows.Corpus
    checkpoint_dir: Optional[Path]  # None: ./checkpoints/<experiment>/<run id>


@dataclass
class FinetuneResult:
    """What a fine-tuning run produced.

    Attributes:
        run_id, experiment_id, tracking_uri: where the MLflow run is.
        checkpoint_dir: absolute directory holding the ``step-NNNNNN`` checkpoints.
        checkpoints: ``(global step, checkpoint directory)`` pairs, by step.
        metrics: the last value of every logged metric (``val/accuracy`` is a share in [0, 1], losses in nats).
        labels: class names, index = class id.
        seconds: wall time of the fit (and final validation), in seconds.
        windows: windows of each split (``train``, ``val``).
        documents: documents the windows of each split came from (a document is in one split only).
        categories: categories with windows in each split (of ``len(labels)``).
    """

    run_id: str
    experiment_id: str
    tracking_uri: str
    checkpoint_dir: str
    checkpoints: List[Tuple[int, str]]
    metrics: Dict[str, float]
    labels: List[str]
    seconds: float
    windows: Dict[str, int] = field(default_factory=dict)
    documents: Dict[str, int] = field(default_factory=dict)
    categories: Dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """``64 training windows (4 documents, 3 of 5 categories) / 16 validation windows (1 document, 1 of 5 categories)``."""

        def split(name: str, key: str) -> str:
            docs = self.documents.get(key, 0)
            return f"{self.windows.get(key, 0)} {name} windows ({docs} document{'' if docs == 1 else 's'}, {self.categories.get(key, 0)} of {len(self.labels)} categories)"

        return f"{split('training', 'train')} / {split('validation', 'val')}"


def validate_finetune(cfg: Any) -> None:
    """Check the fit-only keys (``trainer.*`` fit settings and ``checkpoint.*``).

    Raises:
        ConfigError: naming the key, its value and what is allowed.
    """
    t, c = cfg.trainer, cfg.checkpoint
    if t.max_steps < 1:
        raise ConfigError(f"Config key 'trainer.max_steps' is {t.max_steps}; give a positive number of optimizer steps, e.g. trainer.max_steps=200.")
    if c.every_n_steps < 1:
        raise ConfigError(
            f"Config key 'checkpoint.every_n_steps' is {c.every_n_steps}; give a positive number of steps between checkpoints, e.g. checkpoint.every_n_steps=50."
        )
    if t.val_every_n_steps < 1:
        raise ConfigError(f"Config key 'trainer.val_every_n_steps' is {t.val_every_n_steps}; give a positive number of steps between validations.")
    if not t.learning_rate > 0:
        raise ConfigError(f"Config key 'trainer.learning_rate' is {t.learning_rate}; give a positive learning rate, e.g. 5e-5.")
    if t.weight_decay < 0:
        raise ConfigError(f"Config key 'trainer.weight_decay' is {t.weight_decay}; give a value >= 0.")
    if not 0 <= t.warmup_steps <= t.max_steps:
        raise ConfigError(f"Config key 'trainer.warmup_steps' is {t.warmup_steps}; give a number of steps between 0 and trainer.max_steps={t.max_steps}.")
    if not 0.0 < t.val_fraction < 1.0:
        raise ConfigError(f"Config key 'trainer.val_fraction' is {t.val_fraction}; give a share of documents in (0, 1), e.g. 0.2.")
    if t.val_limit is not None and t.val_limit < 1:
        raise ConfigError(f"Config key 'trainer.val_limit' is {t.val_limit}; give a positive number of validation windows or null for all.")


def _checkpoint_dir(cfg: Any) -> Optional[Path]:
    if not cfg.checkpoint.dir:
        return None
    directory = Path(str(cfg.checkpoint.dir)).expanduser().resolve()
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"Config key 'checkpoint.dir' is '{directory}', which is a file; give a directory.")
    taken = sorted(p.name for p in directory.glob("step-*")) if directory.is_dir() else []
    if taken:
        raise ConfigError(
            f"Config key 'checkpoint.dir' is '{directory}', which already holds checkpoints ({', '.join(taken[:3])}{', ...' if len(taken) > 3 else ''}) of an earlier run; "
            "mixing two runs in one directory would make a sweep wrong. Give an empty directory, or leave checkpoint.dir=null for ./checkpoints/<experiment>/<run id>."
        )
    return directory


def prepare_finetune(cfg: Any) -> FinetunePrepared:
    """All input checks, the split and the windows; no weights loaded, no run created.

    Args:
        cfg: a resolved config from :func:`attnsim.config.load_config`.

    Raises:
        ConfigError, CorpusError, ModelError, TrackingError: bad input, naming the fix.
    """
    from attnsim.capture.load import inspect_model, load_tokenizer
    from attnsim.data.sources import read_documents
    from attnsim.data.windows import build_corpus
    from attnsim.training.data import label_names, split_documents
    from attnsim.workflows.common import open_tracker

    validate_finetune(cfg)
    checkpoint_dir = _checkpoint_dir(cfg)
    tracker = open_tracker(cfg.tracking.uri, cfg.tracking.experiment)  # a deleted experiment is refused before the model loads
    c, t = cfg.corpus, cfg.trainer
    info = inspect_model(cfg.model.path, c.seq_len)
    if info.arch.vision:
        raise ModelError(f"Model '{info.name}' is a vision model; `attnsim finetune` fine-tunes text encoders on labelled text.")
    tokenizer = load_tokenizer(info, c.seq_len)
    documents = read_documents(c.source, c.path, c.text_field, list(c.categories), c.encoding)
    labels = label_names(documents)
    train_docs, val_docs = split_documents(documents, t.val_fraction, cfg.seed)
    common = dict(
        drop_short=c.drop_short, min_tokens=c.min_tokens, shuffle=c.shuffle, seed=cfg.seed, language=c.language, keep_text=0
    )  # nothing drawn: no window text
    train = build_corpus(train_docs, tokenizer, c.seq_len, c.limit, **common)
    val = build_corpus(val_docs, tokenizer, c.seq_len, t.val_limit, **common)
    return FinetunePrepared(cfg, tracker, info, tokenizer, labels, train, val, checkpoint_dir)


def trainable_classifier(info: Any, labels: List[str], init: str = "pretrained", seed: int = 0):
    """``AutoModelForSequenceClassification`` on the encoder at ``info.path`` with ``len(labels)`` classes, to train
    (the frozen classifier that gradient maps explain is :func:`attnsim.capture.gradients.load_classifier`).

    The classification head is new (drawn under ``torch.manual_seed(seed)``);
    ``id2label``/``label2id`` come from ``labels``. ``init=random`` draws the
    whole model from the architecture's initialiser instead (training from scratch).

    Raises:
        ModelError: the architecture has no sequence-classification class, or the weights cannot be loaded.
    """
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    id2label = {i: label for i, label in enumerate(labels)}
    label2id = {label: i for i, label in id2label.items()}
    try:
        config = AutoConfig.from_pretrained(info.path, num_labels=len(labels), id2label=id2label, label2id=label2id, local_files_only=True)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            if init == "random":
                model = AutoModelForSequenceClassification.from_config(config)
            else:
                model = AutoModelForSequenceClassification.from_pretrained(info.path, config=config, local_files_only=True, ignore_mismatched_sizes=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"Could not build a sequence classifier from '{info.name}': {str(exc).splitlines()[0]}") from exc
    return model


def _fit_trainer(t: Any, logger: Any, saver: Any) -> Any:
    """The Lightning trainer of a fine-tuning run: ``t`` the ``trainer`` config group, ``logger`` the run's
    :class:`~attnsim.training.module.SinkLogger`, ``saver`` the :class:`~attnsim.training.module.PretrainedCheckpoint` callback."""
    import pytorch_lightning as pl

    from attnsim.progress import AttnsimProgressBar

    return pl.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        precision=t.precision,
        max_steps=t.max_steps,
        max_epochs=-1,
        val_check_interval=t.val_every_n_steps,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=logger,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=t.progress_bar,
        enable_model_summary=False,
        # optimizer steps of max_steps, validation in windows (Lightning's own bar reads "Epoch 1/-2")
        callbacks=[saver] + ([AttnsimProgressBar()] if t.progress_bar else []),
    )


def _checkpoint_meta(prepared: FinetunePrepared, run_id: str) -> Dict[str, Any]:
    """What each saved checkpoint records about the run that made it (``attnsim_checkpoint.json`` beside its weights)."""
    cfg = prepared.cfg
    return {
        "run_id": run_id,
        "tracking_uri": prepared.tracker.uri,
        "experiment": cfg.name,
        # step 0 of a sweep: the encoder fine-tuning started from (a random init is saved as step-000000)
        "base_model": None if cfg.model.init == "random" else str(cfg.model.path),
        "labels": list(prepared.labels),
        "seq_len": int(cfg.corpus.seq_len),
        "train_corpus_hash": prepared.train.content_hash,
    }


def _last_metrics(sink: Any) -> Dict[str, float]:
    """The last logged value of the run's training and validation loss and accuracy (those it logged)."""
    return {
        key: max(history, key=lambda m: (m.step, m.timestamp)).value
        for key in ("train/loss", "train/accuracy", "val/loss", "val/accuracy")
        if (history := sink.client.get_metric_history(sink.run_id, key))
    }


def _split_counts(prepared: FinetunePrepared) -> tuple:
    """``(windows, documents, categories)``, each a dict ``{"train": n, "val": n}``."""
    splits = {"train": prepared.train, "val": prepared.val}
    windows = {key: len(corpus) for key, corpus in splits.items()}
    documents = {key: len({w.doc_id for w in corpus.windows}) for key, corpus in splits.items()}
    categories = {key: len({w.label for w in corpus.windows if w.label is not None}) for key, corpus in splits.items()}
    return windows, documents, categories


def execute_finetune(prepared: FinetunePrepared) -> FinetuneResult:
    """Load the model, create the run, fit, validate and save checkpoints. See :func:`finetune`."""
    from attnsim.config import to_yaml
    from attnsim.tracking.params import finetune_params
    from attnsim.training.data import ClassificationDataModule
    from attnsim.training.module import (
        ClassifierModule,
        PretrainedCheckpoint,
        SinkLogger,
    )
    from attnsim.workflows.common import (
        DatasetInput,
        corpus_source,
        dataset_name,
        log_datasets,
        run_lightning,
        run_tags,
        seed_and_threads,
    )

    cfg, t = prepared.cfg, prepared.cfg.trainer
    seed_and_threads(cfg.seed, t.threads)
    model = trainable_classifier(prepared.info, prepared.labels, cfg.model.init, cfg.seed)
    label2id = {label: i for i, label in enumerate(prepared.labels)}
    tags = run_tags(cfg, prepared.info, prepared.train, {Tag.MODEL_INIT.value: cfg.model.init})
    tags.update(
        {
            Tag.KIND.value: RunKind.FINETUNE.value,
            Tag.LABELS.value: ",".join(prepared.labels),
            Tag.VAL_CORPUS_HASH.value: prepared.val.content_hash,
            Tag.VAL_WINDOWS.value: str(len(prepared.val)),
        }
    )
    with prepared.tracker.run(
        cfg.tracking.experiment, cfg.tracking.run_name or f"{cfg.name} · {prepared.info.name}", tags, description=cfg.description
    ) as sink:
        directory = prepared.checkpoint_dir or (Path.cwd() / "checkpoints" / cfg.name / sink.run_id).resolve()
        sink.set_tags({Tag.CHECKPOINT_DIR.value: str(directory)})
        sink.log_params(finetune_params(cfg))
        sink.log_text(to_yaml(cfg), "config.yaml")
        name, source = dataset_name(cfg), corpus_source(cfg)
        log_datasets(
            sink, [DatasetInput(f"{name}_training", prepared.train, source, "training"), DatasetInput(f"{name}_validation", prepared.val, source, "validation")]
        )
        meta = _checkpoint_meta(prepared, sink.run_id)

        def record(step: int, path: Path) -> None:
            sink.log_metrics({"checkpoint/step": float(step)}, step=step)
            sink.flush()

        saver = PretrainedCheckpoint(directory, cfg.checkpoint.every_n_steps, prepared.tokenizer, meta, on_save=record)
        model.train()  # from_pretrained returns eval mode, which Lightning would keep (no dropout)
        module = ClassifierModule(model, t.learning_rate, t.weight_decay, t.warmup_steps, t.max_steps)
        datamodule = ClassificationDataModule(prepared.train.windows, prepared.val.windows, label2id, t.batch_size, t.num_workers, cfg.seed)
        logger = SinkLogger(sink)
        trainer = _fit_trainer(t, logger, saver)
        logger.step_source = lambda: int(trainer.global_step)
        if cfg.model.init == "random":
            saver.write(model, 0)  # no directory holds these initial weights: keep them as step 0
        start = time.perf_counter()
        run_lightning(lambda: trainer.fit(module, datamodule=datamodule), trainer, "fit")
        if trainer.global_step % t.val_every_n_steps != 0:
            # the last validation was before the last step: measure the final weights too
            trainer.validate(module, datamodule=datamodule, verbose=False)
        seconds = time.perf_counter() - start
        sink.log_metrics(
            {run_key("time_fit"): seconds, run_key("windows_train"): float(len(prepared.train)), run_key("windows_val"): float(len(prepared.val))},
            step=int(trainer.global_step),
        )
        listing = [{"global_step": step, "path": str(path)} for step, path in saver.saved]
        sink.log_text(json.dumps(listing, indent=2), "checkpoints.json")
        sink.flush()
        metrics = _last_metrics(sink)
        experiment_id = prepared.tracker.client.get_run(sink.run_id).info.experiment_id
    checkpoints = [(step, str(path)) for step, path in sorted(saver.saved)]
    windows, documents, categories = _split_counts(prepared)
    return FinetuneResult(
        sink.run_id, experiment_id, prepared.tracker.uri, str(directory), checkpoints, metrics, list(prepared.labels), seconds, windows, documents, categories
    )


def finetune(experiment: str = DEFAULT_EXPERIMENT, overrides: Optional[List[str]] = None) -> FinetuneResult:
    """Fine-tune experiment ``experiment`` (default ``finetune_bbc``) with dot-list ``overrides``.

    Example (two optimizer steps on 16 BBC windows; ``tests/test_docstring_examples.py`` runs it):

        >>> import attnsim
        >>> tuned = attnsim.finetune(overrides=["corpus.limit=16", "corpus.seq_len=32", "trainer.batch_size=4", "trainer.max_steps=2",
        ...     "checkpoint.every_n_steps=1", "trainer.val_every_n_steps=1", "trainer.val_limit=4", "trainer.warmup_steps=1",
        ...     "trainer.progress_bar=false"])
        >>> [step for step, _ in tuned.checkpoints]  # pass tuned.checkpoint_dir to attnsim.sweep
        [1, 2]

    Returns:
        :class:`FinetuneResult` (run id, checkpoint directory and steps, last metrics).

    Raises:
        ConfigError, CorpusError, ModelError, TrackingError: bad input, before any run exists.
        Exception: any error during training, after marking the run FAILED (KILLED for Ctrl-C/SIGTERM);
            checkpoints saved until then are kept.
    """
    from attnsim.config import load_config
    from attnsim.findings.registry import FINDINGS

    cfg = load_config(experiment, overrides, known_findings=FINDINGS)
    if cfg.task != "finetune":
        raise ConfigError(
            f"Experiment '{cfg.name}' measures a model (task: {cfg.task}); `attnsim finetune` needs a fine-tuning experiment such as {DEFAULT_EXPERIMENT}. Run this one with `attnsim run {cfg.name}`."
        )
    return execute_finetune(prepare_finetune(cfg))
