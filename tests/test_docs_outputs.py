"""The printed output the tutorials show has the form the commands print now.

Each ``text`` block of docs/tutorials/ that shows a command's output is checked against the function that formats
that output: ``attnsim report``'s verdicts at a glance (:func:`attnsim.analysis.report.glance_text`), the end of
``attnsim finetune`` (:func:`attnsim.printed.format_finetune`) and the line ``attnsim server`` starts with
(:func:`attnsim.tracking.server.starting_line`). The numbers in them come from the runs the tutorials describe;
what is checked is everything else: the lines, their labels and order, the column layout, the notes.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import List

import pytest

from attnsim.analysis.report import FLAGGED_NOTE, NONE_MEASURED_NOTE, aligned_table, glance_text
from attnsim.analysis.runs import LoggedRun
from tests.helpers.runs import fake_report_run

TUTORIALS = Path(__file__).resolve().parents[1] / "docs" / "tutorials"
TEXT_BLOCK = re.compile(r"^```text\n(?P<body>.*?)^```", re.M | re.S)
# a run in the glance table: its default name, '<experiment> · <model>', and the first 8 characters of its id ('<run id>' in
# the docs, which hold no run ids; as wide as one, so that the columns line up as the command prints them)
RUN = r"[\w.-]+ · \S+ ([0-9a-f]{8}|<run id>)"
HEADS = r"L\d+H\d+(, L\d+H\d+)*( and \d+ more)?"


def text_blocks(start: str) -> List[str]:
    """The ``text`` blocks of the tutorials whose first line starts with ``start``."""
    return [m["body"] for page in sorted(TUTORIALS.glob("*.md")) for m in TEXT_BLOCK.finditer(page.read_text(encoding="utf-8")) if m["body"].startswith(start)]


def check_glance(text: str) -> None:
    """Assert that ``text`` has the form of :func:`glance_text`: the aligned table, then its notes in order."""
    lines = text.rstrip("\n").split("\n")
    end = lines.index("") if "" in lines else len(lines)
    table, tail = lines[:end], lines[end:]
    rows = [re.split(r"\s{2,}", line.strip()) for i, line in enumerate(table) if i != 1]
    assert all(len(row) == len(rows[0]) for row in rows), "a line of the table has more or fewer cells than its header"
    assert aligned_table(rows) == table, "the table is not aligned as `attnsim report` aligns it"
    header = rows[0]
    assert header[0] == "claim" and all(re.fullmatch(rf"{RUN}( \(control\))?", cell) for cell in header[1:]), header
    trained = [cell for cell in header[1:] if not cell.endswith(" (control)")]
    expected = []
    if any(cell.endswith(" *") for row in rows[1:] for cell in row[1:]):
        expected += ["", FLAGGED_NOTE]
    if len(trained) < len(header) - 1:  # a control: one line per trained run, which control judged it
        controls = tail[len(expected) + 1 : len(expected) + 1 + len(trained)]
        for name, line in zip(trained, controls):
            assert re.fullmatch(rf"{re.escape(name)}: (judged by control {RUN}(, {RUN})*|no matching control \(.+\))", line), line
        expected += ["", *controls]
    while len(tail) > len(expected) + 1 and re.fullmatch(rf"{RUN}: \d+ degenerate head\(s\), high pairs decided by ties: {HEADS}", tail[len(expected) + 1]):
        expected += ["", tail[len(expected) + 1]]
    measured = {int(row[0].split(".")[0]) for row in rows[1:] if re.match(r"\d\. ", row[0])}
    unmeasured = sorted(set(range(1, 8)) - measured)
    if unmeasured and measured:
        expected += ["", f"paper claims {', '.join(map(str, unmeasured))}: not measured by these runs"]
    elif unmeasured:
        expected += ["", NONE_MEASURED_NOTE]
    assert tail == expected


def test_the_glance_checker_accepts_what_glance_text_prints_and_refuses_the_old_form():
    trained = dataclasses.replace(fake_report_run(), name="paper · fake")
    control = dataclasses.replace(fake_report_run(control=True), name="paper-random · fake")
    both = glance_text([trained, control])
    assert FLAGGED_NOTE in both  # same values: the control earns every verdict, each is flagged
    check_glance(both)
    check_glance(glance_text([LoggedRun("a" * 32, "csm · fake", "FINISHED", "0")]))
    old = both.replace("the random-weights control of the same architecture", "the random-weights control")
    with pytest.raises(AssertionError):
        check_glance(old)
    with pytest.raises(AssertionError):
        check_glance(both.replace("paper · fake", "paper"))  # a run named as before runs were named by their model
    with pytest.raises(AssertionError):
        check_glance(both.replace("\n\n*", "\n*"))  # no blank line before the notes


def test_the_tutorials_verdict_tables_have_report_s_form():
    blocks = text_blocks("claim ")
    assert len(blocks) == 2  # induction-smollm2.md: the ablation run, and paper against its random control
    for block in blocks:
        check_glance(block)


def test_the_tutorials_finetune_output_is_what_finetune_prints(monkeypatch):
    from attnsim.printed import format_finetune
    from attnsim.tracking import links
    from attnsim.workflows.finetune import FinetuneResult

    (block,) = text_blocks("run id: ")
    monkeypatch.setattr(links, "ui_command", lambda: "attnsim ui")  # as when attnsim is on PATH
    monkeypatch.setattr(links, "running_ui_port", lambda uri: None)  # no `attnsim ui` serving the store
    run_id = "0123456789abcdef0123456789abcdef"
    folder = f"/tmp/demo/checkpoints/finetune_bbc/{run_id}"
    result = FinetuneResult(
        run_id=run_id,
        experiment_id="1",
        tracking_uri="sqlite:////tmp/demo/mlruns/mlflow.db",
        checkpoint_dir=folder,
        checkpoints=[(step, f"{folder}/step-{step:06d}") for step in (50, 100, 150, 200)],
        metrics={"val/accuracy": 0.934, "val/loss": 0.218},
        labels=["business", "entertainment", "politics", "sport", "tech"],
        seconds=1431.4,
        windows={"train": 2048, "val": 256},
        documents={"train": 445, "val": 61},
        categories={"train": 5, "val": 5},
    )
    assert format_finetune(result).replace(run_id, "RUN_ID") + "\n" == block


def test_the_tutorials_server_line_is_what_server_prints():
    from attnsim.tracking.server import server_command, starting_line

    (block,) = text_blocks("starting: ")
    line = starting_line(server_command("URI", Path("DIR")))
    assert line.replace(sys.executable, "python") + "\n" == block
