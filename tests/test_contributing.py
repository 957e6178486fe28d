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


def test_a_statistic_added_by_the_recipe_reaches_the_reference_and_the_invariant_tests(monkeypatch, tokenizer):
    """The worked example of recipes 1 and 2, registered as the recipe says (one line), with no other edit: the metric
    reference lists its statistics (and asks for their descriptions), and the dense = blockwise invariant runs it and
    holds for it (same values within 1e-6 relative on BBC windows, one padded)."""
    import importlib.util

    import torch

    from attnsim.findings.registry import FINDINGS
    from tests.helpers.blockwise import bert_pair, blockwise_findings, capture_batch, dense_and_blockwise, windows_batch

    monkeypatch.syspath_prepend(str(ROOT))
    from examples.adjacent_finding import AdjacentFinding

    monkeypatch.setitem(FINDINGS, "adjacent", AdjacentFinding)
    assert "adjacent" in blockwise_findings()
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert "adjacent/adjacent_share" in gen.metrics_markdown() and gen.undocumented_statistics() == [
        "adjacent/adjacent_share",
        "adjacent/adjacent_share_chance",
    ]
    _, recorded = bert_pair(len(tokenizer))
    batch = windows_batch(tokenizer, 128, 3)
    (dense, _), (blocks, _) = dense_and_blockwise(capture_batch(recorded, batch, "blockwise"), batch, 128, tokenizer)
    want = next(f for f in dense if f.name == "adjacent").accumulators["adjacent"].compute()
    got = next(f for f in blocks if f.name == "adjacent").accumulators["adjacent"].compute()
    assert float(want["adjacent_share"].nan_to_num(0).sum()) > 0  # some high pairs are adjacent: the comparison has content
    for name in ("adjacent_share", "adjacent_share_chance"):
        torch.testing.assert_close(got[name].double(), want[name].double(), rtol=1e-6, atol=0, equal_nan=True)
