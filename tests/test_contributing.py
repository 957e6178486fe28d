"""CONTRIBUTING.md's recipes stay true: each code excerpt is in its worked example, and the examples run."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.paths import ROOT

EXCERPT = re.compile(r"<!-- from: (\S+) -->\s*```python\n(.*?)```", re.S)


def excerpts():
    return EXCERPT.findall((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"))


def test_contributing_quotes_its_examples_verbatim():
    found = excerpts()
    assert {path for path, _ in found} == {"examples/adjacent_finding.py", "examples/new_family.py"}
    for path, code in found:
        source = (ROOT / path).read_text(encoding="utf-8")
        assert textwrap.dedent(code).strip() in source, f"CONTRIBUTING.md quotes {path}, but the file no longer holds:\n{code}"


@pytest.mark.e2e
def test_the_model_family_recipe_runs(tmp_path):
    """examples/new_family.py: a tiny Qwen3 declared in one line, its capture equal to A @ V, then measured."""
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "new_family.py")], capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "capture checked: Z equals A @ V within" in done.stdout
    assert "attnsim run csm on tiny Qwen3: FINISHED" in done.stdout


def test_the_family_declaration_is_the_one_the_recipe_shows():
    sys.path.insert(0, str(ROOT))
    try:
        from examples.new_family import QWEN3
    finally:
        sys.path.remove(str(ROOT))
    from attnsim.capture.architectures import ARCHITECTURES, ModelKind

    assert QWEN3.kind is ModelKind.DECODER and QWEN3.causal and not QWEN3.vision
    assert QWEN3.output == ARCHITECTURES["llama"].output  # Qwen3 lays its attention out as Llama does
