"""Every attnsim import runs with the data flow: no module imports a module of a higher
layer, and no two modules import each other (directly or round a longer loop).

Imports are read with ``ast`` from every module's source: top-level imports, imports inside
functions (lazy imports count: they run too) and ``if TYPE_CHECKING:`` imports alike.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from tests.helpers.paths import ROOT

PACKAGE = ROOT / "attnsim"

# Layers, lowest first: a module may import its own layer and the layers below, never one above.
# The first matching prefix (longest first) decides a module's layer.
LAYERS: List[Tuple[str, Tuple[str, ...]]] = [
    # foundation: errors, the typed contracts (MetricKey, Tag, RunKind), Summary; and the package
    # itself, which holds __version__/STATS_VERSION and imports its API lazily, by name only
    # quiet: the libraries' chatter hidden for the command line and the API alike (imports libraries only)
    ("foundation", ("attnsim.errors", "attnsim.keys", "attnsim.results", "attnsim.quiet", "attnsim.lazy", "attnsim")),
    ("config", ("attnsim.config",)),
    ("data", ("attnsim.data",)),
    ("capture", ("attnsim.capture",)),
    ("stats", ("attnsim.stats",)),
    # figures drawn from tensors and tables; below findings, whose figures() draw with them
    ("plots", ("attnsim.plots",)),
    # Lightning callbacks and modules: findings, the fine-tuning module and data, the progress bar
    ("findings", ("attnsim.findings", "attnsim.training", "attnsim.progress")),
    ("tracking", ("attnsim.tracking",)),
    # the live explorer sits beside the workflows: it loads a model, captures one window and reads logged runs
    ("workflows", ("attnsim.workflows", "attnsim.analysis", "attnsim.report", "attnsim.explore")),
    # the command line, and the text it prints about finished workflows
    ("cli", ("attnsim.cli", "attnsim.printed")),
]

# Imports against the flow that are tolerated: none. Nothing may be added.
ALLOWED: Set[Tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> Dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: Set[str]) -> Set[str]:
    """The attnsim modules ``name`` imports anywhere in its source (``from pkg import mod`` resolves to ``pkg.mod``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import attnsim.tracking.store.X` -> the module
                target = target.rpartition(".")[0]
            if target and target.split(".")[0] == "attnsim" and target != name:
                found.add(target)
    return found


def layer_of(name: str) -> int:
    best: Tuple[int, int] = (-1, -1)  # (prefix length, layer)
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            # the package "attnsim" itself matches only exactly: a new top-level module needs a layer
            inside = name.startswith(prefix + ".") and prefix != "attnsim"
            if (name == prefix or inside) and len(prefix) > best[0]:
                best = (len(prefix), index)
    assert best[1] >= 0, f"module {name} is in no layer of LAYERS; add it"
    return best[1]


def graph() -> Dict[str, Set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def upward(edges: Dict[str, Set[str]]) -> List[Tuple[str, str]]:
    return sorted((a, b) for a, targets in edges.items() for b in targets if layer_of(b) > layer_of(a))


def cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    groups: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in edges.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def test_every_module_has_a_layer():
    for name in modules():
        layer_of(name)


def test_no_module_imports_a_higher_layer():
    found = upward(graph())
    unexpected = [edge for edge in found if edge not in ALLOWED]
    described = [f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})" for a, b in unexpected]
    assert not described, "imports against the flow:\n" + "\n".join(described)


def test_the_allowed_exceptions_are_still_needed():
    """An exception whose import is gone must leave ALLOWED, so that the set only shrinks."""
    stale = sorted(ALLOWED - set(upward(graph())))
    assert not stale, f"remove from ALLOWED, these imports are gone: {stale}"


def test_no_two_modules_import_each_other():
    edges = {a: {b for b in targets if (a, b) not in ALLOWED} for a, targets in graph().items()}
    assert cycles(edges) == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import attnsim.plots.common\n", {"attnsim.plots.common"}),
        ("def f():\n    from attnsim.tracking import store\n", {"attnsim.tracking.store"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from attnsim.config import load_config\n", {"attnsim.config"}),
        ("from .sink import RunSink\n", {"attnsim.tracking.sink"}),
        ("import os, json\n", set()),
    ],
)
def test_imports_are_read_from_every_place_in_a_module(tmp_path, source, expected):
    path = tmp_path / "x.py"
    path.write_text(source)
    known = {"attnsim", "attnsim.plots", "attnsim.plots.common", "attnsim.tracking", "attnsim.tracking.store", "attnsim.tracking.sink", "attnsim.config"}
    assert imports_of("attnsim.tracking.x", path, known) == expected


def test_a_module_outside_every_layer_is_refused():
    with pytest.raises(AssertionError, match="attnsim.newmodule is in no layer"):
        layer_of("attnsim.newmodule")


def test_the_checks_catch_an_upward_import_and_a_cycle():
    edges = {
        "attnsim.tracking.sink": {"attnsim.plots.common", "attnsim.tracking.store"},
        "attnsim.tracking.store": {"attnsim.tracking.sink"},
        "attnsim.plots.common": set(),
    }
    assert upward({"attnsim.tracking.sweep": {"attnsim.workflows.run"}}) == [("attnsim.tracking.sweep", "attnsim.workflows.run")]
    assert cycles(edges) == [["attnsim.tracking.sink", "attnsim.tracking.store"]]
