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
YAML list or map. ``null`` (``~``, or an empty value in YAML) is null; on keys that
may be null, ``None`` and ``none`` are null too. An empty command-line value (``corpus.limit=``) is refused. Keys typed ``Any``
(``trainer.devices``, ``model.build.*``) are typed as YAML types them,
except that text YAML would read as an infinite or NaN float (``695e0514``)
stays text.

Every check here runs before any model is loaded or MLflow run is created:
unknown keys (with the closest valid key), wrong types, missing values, bad
choices (naming the allowed values), values out of range, unknown findings (the
caller passes the known names: this package imports nothing from attnsim but its
errors) and interpolations that point at missing values all raise
:class:`~attnsim.errors.ConfigError`.

The package has three modules, in the order data flows through them: :mod:`attnsim.config.schema`
(the dataclasses and Enums), :mod:`attnsim.config.values` (reading YAML and overrides by the schema's
types) and :mod:`attnsim.config.compose` (experiments, groups, validation, params). Import from
``attnsim.config``.
"""

from __future__ import annotations

from omegaconf import ListConfig

from attnsim.config.compose import (
    BASE,
    find_experiment,
    flatten,
    list_experiments,
    load_config,
    package_dir,
    param_text,
    to_yaml,
    validate,
)
from attnsim.config.schema import (
    AblationMode,
    Accelerator,
    AttnImplementation,
    CaptureConfig,
    CapturePath,
    CheckpointConfig,
    CorpusConfig,
    Dtype,
    HeadFusion,
    HighRule,
    Init,
    InterventionsConfig,
    InterventionSplit,
    MapsConfig,
    ModelConfig,
    Normalise,
    PlotsConfig,
    RunConfig,
    SelectConfig,
    Source,
    StatsConfig,
    Task,
    TrackingConfig,
    TrainerConfig,
    Vector,
)
from attnsim.config.values import choices, parse_override, read_yaml, schema_type

__all__ = [
    "RunConfig",
    "CaptureConfig",
    "CapturePath",
    "package_dir",
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
