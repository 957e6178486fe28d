"""`attnsim compare`: table, CSV, figures and comparison run; refusal of incomparable runs.

Runs are written straight into a temporary tracking store (no model runs), with
the tags and params that `attnsim run` logs, so these tests are fast.
"""

from __future__ import annotations

import math
import re

import pytest

from attnsim.analysis.compare import ComparisonError, compare
from attnsim.cli import main
from attnsim.errors import TrackingError
from attnsim.tracking.store import Tracker
from tests.helpers.runs import fake_compare_run


@pytest.fixture(scope="module")
def store_uri(tmp_path_factory) -> str:
    """One tracking store for this module (creating an SQLite store takes seconds); tests use their own experiments."""
    return f"sqlite:///{tmp_path_factory.mktemp('compare_store') / 'mlflow.db'}"


@pytest.fixture
def tracker(store_uri, monkeypatch, request) -> Tracker:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store_uri)
    tracker = Tracker(store_uri)
    tracker.test_experiment = request.node.name[:60]
    return tracker


def test_table_one_column_per_run_with_layers_and_mean(tracker, tmp_path):
    a = fake_compare_run(tracker, "a", {"mean": [1.0, 2.0], "short_range_share": [0.1, 0.3], "short_range_share_chance": [0.05, 0.05]})
    b = fake_compare_run(tracker, "b", {"mean": [3.0, 5.0, 7.0], "short_range_share": [0.2, 0.4, 0.6], "short_range_share_chance": [0.05, 0.05, 0.05]})
    csv = tmp_path / "out" / "cmp.csv"
    table = compare([a, b], csv_path=str(csv))
    assert list(table.columns) == ["a", "b"]
    assert table.index.names == ["statistic", "layer"]
    assert table.loc[("csm/mean", "L01"), "a"] == 2.0
    assert table.loc[("csm/mean", "mean"), "b"] == 5.0
    assert math.isnan(table.loc[("csm/mean", "L02"), "a"])  # a has two layers only
    assert ("zz_run/windows", "mean") not in table.index
    assert list(table.xs("csm/mean", level="statistic").index) == ["L00", "L01", "L02", "mean"]
    assert csv.is_file() and "csm/short_range_share" in csv.read_text()
    assert [r["run_id"] for r in table.attrs["runs"]] == [a, b]
    legend = table.attrs["runs"][0]
    assert (legend["model"], legend["seq_len"], legend["capture_path"], legend["statistics_path"]) == ("model-a", "128", "dense", "compiled")
    assert legend["attn_implementation"] is None  # a tag the run lacks stays empty

    run = tracker.client.get_run(table.attrs["comparison_run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.tags["attnsim.kind"] == "compare" and run.data.tags["attnsim.compare_runs"] == f"{a},{b}"
    artifacts = {f.path for f in tracker.client.list_artifacts(run.info.run_id)}
    assert {"comparison.csv", "runs.csv", "figures"} <= artifacts
    figures = {f.path for f in tracker.client.list_artifacts(run.info.run_id, "figures/compare")}
    # one figure per statistic; chance levels are drawn inside their statistic's figure
    assert figures == {"figures/compare/csm_mean.png", "figures/compare/csm_short_range_share.png"}


def test_refuses_different_seq_len_unless_forced(tracker):
    a = fake_compare_run(tracker, "a", {"mean": [1.0, 2.0]}, seq_len=128)
    b = fake_compare_run(tracker, "b", {"mean": [1.0, 2.0]}, seq_len=64)
    with pytest.raises(ComparisonError, match=r"not comparable: attnsim.seq_len differs .*128.*64.*--force"):
        compare([a, b], log_run=False)
    table = compare([a, b], force=True)
    assert table.shape[1] == 2 and table.attrs["differences"]
    assert tracker.client.get_run(table.attrs["comparison_run_id"]).data.tags["attnsim.compare_forced"] == "true"


def test_refuses_different_statistic_definitions(tracker):
    a = fake_compare_run(tracker, "a", {"mean": [1.0]}, top_fraction=0.02)
    b = fake_compare_run(tracker, "b", {"mean": [1.0]}, top_fraction=0.05)
    with pytest.raises(ComparisonError, match="stats.top_fraction differs"):
        compare([a, b], log_run=False)


def test_refuses_unfinished_sweep_parent_and_unknown_runs(tracker):
    good = fake_compare_run(tracker, "good", {"mean": [1.0]})
    failed = fake_compare_run(tracker, "failed", {"mean": [1.0]}, status="FAILED")
    parent = fake_compare_run(tracker, "sweep", {"mean": [1.0]}, kind="sweep")
    with pytest.raises(ComparisonError, match="FAILED"):
        compare([good, failed], log_run=False)
    assert compare([good, failed], force=True, log_run=False).shape[1] == 2
    with pytest.raises(ComparisonError, match=f"--parent {parent}"):
        compare([good, parent], log_run=False)
    with pytest.raises(ComparisonError, match="No run 'nope'"):
        compare([good, "nope"], log_run=False)
    with pytest.raises(ComparisonError, match="one way"):
        compare([good], experiment=tracker.test_experiment, log_run=False)


def test_experiment_and_parent_selection(tracker):
    a = fake_compare_run(tracker, "a", {"mean": [1.0]})
    fake_compare_run(tracker, "failed", {"mean": [9.0]}, status="FAILED")
    parent = fake_compare_run(tracker, "sweep csm", {"mean": [1.0]}, kind="sweep")
    late = fake_compare_run(tracker, "csm step 50", {"mean": [3.0]}, parent=parent, step=50)
    early = fake_compare_run(tracker, "csm step 0", {"mean": [2.0]}, parent=parent, step=0)
    table = compare(experiment=tracker.test_experiment, log_run=False)
    assert [r["run_id"] for r in table.attrs["runs"]] == [a, late, early]  # finished measurements, oldest first
    table = compare(parent=parent, log_run=False)
    assert list(table.columns) == ["step 0", "step 50"]
    assert [r["run_id"] for r in table.attrs["runs"]] == [early, late]
    with pytest.raises(ComparisonError, match="No MLflow experiment 'nope'"):
        compare(experiment="nope", log_run=False)


def test_cli_prints_table_and_refuses_with_one_paragraph(tracker, tmp_path, capsys):
    a = fake_compare_run(tracker, "a", {"mean": [1.0, 2.0]})
    b = fake_compare_run(tracker, "b", {"mean": [1.5, 2.5]})
    c = fake_compare_run(tracker, "c", {"mean": [1.5, 2.5]}, seq_len=32)
    csv = tmp_path / "table.csv"
    assert main(["compare", a, b, "--csv", str(csv), "--no-log"]) == 0
    out = capsys.readouterr().out
    assert "csm/mean" in out and "L01" in out and f"run {a}" in out and csv.is_file()
    assert "(8 windows of 128 tokens); capture dense, statistics compiled" in out  # how each column was measured
    assert main(["compare", a, c, "--csv", str(csv)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: These runs' statistics are not comparable") and err.count("\n") == 1


def test_runs_of_one_name_are_labelled_by_corpus(tracker):
    bbc = fake_compare_run(tracker, "csm", {"mean": [1.0]})
    texts = fake_compare_run(tracker, "csm", {"mean": [2.0]}, corpus="text:stories")
    twin = fake_compare_run(tracker, "csm", {"mean": [3.0]})
    assert list(compare([bbc, texts], log_run=False).columns) == ["csm bbc", "csm text:stories"]
    assert list(compare([bbc, twin], log_run=False).columns) == [f"csm [{bbc[:6]}]", f"csm [{twin[:6]}]"]


def test_bad_choices_and_outputs_are_refused_with_the_fix(tracker, tmp_path):
    a = fake_compare_run(tracker, "a", {"mean": [1.0, 2.0]})
    b = fake_compare_run(tracker, "b", {"mean": [1.5, 2.5]})
    with pytest.raises(ComparisonError, match=r"^No runs to compare were given\. Choose them in one way: run ids"):
        compare(log_run=False)
    with pytest.raises(ComparisonError, match=r"^Choose the runs in one way only, not several"):
        compare([a], experiment="x", log_run=False)
    with pytest.raises(ComparisonError, match=f"Run {a} is given more than once; each run is one column"):
        compare([a, a, b], log_run=False)
    with pytest.raises(ComparisonError, match=r"Run ids are strings of 32 hexadecimal characters.*got None"):
        compare([a, None], log_run=False)
    with pytest.raises(ComparisonError, match=rf"Run {a} \('a'\) is a measure run, not a sweep's parent run; --parent takes"):
        compare(parent=a, log_run=False)
    assert list(compare(a, log_run=False, force=True).columns) == ["a"]  # one id given as a string, not its characters
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    for csv, message in (
        (blocker / "t.csv", f"Cannot write the table to {blocker / 't.csv'}: "),
        (tmp_path, f"Cannot write the table to {tmp_path}: it is a folder"),
    ):
        with pytest.raises(ComparisonError, match=re.escape(message)):
            compare([a, b], csv_path=str(csv), log_run=False)


def test_a_store_that_does_not_exist_is_refused_not_created(tmp_path):
    missing = tmp_path / "nothing" / "mlflow.db"
    with pytest.raises(TrackingError, match="There is no tracking store at"):
        compare(["0" * 32, "1" * 32], uri=f"sqlite:///{missing}", log_run=False)
    assert not missing.parent.exists()
