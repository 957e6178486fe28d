"""The tests mirror the package: every module of attnsim/stats/ has its own test file, and tests import
helpers from tests/helpers/ only (never from conftest.py or from another test file). No file of the tree
cites an issue number."""

from __future__ import annotations

import ast
import re

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


# Code, tests, benchmarks, docs and the bundled YAML say what a thing is, not which ticket made it: no
# issue-number citations (the word "issue" followed by a number, with or without a space or "#"). CHANGELOG.md, a record
# of changes, is not scanned.
TICKET = re.compile(r"issue ?#?[0-9]+", re.IGNORECASE)
SCANNED = ("attnsim", "tests", "benchmarks", "docs", "examples", "experiments", "configs", ".ci")
SCANNED_FILES = ("README.md", "CONTRIBUTING.md", "Makefile", "pyproject.toml", "mkdocs.yml", ".gitignore")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".js", ".css", ".html", ".sh", ".jsonl", ".cfg", ""}


def scanned_files():
    for name in SCANNED_FILES:
        yield ROOT / name
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                yield path


def test_the_ticket_pattern_finds_citations_and_nothing_else():
    cited = ["is" + "sue 12", "Is" + "sue #7", "IS" + "SUE42", "(is" + "sue 3, item 2)"]
    assert [bool(TICKET.search(text)) for text in cited] == [True, True, True, True]
    assert [bool(TICKET.search(text)) for text in ["issues", "an issue with 2 heads", "tissue", "#12"]] == [False, False, False, False]


def test_no_issue_numbers_in_code_tests_benchmarks_or_docs():
    hits = []
    for path in scanned_files():
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if TICKET.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert hits == [], "say what the thing is, not which issue made it:\n" + "\n".join(hits)
