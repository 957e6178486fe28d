"""The tests mirror the package: every module of attnsim/stats/ has its own test file, and tests import
helpers from tests/helpers/ only (never from conftest.py or from another test file)."""

from __future__ import annotations

import ast

from tests.helpers.paths import ROOT


def test_every_stats_module_has_its_test_file():
    package = ROOT / "attnsim" / "stats"
    missing = []
    for module in package.rglob("*.py"):
        if module.name == "__init__.py" or "__pycache__" in module.parts:
            continue
        relative = module.parent.relative_to(ROOT / "attnsim")
        expected = ROOT / "tests" / relative / f"test_{module.stem.lstrip('_')}.py"
        if not expected.is_file():
            missing.append(str(expected.relative_to(ROOT)))
    assert missing == [], f"modules of attnsim/stats without their test file: {missing}"


def test_tests_import_helpers_only_from_the_helpers_package():
    offenders = []
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests."):
                if not node.module.startswith("tests.helpers"):
                    offenders.append(f"{path.relative_to(ROOT)}: from {node.module} import ...")
    assert offenders == []
