"""The benchmark scripts run end to end on a few windows and refuse bad options up front.

Their figures are not checked here (no timed unit tests); only that they run, print the
lines a reader looks for, and exit as documented in the README ("Performance").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def script(name: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_memory_benchmark_runs_and_prints_its_target(tracking_uri):
    out = script("memory.py", "--experiment", "csm", "--small", "4", "--large", "8", "plots.examples=0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| csm | 4 |" in out.stdout and "| csm | 8 |" in out.stdout
    assert "target peak-memory ratio 8/4 windows <= 1.15:" in out.stdout


def test_throughput_benchmark_runs_and_prints_its_table(tracking_uri):
    out = script("throughput.py", "--windows", "8", "--batch-size", "4", "--rounds", "1", "--experiments", "csm", "--no-full-run")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| all-MiniLM-L6-v2 | csm | 8 | sdpa |" in out.stdout
    assert "csm: one forward pass per batch: 2 calls for 2 batches" in out.stdout


@pytest.mark.parametrize(
    "name, args, message",
    [
        ("throughput.py", ["--rounds", "0"], "0 is not a positive number"),
        ("throughput.py", ["--device", "gpu"], "'gpu' is not a device; use cpu or cuda"),
        ("throughput.py", ["--experiments", "csm", "nosuch"], "Unknown experiment 'nosuch'"),
        ("memory.py", ["--small", "64", "--large", "32"], "--small 64 must be fewer windows than --large 32"),
        ("memory.py", ["corpus.nosuch=1"], "Unknown config key 'corpus.nosuch'"),
        ("scaling.py", ["--windows", "0"], "0 is not a positive number"),
        ("scaling.py", ["--server-uri", "127.0.0.1:5000"], "'127.0.0.1:5000' is not a tracking server URI; give http://host:port"),
        ("scaling.py", ["--experiment", "nosuch"], "Unknown experiment 'nosuch'"),
        ("scaling.py", ["--device", "gpu"], "'gpu' is not a device; use cpu or cuda"),
    ],
)
def test_bad_options_stop_before_anything_is_measured(name, args, message):
    out = script(name, *args, timeout=120)
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "RESULT" not in out.stdout
