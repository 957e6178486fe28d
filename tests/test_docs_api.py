"""The Python API page (docs/reference/api.md) documents every top-level name of attnsim, and names only what imports."""

from __future__ import annotations

import importlib
import importlib.util
import re
import types
from pathlib import Path
from typing import Any, List

import attnsim

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "api.md"
DIRECTIVE = re.compile(r"^::: (?P<path>\S+)\s*$", re.M)  # mkdocstrings: one object, by its full dotted path
TOP_LEVEL = re.compile(r"\battnsim\.(?P<name>[A-Za-z_]\w*)\b(?!\.\w)")  # attnsim.NAME, not attnsim.module.more
CONSTANTS = ("__version__", "STATS_VERSION")  # strings: documented in the page's text


def resolve(path: str) -> Any:
    """The object of a dotted path: its longest importable module prefix, then attributes (AttributeError if missing)."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # a module that imports something missing: not a shorter path's business
                raise
            continue
        for attribute in parts[end:]:
            obj = getattr(obj, attribute)
        return obj
    raise ModuleNotFoundError(path)


def documented_objects(text: str) -> List[Any]:
    """The objects the page's directives document, with the public members a documented module defines."""
    found = []
    for path in DIRECTIVE.findall(text):
        obj = resolve(path)
        found.append(obj)
        if isinstance(obj, types.ModuleType):
            found += [v for k, v in vars(obj).items() if not k.startswith("_") and getattr(v, "__module__", None) == obj.__name__]
    return found


def test_resolve_finds_objects_and_refuses_missing_ones():
    from attnsim.analysis.listing import list_runs

    assert resolve("attnsim.analysis.listing.list_runs") is list_runs
    assert resolve("attnsim.errors") is importlib.import_module("attnsim.errors")
    for bad in ("attnsim.analysis.listing.no_such_function", "attnsim.no_such_module.thing"):
        try:
            resolve(bad)
        except (AttributeError, ModuleNotFoundError):
            continue
        raise AssertionError(f"{bad} resolved")


def test_every_top_level_name_is_documented_on_the_api_page():
    text = PAGE.read_text(encoding="utf-8")
    documented = documented_objects(text)
    names = list(attnsim.__all__)
    assert {"run", "view", "trace", "list_runs", "describe_run", "RunDescription", "AttnsimError"} <= set(names)
    missing = []
    for name in names:
        if name in CONSTANTS:
            if f"`attnsim.{name}`" not in text:
                missing.append(name)
            continue
        obj = getattr(attnsim, name)
        if isinstance(obj, types.ModuleType):  # attnsim.report: the module, callable as its function report
            obj = getattr(obj, name)
        if not any(obj is d for d in documented):
            missing.append(name)
    assert missing == [], f"top-level names without an entry on {PAGE.name}: {missing}"


def test_the_api_page_names_only_what_imports_from_attnsim():
    text = PAGE.read_text(encoding="utf-8")
    paths = DIRECTIVE.findall(text)
    assert "attnsim.explore.notebook.view" in paths and len(paths) == len(set(paths)) > 20
    for path in paths:
        resolve(path)  # every documented object imports (an AttributeError or ModuleNotFoundError fails)
    names = sorted(set(TOP_LEVEL.findall(text)))
    assert {"run", "view", "list_runs", "describe_run", "report", "errors"} <= set(names)
    not_importable = [n for n in names if not hasattr(attnsim, n) and importlib.util.find_spec(f"attnsim.{n}") is None]
    assert not_importable == [], f"{PAGE.name} names attnsim.X that `from attnsim import X` cannot import: {not_importable}"
