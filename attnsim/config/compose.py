"""Composition: experiments, config groups, overrides, validation, and the flat params a run logs.
See :mod:`attnsim.config`.
"""

from __future__ import annotations

import difflib
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    InterpolationKeyError,
    InterpolationResolutionError,
    MissingMandatoryValue,
    OmegaConfBaseException,
    ValidationError,
)

from attnsim.config.schema import GROUPS, RunConfig
from attnsim.config.values import choices, field_hints, parse_override, read_yaml
from attnsim.errors import ConfigError

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
        raise ConfigError(
            f"Experiment file {path} holds a YAML {type(body).__name__}, not a mapping of config keys. Write KEY: VALUE lines (see `attnsim show csm`)."
        )
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
        siblings = [k for k in valid if k.startswith(parent) and "." not in k[len(parent) :]]
        close = difflib.get_close_matches(full_key, siblings or valid, n=1, cutoff=0.5)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        return ConfigError(
            f"Unknown config key '{full_key}' in {origin}.{hint} Valid keys here: "
            f"{', '.join(s[len(parent) :] for s in siblings) or '(none)'}. Fix the spelling or remove the key; "
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


def _command_line(overrides: List[str], chosen: Dict[str, str]) -> DictConfig:
    """The ``KEY=VALUE`` overrides as one config; ``GROUP=OPTION`` swaps go into ``chosen`` (group -> option) instead.

    Raises:
        ConfigError: an override without ``=``, one that sets one item of a list, or a key OmegaConf cannot set.
    """
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
            raise ConfigError(
                f"Override '{item}' sets one item of the list '{whole}'; give the whole list instead, e.g. {whole}=[a, b] (`attnsim show NAME` prints its current items)."
            )
        try:
            OmegaConf.update(command_line, key, parse_override(key, value), merge=True)
        except OmegaConfBaseException as exc:
            raise ConfigError(f"Cannot apply override '{item}': {str(exc).splitlines()[0]}. Write KEY=VALUE with a dotted key, e.g. corpus.limit=16.") from exc
    return command_line


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
    command_line = _command_line(overrides, chosen)
    cfg = schema
    stage = "schema"
    try:
        for group, option in chosen.items():
            stage = f"configs/{group}/{option}.yaml"
            group_body = read_yaml(_group_file(group, option), field_hints(RunConfig)[group])
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
        raise ConfigError(
            f"Missing value for config key '{exc.full_key}'. Set it in the experiment YAML or on the command line ({exc.full_key}=VALUE)."
        ) from exc
    except (InterpolationKeyError, InterpolationResolutionError) as exc:
        raise ConfigError(
            f"Config key '{exc.full_key}' is an interpolation that points at a missing value: {str(exc).splitlines()[0].rstrip('.')}. Set the key it refers to, or replace the interpolation with a value."
        ) from exc
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
