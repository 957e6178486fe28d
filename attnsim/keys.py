"""The string contracts between attnsim's parts, typed: metric keys, run tags and run kinds.

Every metric key of a statistic is made by :meth:`MetricKey.format` and read back by
:meth:`MetricKey.parse`; every ``attnsim.*`` run tag is a member of :class:`Tag`; the
kind of a run (tag ``attnsim.kind``) is a :class:`RunKind`. Both enums derive from
``str``, so a member is its MLflow string (``Tag.KIND == "attnsim.kind"``) and can be
used as a dict key of the tags MLflow returns.

This module imports nothing from attnsim (it is the bottom layer beside
:mod:`attnsim.errors` and :mod:`attnsim.results`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Optional

# finding/stat[/LNN[/HNN]]; layers and heads are 0-indexed, at least two digits
_KEY = re.compile(r"^(?P<finding>[^/]+)/(?P<stat>[^/]+)(?:/L(?P<layer>\d{2,}))?(?:/H(?P<head>\d{2,}))?$")


@dataclass(frozen=True)
class MetricKey:
    """The MLflow key of a statistic (docs: Reference, "Metric keys"), formatted and parsed by one rule.

    ``finding/stat`` (model mean), ``finding/stat/L03`` (layer mean, mean over heads) and
    ``finding/stat/L03/H07`` (one head); layers and heads are 0-indexed and written with at
    least two digits. A finding's corpus-level number (no layer axis) is ``finding/name``,
    i.e. a key without layer.

    Example:

        >>> MetricKey("csm", "mean", 3, 7).format()
        'csm/mean/L03/H07'
        >>> MetricKey.parse("csm/mean/L03")
        MetricKey(finding='csm', stat='mean', layer=3, head=None)
    """

    finding: str
    stat: str
    layer: Optional[int] = None
    head: Optional[int] = None

    def __post_init__(self) -> None:
        if self.head is not None and self.layer is None:
            raise ValueError(f"MetricKey({self.finding!r}, {self.stat!r}, head={self.head}) has a head but no layer.")
        for part, value in (("finding", self.finding), ("stat", self.stat)):
            if not value or "/" in value:
                raise ValueError(f"MetricKey {part} must be a non-empty name without '/', not {value!r}.")

    def format(self) -> str:
        """The key as logged: ``finding/stat``, ``finding/stat/L03`` or ``finding/stat/L03/H07``."""
        key = f"{self.finding}/{self.stat}"
        if self.layer is not None:
            key += f"/L{int(self.layer):02d}"
        if self.head is not None:
            key += f"/H{int(self.head):02d}"
        return key

    __str__ = format

    @classmethod
    def parse(cls, key: str) -> "MetricKey":
        """Read a key written by :meth:`format`.

        Raises:
            ValueError: ``key`` does not follow the rule (e.g. ``attnsim/time/predict``); use
            :meth:`try_parse` to get None instead.
        """
        parsed = cls.try_parse(key)
        if parsed is None:
            raise ValueError(f"{key!r} is not a statistic's metric key (finding/stat, finding/stat/LNN or finding/stat/LNN/HNN).")
        return parsed

    @classmethod
    def try_parse(cls, key: str) -> Optional["MetricKey"]:
        """:meth:`parse`, or None when ``key`` does not follow the rule."""
        match = _KEY.match(key)
        if match is None:
            return None
        layer, head = match["layer"], match["head"]
        if head is not None and layer is None:
            return None
        return cls(match["finding"], match["stat"], int(layer) if layer is not None else None, int(head) if head is not None else None)

    @property
    def name(self) -> str:
        """``finding/stat``: the statistic, without layer and head (the model-mean key)."""
        return f"{self.finding}/{self.stat}"

    @property
    def is_model_mean(self) -> bool:
        return self.layer is None

    @property
    def is_layer_mean(self) -> bool:
        return self.layer is not None and self.head is None


class Tag(StrEnum):
    """Every ``attnsim.*`` run tag attnsim sets or reads (docs/concepts/tracking.md)."""

    # what a measurement ran on
    EXPERIMENT = "attnsim.experiment"
    MODEL = "attnsim.model"  # a short name (all-MiniLM-L6-v2, a folder's name; capture.load.display_name), in the run's name too
    MODEL_PATH = "attnsim.model_path"  # the model's resolved path
    MODEL_TYPE = "attnsim.model_type"
    HOST = "attnsim.host"  # the machine and process that hold a RUNNING run (a dead one is ended FAILED later)
    PID = "attnsim.pid"
    PROCESS_START = "attnsim.process_start"
    SHAPE = "attnsim.shape"  # layers x query heads x d_head, e.g. 30x9x64: which controls can judge a run (attnsim report)
    MODEL_INIT = "attnsim.model_init"
    CONTROL = "attnsim.control"  # "random" for a random-weights control, else "none"
    CORPUS = "attnsim.corpus"
    CORPUS_HASH = "attnsim.corpus_hash"
    WINDOWS = "attnsim.windows"
    SEQ_LEN = "attnsim.seq_len"
    SEED = "attnsim.seed"
    VERSION = "attnsim.version"
    STATS_DEFINITION = "attnsim.stats_definition"
    ATTN_IMPLEMENTATION = "attnsim.attn_implementation"
    ATTN_IMPLEMENTATION_SWITCHED = "attnsim.attn_implementation_switched"
    CLASSIFIER_HEAD = "attnsim.classifier_head"
    NUM_LABELS = "attnsim.num_labels"
    TARGET_CLASS = "attnsim.target_class"
    STATISTICS_PATH = "attnsim.statistics_path"  # compiled (numba top-k kernel, float32 CSM with certified high pairs) or fallback (NumPy partition, float64 CSM): the CPU statistics' path
    CAPTURE_PATH = "attnsim.capture_path"  # dense (T x T maps), blockwise (Q, K captured, attention recomputed by blocks) or recomputed (Q, K captured, dense view recomputing whole maps)
    # how the run ended
    KIND = "attnsim.kind"  # a RunKind; absent on measurement runs made before it existed
    PARTIAL = "attnsim.partial"
    SKIPPED_NONFINITE = "attnsim.skipped_nonfinite"  # the metric keys whose values were NaN/inf (never logged), comma-separated
    FAILED_FINDINGS = "attnsim.failed_findings"
    ERROR = "attnsim.error"
    PREVIOUS_ERROR = "attnsim.previous_error"
    # sweeps
    SWEEP_KEY = "attnsim.sweep_key"
    SWEEP_SOURCE = "attnsim.sweep_source"
    SWEEP_STEPS = "attnsim.sweep_steps"
    SWEEP_UNREADABLE = "attnsim.sweep_unreadable"  # checkpoints a sweep could not read, with the reason
    SWEEP_UNREADABLE_COUNT = "attnsim.sweep_unreadable_count"  # how many checkpoints a sweep could not read (0: none)
    SWEEP_STEP = "attnsim.sweep_step"
    GLOBAL_STEP = "attnsim.global_step"
    CHECKPOINT = "attnsim.checkpoint"
    CHECKPOINT_DIR = "attnsim.checkpoint_dir"
    BASE_MODEL = "attnsim.base_model"
    # fine-tuning
    LABELS = "attnsim.labels"
    VAL_CORPUS_HASH = "attnsim.val_corpus_hash"
    VAL_WINDOWS = "attnsim.val_windows"
    # comparisons
    COMPARE_SOURCE = "attnsim.compare_source"
    COMPARE_RUNS = "attnsim.compare_runs"
    COMPARE_FORCED = "attnsim.compare_forced"
    # interventions (ablation, patching)
    INTERVENTION_HEAD = "attnsim.intervention_head"  # classifier, masked_lm, causal_lm or encoder
    INTERVENTION_MODE = "attnsim.intervention_mode"  # zero, mean or resample

    def __str__(self) -> str:  # the MLflow string, also in f-strings
        return self.value


class RunKind(StrEnum):
    """The kind of an attnsim run, the value of tag :attr:`Tag.KIND`.

    A measurement run and a sweep's child carry ``measure`` and ``sweep_child``; runs logged
    before the tag was set on them have no ``attnsim.kind`` and are measurements (:meth:`of`).
    """

    MEASURE = "measure"
    SWEEP = "sweep"  # a sweep's parent run
    SWEEP_CHILD = "sweep_child"
    FINETUNE = "finetune"
    COMPARE = "compare"
    REPORT = "report"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, tags: dict) -> "RunKind":
        """The kind of a run from its tags: :attr:`Tag.KIND`, else a measurement (or a sweep child when it has a sweep step)."""
        value = tags.get(Tag.KIND.value)
        if value:
            try:
                return cls(value)
            except ValueError:
                pass
        return cls.SWEEP_CHILD if Tag.SWEEP_STEP.value in tags else cls.MEASURE

    @property
    def is_measurement(self) -> bool:
        """Whether runs of this kind hold per-layer statistics of their own (a measurement or a sweep child)."""
        return self in (RunKind.MEASURE, RunKind.SWEEP_CHILD)


class Stage(StrEnum):
    """A stage of ``attnsim run`` whose seconds are logged as ``zz_run/time_<stage>`` (docs/performance.md).

    In the order they run. ``imports`` and ``config`` are the command line's (``attnsim run``; a call of
    :func:`attnsim.run` times ``config`` only: its imports happened when it was imported); ``total`` runs
    from the command's start (or the call) to the moment the timings are logged, and ``unattributed`` is
    ``total`` less every other stage. What follows the logging (ending the run, the process exit) is
    outside ``total``: ``benchmarks/end_to_end.py`` shows it against the process's wall time.
    """

    IMPORTS = "imports"  # torch, Lightning, transformers, MLflow (attnsim.workflows.startup)
    CONFIG = "config"  # composing and checking the YAML config
    WINDOWS = "windows"  # model config and tokenizer read, documents read, windows built
    TRACKER = "tracker"  # tracking store opened and checked (SQLite schema, deleted experiment)
    SETUP = "setup"  # findings, Lightning Trainer, data module, run tags
    LOAD_MODEL = "load_model"
    OPEN_RUN = "open_run"  # MLflow run created; params, config.yaml and dataset inputs logged
    PREDICT = "predict"
    REDUCE = "reduce"  # DDP only: the findings' states summed over ranks
    SUMMARISE = "summarise"
    LOG = "log"  # metrics and tables sent to MLflow
    FIGURES = "figures"  # figures drawn, encoded and uploaded; explorer.html
    TOTAL = "total"
    UNATTRIBUTED = "unattributed"

    def __str__(self) -> str:
        return self.value


EXPERIMENT_NAME_RULE = (
    "Use letters, digits, spaces inside the name, '-', '_', '.' or '/' between folder names "
    "(e.g. tracking.experiment='news 1' or tracking.experiment=team/news)."
)
"""What an experiment name may hold (the end of every message of :func:`experiment_name_problem`)."""


def experiment_name_problem(name: str) -> Optional[str]:
    """Why ``name`` cannot name an MLflow experiment whose artifacts stay in a folder of their own inside the tracking
    store's artifact root, or None when it can.

    MLflow makes an experiment's artifact folder from its name (``<store>/artifacts/<name>/<run id>/``), so the name
    is read as a relative path and a URI: ``?`` and ``#`` cut the URI (``news #1`` and ``news #2`` would share
    ``news``), ``%`` and ``\\`` are read as escapes, spaces at either end are lost, and each ``/``-separated part is a
    folder, so ``..`` goes up one (``../news`` leaves the artifact root, ``..`` alone lands beside the store's database),
    ``.`` stays put (alone: the root itself), and a leading ``/``, a doubled ``//`` or a trailing ``/`` make an empty part
    that is dropped (``/abs`` would share ``abs``). Any other letters (Cyrillic, Japanese, ...) are fine.

    Returns:
        "holds ...: why. RULE" (a sentence to follow the name in a message), or None.
    """
    bad = sorted({c for c in name if c in "?#%\\" or ord(c) < 32})
    if bad or name != name.strip():
        what = " and ".join(
            ([", ".join(f"'{c}'" if ord(c) >= 32 else f"U+{ord(c):04X}" for c in bad)] if bad else [])
            + ([] if name == name.strip() else ["spaces at the start or end"])
        )
        return (
            f"holds {what}: an MLflow experiment's artifact folder is made from its name, where '?' and '#' cut a URI (a query or "
            "fragment, so 'news #1' and 'news #2' would share one folder), '%' and '\\' are read as escapes, and spaces at either end "
            f"are lost or confused. {EXPERIMENT_NAME_RULE}"
        )
    why = {
        "..": "'..' goes up a folder ('../news' leaves the artifact root; '..' alone lands beside the store's database)",
        ".": "'.' stays in the folder before it (alone: the artifact root, which every experiment's folder shares)",
        "": "an empty part (a '/' at the start or end, or '//') is dropped, so '/news' and 'news/' would share 'news'",
    }
    odd = [part for part in why if part in name.split("/")]
    if odd:
        return (
            f"holds {' and '.join('an empty part' if part == '' else repr(part) for part in odd)}: an MLflow experiment's artifacts "
            "go to the store's artifact root followed by the name, one folder per '/'-separated part, and "
            f"{'; '.join(why[part] for part in odd)}. {EXPERIMENT_NAME_RULE}"
        )
    return None
