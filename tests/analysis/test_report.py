"""The reproduction report: verdict rules on hand-made runs, and the report of a trained model
against its random-weights control on the bundled MiniLM."""

from __future__ import annotations

import re

import pytest

from attnsim.analysis.claims import CLAIMS, Groups, verdict
from attnsim.analysis.report import render
from attnsim.analysis.runs import LoggedRun
from attnsim.cli import main
from attnsim.tracking.store import Tracker
from tests.helpers.runs import fake_compare_run, fake_report_run, runs_of


def test_verdict_rule():
    assert verdict([True, True]) == "holds"
    assert verdict([True, None]) == "holds"
    assert verdict([False, False]) == "does not hold"
    assert verdict([True, False]) == "mixed"
    assert verdict([None]) == "not measured"


@pytest.mark.parametrize(
    "layers, groups",
    [(6, ([0, 1], [2, 3], [4, 5])), (12, ([0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11])), (3, ([0], [1], [2])), (2, ([0], [], [1]))],
)
def test_layer_groups(layers, groups):
    g = Groups.of(layers)
    assert (g.early, g.middle, g.final) == groups


def test_verdicts_of_a_hand_made_run():
    run = fake_report_run()
    groups = Groups.of(run.n_layers)
    verdicts = [claim.evaluate(run, groups).verdict for claim in CLAIMS]
    assert verdicts == ["holds", "holds", "mixed", "does not hold", "holds", "holds", "mixed"]
    repetition = CLAIMS[5].evaluate(run, groups)
    assert "L2H2" in repetition.values and "L1H0" not in repetition.values.split("repetition heads:")[1]


def test_render_has_one_row_per_claim_and_a_column_per_run():
    text = render([fake_report_run(), fake_report_run(control=True)])
    rows = [line for line in text.splitlines() if re.match(r"\| \d\. ", line)]
    assert len(rows) == len(CLAIMS)
    assert all(row.count(" | ") == 2 for row in rows)  # claim, then one verdict per run
    assert [line for line in text.splitlines() if line.startswith("## ")][2:-1] == [f"## {n}. {c.title}" for n, c in enumerate(CLAIMS, start=1)]
    assert "random-weights control" in text and "same windows" in text
    assert "## Rules" in text and "paper: preference above 33%" in text


def test_a_run_without_the_statistics_is_not_measured():
    run = LoggedRun("a" * 32, "csm", "FINISHED", "0", metrics={"csm/long_range_share/L00": 0.3, "csm/long_range_share_chance/L00": 0.2})
    groups = Groups.of(run.n_layers)
    outcomes = [claim.evaluate(run, groups) for claim in CLAIMS]
    assert outcomes[0].verdict == "holds"  # falls back to the csm finding's statistic; no middle layer
    assert [o.verdict for o in outcomes[2:]] == ["not measured"] * 5


def test_unknown_run_is_an_error_without_traceback(tracking_uri, capsys, tmp_path):
    assert main(["report", "0" * 32, "--out", str(tmp_path / "r.md")]) == 2  # the store does not exist yet: not created
    assert "There is no tracking store at" in capsys.readouterr().err and not (tmp_path / "mlruns").exists()
    Tracker(tracking_uri)
    assert main(["report", "0" * 32, "--out", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err
    assert "is not in the tracking store" in err and "Traceback" not in err


def test_bad_run_ids_outputs_and_unfinished_runs_are_refused_without_traceback(tracking_uri, capsys, tmp_path):
    import attnsim
    from attnsim.errors import TrackingError

    tracker = Tracker(tracking_uri)
    finished = fake_compare_run(tracker, "done", {"mean": [1.0, 2.0]}, experiment="e")
    running = tracker.client.create_run(tracker.experiment_id("e"), run_name="live", tags={"attnsim.kind": "measure"}).info.run_id
    with pytest.raises(TrackingError, match=r"Run ids are strings of 32 hexadecimal characters, as `attnsim run` prints them; got None, 123"):
        attnsim.report([None, 123])
    assert main(["report", running, "--out", str(tmp_path / "r.md")]) == 2
    assert f"Run '{running}' is still RUNNING: it has not logged its statistics yet" in capsys.readouterr().err
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for out, message in (
        (blocker / "r.md", f"Cannot write the report to {blocker / 'r.md'}: "),  # its folder is a file
        (tmp_path, f"--out {tmp_path} is a folder; give the Markdown file to write, e.g. --out {tmp_path / 'report.md'}"),
    ):
        assert main(["report", finished, "--out", str(out), "--no-log"]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


@pytest.mark.e2e
def test_report_compares_minilm_with_its_random_control(tracking_uri, tmp_path, capsys):
    common = ["corpus.limit=8", "tracking.figures=false", "trainer.progress_bar=false"]
    assert main(["run", "paper", *common]) == 0
    assert main(["run", "paper", "model.init=random", *common]) == 0
    client, runs = runs_of(tracking_uri)
    by_control = {r.data.tags["attnsim.control"]: r for r in runs}
    assert set(by_control) == {"none", "random"}
    assert all(r.info.status == "FINISHED" for r in runs)
    trained, control = by_control["none"], by_control["random"]
    assert (trained.info.run_name, control.info.run_name) == ("paper · all-MiniLM-L6-v2", "paper-random · all-MiniLM-L6-v2")
    out = tmp_path / "report.md"
    assert main(["report", trained.info.run_id, control.info.run_id, "--out", str(out)]) == 0
    text = out.read_text()
    assert trained.info.run_id in text and control.info.run_id in text
    rows = [line for line in text.splitlines() if re.match(r"\| \d\. ", line)]
    assert len(rows) == len(CLAIMS)
    for row in rows:
        cells = row.rstrip(" |").split(" | ")[1:]
        assert len(cells) == 2 and all(re.match(r"(holds|does not hold|mixed|not measured)", c) for c in cells), row
    verdicts = [
        line for line in text.splitlines() if re.match(r"- paper(-random)? · all-MiniLM-L6-v2 `", line) and "flagged" not in line
    ]  # not the degenerate-heads lines
    assert len(verdicts) == 2 * len(CLAIMS) and all(re.search(r": \*\*(holds|does not hold|mixed|not measured)\*\*", v) for v in verdicts)
    assert "L5 " in text.split("## 2. ")[1].split("## 3. ")[0]  # values for every layer of the 6-layer MiniLM
    for run in (trained, control):
        assert [a.path for a in client.list_artifacts(run.info.run_id, "reports")] == ["reports/report.html", "reports/report.md"]
    # the learned pattern the control lacks: same-sentence preference
    assert trained.data.metrics["sentences/same_sentence_ratio"] > control.data.metrics["sentences/same_sentence_ratio"]


def test_differences_within_the_margin_count_as_none():
    """A control-like run: every share within 1% of chance and of the other layer groups."""
    m = {}
    for index in range(6):
        m[f"distance/short_range_share/L{index:02d}"] = 0.0650 + 0.0003 * (index % 2)
        m[f"distance/short_range_share_chance/L{index:02d}"] = 0.0646
        m[f"sentences/same_sentence_share/L{index:02d}"] = 0.217
        m[f"sentences/same_sentence_share_chance/L{index:02d}"] = 0.215
        m[f"sentences/boundary_contrast/L{index:02d}"] = 1.01
        m[f"sentences/within_sentence_spread/L{index:02d}"] = 1.0 - 0.005 * (index < 4)
    run = LoggedRun("c" * 32, "paper-random", "FINISHED", "0", tags={"attnsim.control": "random"}, metrics=m)
    groups = Groups.of(run.n_layers)
    assert CLAIMS[1].evaluate(run, groups).verdict == "does not hold"
    assert CLAIMS[2].evaluate(run, groups).verdict == "does not hold"
