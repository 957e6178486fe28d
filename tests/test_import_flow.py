"""Data flows one way (docs/architecture.md, "Data flows one way"): data -> capture -> stats -> findings. The lower layers import
nothing above them: data imports only data, capture only capture and data, stats only stats."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

PACKAGE = ROOT / "attnsim"
ALLOWED = {
    "data": {"data", "errors", "lazy"},
    "capture": {"capture", "data", "errors", "keys", "lazy"},
    "stats": {"stats", "errors"},
}  # foundation layer, standard library only: keys (the Tag contract), lazy (the packages' names imported on first use)


def attnsim_imports(path: Path) -> set:
    """The attnsim sub-packages a module imports anywhere (top level, in functions, under TYPE_CHECKING)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names] if isinstance(node, ast.Import) else []
        for name in names:
            parts = name.split(".")
            if parts[0] == "attnsim" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_nothing_above_it(layer):
    wrong = {
        f"{path.relative_to(PACKAGE.parent)}: {sorted(attnsim_imports(path) - ALLOWED[layer])}"
        for path in (PACKAGE / layer).rglob("*.py")
        if attnsim_imports(path) - ALLOWED[layer]
    }
    assert not wrong, wrong
