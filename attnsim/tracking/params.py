"""Params, tags and descriptions (README, "Tracking store"): which config keys a run logs as params
(:func:`measure_params` for a measurement, :func:`finetune_params` for a fit) and how a run's description
(``mlflow.note.content``) says how it was started (:func:`run_note`). :mod:`attnsim.tracking.store`
imports these names too.
"""

from __future__ import annotations

import shlex
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence

# trainer keys a predict (measurement) run uses; the rest of `trainer` is for `attnsim finetune`
PREDICT_TRAINER_KEYS = ("accelerator", "devices", "num_nodes", "strategy", "precision", "batch_size", "num_workers", "threads")

#: Config keys every measurement run reads itself, whatever its findings (a section name stands for all its
#: keys): the model, the corpus, the high-pair rule and logging patterns of every pair view, the predict
#: trainer and the capture path. A finding declares the keys it reads beyond these
#: (:attr:`attnsim.findings.base.Finding.config_keys`).
RUN_KEYS = (
    "seed",
    "findings",
    "model",
    "corpus",
    "capture",
    "tracking",
    "stats.top_fraction",
    "stats.high_rule",
    "stats.zscore",
    "stats.include_special",
    "stats.normalise",
    "stats.per_head",
    "stats.per_layer",
    *(f"trainer.{key}" for key in PREDICT_TRAINER_KEYS),
)
#: Read only when ``tracking.figures`` is on: logged then.
FIGURE_KEYS = ("plots",)
#: Keys never logged as params, and why: the run's name, description and task (its tag, note and command),
#: its tags (set as the run's tags), how many processes draw and whether a bar shows progress (no number or
#: figure changes), the fine-tuning keys (``attnsim finetune`` logs them).
NOT_PARAMS = (
    "name",
    "description",
    "task",
    "tracking.tags",
    "plots.processes",
    "trainer.progress_bar",
    "checkpoint",
    "trainer.max_steps",
    "trainer.learning_rate",
    "trainer.weight_decay",
    "trainer.warmup_steps",
    "trainer.val_fraction",
    "trainer.val_limit",
    "trainer.val_every_n_steps",
)

#: ``corpus`` keys that only some corpus sources read: logged as params only for those sources.
SOURCE_ONLY_CORPUS_KEYS: Dict[str, tuple] = {
    "repeat_length": ("repeated_tokens",),
    "repeats": ("repeated_tokens",),
    "target_len": ("translation",),
}


def covers(declared: Iterable[str], key: str) -> bool:
    """Whether dotted config key ``key`` is one of ``declared`` or lies in one of its sections (``maps`` covers ``maps.head_fusion``)."""
    return any(key == entry or key.startswith(entry + ".") for entry in declared)


def finding_keys(findings: Iterable[str]) -> List[str]:
    """The config keys the findings named ``findings`` declare (:attr:`~attnsim.findings.base.Finding.config_keys`), in order, once each."""
    from attnsim.findings.registry import FINDINGS

    keys: List[str] = []
    for name in findings:
        keys.extend(key for key in FINDINGS[name].config_keys if key not in keys)
    return keys


def measure_params(cfg: Any, declared: Optional[Iterable[str]] = None) -> Dict[str, str]:
    """The config keys a measurement run (``attnsim run``, a sweep and its children) logs as params.

    The rule, in one place: the keys the run reads itself (:data:`RUN_KEYS`; of ``corpus`` the keys of
    :data:`SOURCE_ONLY_CORPUS_KEYS` only for their sources), ``plots`` when ``tracking.figures`` is on
    (:data:`FIGURE_KEYS`), and the keys the run's findings declare they read (``declared``; e.g.
    ``stats.short_range`` for distance, ``maps.head_fusion`` for rollout, ``stats.band_width`` for
    alignment), never the keys of :data:`NOT_PARAMS`. The whole resolved config is the run's ``config.yaml``.

    Args:
        cfg: a resolved config (:func:`attnsim.config.load_config`).
        declared: the config keys the run's findings read; default: what the findings of ``cfg.findings``
            declare (:func:`finding_keys`).

    Returns:
        ``dotted.key -> str(value)`` from :func:`attnsim.config.flatten`, filtered by the rule.
    """
    from attnsim.config import flatten

    read = [*RUN_KEYS, *(FIGURE_KEYS if cfg.tracking.figures else ()), *(finding_keys(cfg.findings) if declared is None else declared)]
    return _selected(cfg, flatten(cfg), read, NOT_PARAMS)


def _selected(cfg, flat: Dict[str, str], read, excluded) -> Dict[str, str]:
    """The keys of ``flat`` that ``read`` covers and ``excluded`` does not, less the corpus keys of other sources."""
    params: Dict[str, str] = {}
    for key, value in flat.items():
        section, _, rest = key.partition(".")
        if section == "corpus" and rest in SOURCE_ONLY_CORPUS_KEYS and cfg.corpus.source not in SOURCE_ONLY_CORPUS_KEYS[rest]:
            continue
        if covers(read, key) and not covers(excluded, key):
            params[key] = value
    return params


_STARTED: ContextVar[Optional[str]] = ContextVar("attnsim_started", default=None)


@contextmanager
def _started(text: str) -> Iterator[None]:
    token = _STARTED.set(text) if _STARTED.get() is None else None  # the outermost caller wins
    try:
        yield
    finally:
        if token is not None:
            _STARTED.reset(token)


def command_line(argv: Sequence[str]) -> Any:
    """Context manager: runs created inside were started by this command line (``["attnsim", "run", ...]``).

    The command line ``cli.main`` was given, joined with :func:`shlex.join`, becomes part of every
    run's description (:func:`run_note`).
    """
    return _started(f"Command line: `{shlex.join([str(a) for a in argv])}`")


def api_call(call: str) -> Any:
    """Context manager: runs created inside were started from Python by ``call`` (e.g. ``attnsim.run('csm', [])``),
    unless a command line (:func:`command_line`) is already recorded."""
    return _started(f"Started from the Python API: `{call}` (process: `{shlex.join(sys.argv)}`)")


def started() -> str:
    """How the runs being created were started: the command line, the Python call, or a fallback naming the process."""
    return _STARTED.get() or f"Started from the Python API (process: `{shlex.join(sys.argv)}`)"


def run_note(description: str = "", details: Iterable[str] = ()) -> str:
    """A run's description (tag ``mlflow.note.content``, Markdown in the MLflow UI).

    Paragraphs: the experiment's ``description`` (when not empty), how the run was started
    (:func:`started`), then each of ``details`` (e.g. which checkpoint a sweep child measured).
    """
    parts = [description.strip()] if description and description.strip() else []
    parts.append(started())
    parts.extend(d for d in details if d)
    return "\n\n".join(parts)


#: Config sections and keys a fine-tuning run (``attnsim finetune``) reads: the model it starts from, the corpus it
#: trains on, the whole trainer (fit and validation keys), where checkpoints go, and where it logs.
FINETUNE_KEYS = ("seed", "model", "corpus", "trainer", "checkpoint", "tracking")
#: Keys of those sections a fit does not use, or that change no number: the progress bar, the run's tags.
FINETUNE_NOT_PARAMS = ("trainer.progress_bar", "tracking.tags")


def finetune_params(cfg: Any) -> Dict[str, str]:
    """The config keys a fine-tuning run logs as params: those of :data:`FINETUNE_KEYS` less :data:`FINETUNE_NOT_PARAMS`
    (of ``corpus`` the keys of :data:`SOURCE_ONLY_CORPUS_KEYS` only for their sources). No ``stats``, ``maps``,
    ``plots``, ``interventions`` or ``capture`` key: a fit reads none; the whole config is the run's ``config.yaml``.

    Returns:
        ``dotted.key -> str(value)`` from :func:`attnsim.config.flatten`.
    """
    from attnsim.config import flatten

    return _selected(cfg, flatten(cfg), FINETUNE_KEYS, FINETUNE_NOT_PARAMS)
