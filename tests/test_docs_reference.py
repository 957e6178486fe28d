"""The generated reference pages (docs/gen_reference.py) cover every config key, every statistic and every command."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _leaf_keys(node, prefix=""):
    from omegaconf import DictConfig

    keys = []
    for key in node:
        value = node[key]
        if isinstance(value, DictConfig) and key not in ("build", "tags"):
            keys += _leaf_keys(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


def test_every_config_key_is_documented(gen):
    undocumented = gen.undocumented_config_keys()
    assert not undocumented, f"config keys without a comment in attnsim/config/schema.py (the reference page reads it): {undocumented}"


def test_config_page_lists_every_schema_key(gen):
    from omegaconf import OmegaConf

    from attnsim.config import RunConfig

    schema = OmegaConf.structured(RunConfig)
    page = gen.config_markdown()
    missing = [k for k in _leaf_keys(schema) if f"| `{k}` |" not in page]
    assert not missing, f"schema keys missing from reference/config.md: {missing}"


def test_every_statistic_is_documented(gen):
    missing = gen.undocumented_statistics()
    assert not missing, f"statistics without a line in docs/metric_descriptions.yaml: {missing}"
    stale = gen.stale_descriptions()
    assert not stale, f"docs/metric_descriptions.yaml describes statistics no finding declares: {stale}"


def test_metrics_page_names_every_finding_and_stage(gen):
    from attnsim.findings.registry import FINDINGS
    from attnsim.keys import Stage

    page = gen.metrics_markdown()
    for finding in FINDINGS:
        assert f"### `{finding}`" in page
    for stage in Stage:
        assert f"`zz_run/time_{stage.value}`" in page


def test_cli_and_experiment_pages_cover_every_command_and_experiment(gen):
    import argparse

    from attnsim.cli import build_parser
    from attnsim.config import list_experiments

    cli = gen.cli_markdown()
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in subparsers.choices:
        assert f"## `attnsim {name}`" in cli
    experiments = gen.experiments_markdown()
    for name in list_experiments():
        assert f"| `{name}` |" in experiments


def test_field_comments_read_trailing_and_preceding_comments(gen):
    source = "class A:\n    # above one\n    # above two\n    x: int = 1\n    y: int = 2  # beside\n    z: int = 3\n"
    comments = gen._field_comments(source)
    assert comments[("A", "x")] == "above one above two"
    assert comments[("A", "y")] == "beside"
    assert comments[("A", "z")] == ""


def _user_docs():
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_user_docs_hold_no_issue_numbers_or_commit_hashes():
    import re

    issue = re.compile(r"\bissues? \d+", re.I)
    commit = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")  # hex with digits and letters
    found = []
    for path in _user_docs():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if issue.search(line) or commit.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not found, "development history in user docs (issue numbers, commit hashes or run ids):\n" + "\n".join(found)


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"
    text = "\n".join(lines)
    for command in ("make run", "make test"):
        assert command in text
