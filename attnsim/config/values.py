"""Reading values by the schema type of their key: YAML files (:func:`read_yaml`) and command-line
overrides (:func:`parse_override`), text kept as written for ``str`` keys. See :mod:`attnsim.config`.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Dict, Tuple, Union, get_args, get_origin, get_type_hints

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import (
    OmegaConfBaseException,
)

from attnsim.config.schema import RunConfig
from attnsim.errors import ConfigError


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
def field_hints(kind: type) -> Dict[str, Any]:
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
        return field_hints(kind).get(str(key), _UNKNOWN)
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
      `` #`` included; ``null`` or ``~`` is null where the key may be null, and so are ``None``/``none``.
    - an empty value (``corpus.limit=``) is refused: write ``null`` to unset a key.
    - keys taking a list or map (``findings``, ``tracking.tags``): ``text`` must be a YAML list
      ``[a, b]`` or map ``{a: 1}``; str items and values in it keep their text.
    - other keys (int, float, bool, ``Any``): as YAML types ``text`` (``16``, ``5e-2``, ``true``,
      ``null``, ``[0, 1]``), ``None``/``none`` being null where the key may be null; text that is more
      than one YAML value (``16 #x``) is taken as text, which a number or bool key then refuses.

    Raises:
        ConfigError: an empty value; a key that takes a list or map was given something else.
    """
    if text == "":
        raise ConfigError(
            f"Config key '{key}' has nothing after '=' on the command line. Give it a value, e.g. {key}=VALUE, "
            f"or write {key}=null to unset it (an empty value is refused, so that a variable that expanded to nothing does not pass silently)."
        )
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
            note += f' (YAML reads an unquoted * or & as an alias or anchor: quote the item, e.g. {key}="{star}", in single quotes inside the shell\'s double quotes)'
        raise ConfigError(f"Config key '{key}' takes a {what}, but the command line gives it the text '{text}'{note}. Write a YAML {what}, e.g. {example}.")
    return value if whole else text


#: Stem of the base experiment (``experiments/_base.yaml``): the ``defaults`` order and the keys every
#: experiment shares. Files whose stem starts with ``_`` are not experiments (`attnsim list` skips them).
