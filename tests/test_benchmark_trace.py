"""benchmarks/trace_overhead.py runs end to end on a tiny model and prints its table and targets (its figures are not
checked: no timed unit tests)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.paths import ROOT
from tests.helpers.tiny_models import save_tiny


def test_trace_overhead_benchmark_prints_its_table_and_targets(tmp_path):
    path = save_tiny(tmp_path, "gpt2")
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "trace_overhead.py"), "--model", str(path), "--tokens", "16", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "one text of 16 tokens, 1 rounds, order rotated" in out.stdout
    assert "| plain forward |" in out.stdout and '| trace, names=["pattern"] |' in out.stdout
    assert "target every name <= 1.5 x:" in out.stdout and "target pattern alone <= 1.2 x:" in out.stdout
