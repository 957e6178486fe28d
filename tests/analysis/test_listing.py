"""`attnsim runs`: the store's runs listed newest first, one run described, bad input refused.

Runs are written straight into a temporary tracking store with the tags and params `attnsim run` logs
(tests/helpers/runs.py), so these tests load no model.
"""

from __future__ import annotations

import math
import os
import re
import time

import pytest

from attnsim.analysis.listing import LIST_COLUMNS, describe_run, format_run, format_runs, list_runs
from attnsim.cli import main
from attnsim.errors import TrackingError
from attnsim.tracking.store import Tracker
from tests.helpers.runs import fake_compare_run


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store: runs a, b (experiment 'first', a FAILED) and c (experiment 'second'), started in that order."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('listing') / 'mlflow.db'}"
    tracker = Tracker(uri)
    ids = {}
    for name, experiment, status in (("a", "first", "FAILED"), ("b", "first", "FINISHED"), ("c", "second", "FINISHED")):
        ids[name] = fake_compare_run(tracker, name, {"mean": [1.0, 2.0, 6.0]}, experiment=experiment, status=status)
        time.sleep(0.01)  # distinct start times (milliseconds)
    tracker.client.log_text(ids["c"], "a,b\n", "table.csv")
    tracker.client.log_text(ids["c"], "notes", "figures/readme.txt")
    return uri, ids


def test_runs_are_listed_newest_first_with_what_each_measured(store):
    uri, ids = store
    rows = list_runs(uri)
    assert [r["run_id"] for r in rows] == [ids["c"], ids["b"], ids["a"]]
    assert list(rows[0]) == list(LIST_COLUMNS)
    a = rows[2]
    assert (a["experiment"], a["kind"], a["status"], a["model"], a["corpus"], a["windows"], a["seq_len"], a["capture_path"], a["run_name"]) == (
        "first",
        "measure",
        "FAILED",
        "model-a",
        "bbc",  # the tag attnsim.corpus; no corpus.limit param logged
        "8/8",  # a run that did not finish: measured/planned windows (zz_run/windows of the tag's)
        "128",
        "dense",
        "a",
    )
    assert len(a["start"]) == len("2026-12-02 10:00:00")
    assert [r["run_id"] for r in list_runs(uri, experiment="first")] == [ids["b"], ids["a"]]
    assert [r["run_id"] for r in list_runs(uri, limit=1)] == [ids["c"]]
    table = format_runs(rows).splitlines()
    assert table[0].split()[:3] == ["run", "id", "experiment"] and len(table) == 4 and table[1].startswith(ids["c"])


def test_runs_on_different_corpora_show_their_corpus_and_limit(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri)
    runs = {}
    for name, corpus, limit in (("bbc", "bbc", "64"), ("stories", "text:/data/examples/stories", "None"), ("repeated", "repeated_tokens:20x3", "32")):
        runs[name] = fake_compare_run(tracker, name, {"mean": [1.0, 2.0]}, corpus=corpus, experiment="csm")
        tracker.client.set_tag(runs[name], "attnsim.model", "all-MiniLM-L6-v2")  # one model: only the corpus tells them apart
        tracker.client.log_param(runs[name], "corpus.limit", limit)  # None: corpus.limit=null, every window
        time.sleep(0.01)
    rows = list_runs(uri)
    assert [(r["run_id"], r["corpus"]) for r in rows] == [
        (runs["repeated"], "repeated_tokens:20x3 (limit 32)"),
        (runs["stories"], "text:/data/examples/stories"),
        (runs["bbc"], "bbc (limit 64)"),
    ]
    header, *lines = format_runs(rows).splitlines()
    assert header.split()[:7] == ["run", "id", "experiment", "kind", "status", "model", "corpus"] and len(lines) == 3
    cells = [re.split(r"\s{2,}", line) for line in lines]
    assert [c[5] for c in cells] == ["repeated_tokens:20x3 (limit 32)", "text:/data/examples/stories", "bbc (limit 64)"]
    assert [c[4] for c in cells] == ["all-MiniLM-L6-v2"] * 3
    # without the run id, start time and name, the rows differ by their corpus alone
    bare = [[cell for i, cell in enumerate(c) if i not in (0, len(c) - 2, len(c) - 1)] for c in cells]
    assert [b[:4] + b[5:] for b in bare] == [["csm", "measure", "FINISHED", "all-MiniLM-L6-v2", "8", "128", "dense"]] * 3
    assert len({b[4] for b in bare}) == 3


def test_one_run_is_described_with_its_tags_params_and_model_means(store):
    uri, ids = store
    run = describe_run(ids["b"], uri)
    assert (run.run_name, run.experiment, run.status, run.kind) == ("b", "first", "FINISHED", "measure")
    assert run.tags["attnsim.seq_len"] == "128" and run.tags["attnsim.capture_path"] == "dense"
    assert all(k.startswith("attnsim.") for k in run.tags)  # MLflow's own tags (mlflow.*) are left out
    assert run.params["stats.top_fraction"] == "0.02" and list(run.params) == sorted(run.params)
    assert run.statistics == {"csm/mean": 3.0}  # the model mean (1 + 2 + 6) / 3; layer means and heads are counted
    assert run.layer_and_head_keys == 6  # L00-L02 and L00/H00-L02/H00
    assert run.bookkeeping == {"zz_run/windows": 8.0}
    assert run.end and run.start <= run.end
    assert run.artifacts == [] and describe_run(ids["c"], uri).artifacts == ["figures/", "table.csv"]  # top level, folders marked
    text = format_run(run)
    assert text.startswith(f"run {ids['b']} 'b': experiment 'first', measure, FINISHED; started ")
    assert "\n  csm/mean  3\n" in text and "  and 6 layer-mean and per-head keys: `attnsim compare" in text
    assert re.search(r"\n  stats\.top_fraction +0\.02\n", text)
    assert text.endswith("\nartifacts: (none)") and format_run(describe_run(ids["c"], uri)).endswith("\nartifacts: figures/, table.csv")


def test_bad_input_is_refused_with_the_fix(store):
    uri, ids = store
    with pytest.raises(TrackingError, match=r"MLflow experiment 'frist' is not in the tracking store .* \(its experiments: .*first, second\)"):
        list_runs(uri, experiment="frist")
    with pytest.raises(TrackingError, match=r"Run 'nosuchrun' is not in the tracking store .*`attnsim runs` lists the store's runs"):
        describe_run("nosuchrun", uri)
    with pytest.raises(TrackingError, match=r"Run 'c73c78' is not in .* A run id is 32 lower-case hexadecimal characters"):
        describe_run("c73c78", uri)  # a shortened id
    for limit in (0, 50_001):
        with pytest.raises(ValueError, match=f"limit must be 1 to 50000 runs \\(MLflow's most per search\\), got {limit}"):
            list_runs(uri, limit=limit)


def test_an_empty_store_has_no_runs_and_a_missing_one_is_refused_not_created(tmp_path):
    Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}")  # a new store, as `attnsim run` creates it, without runs
    assert list_runs(f"sqlite:///{tmp_path / 'mlflow.db'}") == []
    assert format_runs([]) == "no runs"
    missing = tmp_path / "typo" / "mlflow.db"
    for call in (lambda: list_runs(f"sqlite:///{missing}"), lambda: describe_run("abc", f"sqlite:///{missing}")):
        with pytest.raises(TrackingError, match=r"There is no tracking store at .*typo/mlflow.db .*run an experiment first"):
            call()
    assert not missing.parent.exists()
    # sqlite:/// then a relative path: read from the current folder, and the message says so and how to write /PATH
    relative = "sqlite:///tmp/attnsim-no-such-store/mlflow.db"
    with pytest.raises(
        TrackingError,
        match=r"from sqlite:///tmp/attnsim-no-such-store/mlflow.db; sqlite:/// then a relative path is read from the current folder, write sqlite:////tmp/attnsim-no-such-store/mlflow.db",
    ):
        list_runs(relative)
    # a plain path where a URI belongs: how to write it
    with pytest.raises(TrackingError, match=r"Tracking store '.*mlflow.db' is a path, not a URI: write an SQLite store as sqlite:///"):
        list_runs(str(tmp_path / "mlflow.db"))


def test_the_command_lists_describes_and_refuses(store, capsys, monkeypatch):
    uri, ids = store
    monkeypatch.delenv("COLUMNS", raising=False)  # output that is no terminal: one line per run
    assert main(["runs", "--uri", uri, "--experiment", "second"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].startswith(ids["c"]) and " second " in out[1]
    assert main(["runs", ids["a"], "--uri", uri]) == 0
    out = capsys.readouterr().out
    assert f"run {ids['a']} 'a': experiment 'first', measure, FAILED" in out and "csm/mean" in out
    assert main(["runs", "nosuchrun", "--uri", uri]) == 2
    assert capsys.readouterr().err.startswith("error: Run 'nosuchrun' is not in the tracking store")
    for limit, message in (
        ("0", "0: give 1 or more runs"),
        ("50001", "50001: give at most 50000 runs (MLflow's most per search)"),
        ("x", "'x' is not a whole number"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(["runs", "--limit", limit, "--uri", uri])
        assert stop.value.code == 2 and message in capsys.readouterr().err
    assert main(["runs", ids["a"], ids["b"], "--uri", uri]) == 2  # one run at a time
    assert f"got 2 run ids. `attnsim compare {ids['a']} {ids['b']}` puts runs side by side" in capsys.readouterr().err
    monkeypatch.setenv("COLUMNS", "100")  # a terminal of 100 columns: two lines a run, none wider
    assert main(["runs", "--uri", uri, "--experiment", "second"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and out[2].startswith(ids["c"]) and max(len(line) for line in out) <= 100


def test_a_nan_statistic_is_printed_as_nan(store):
    uri, ids = store
    run = describe_run(ids["c"], uri)
    run.statistics["csm/spread"] = math.nan
    assert "  csm/spread  nan" in format_run(run)


def test_a_partial_run_shows_what_it_measured_and_a_dead_running_one_is_flagged(tmp_path):
    import socket

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri)
    partial = fake_compare_run(tracker, "cut", {"mean": [1.0]}, experiment="e", status="KILLED")
    tracker.client.set_tag(partial, "attnsim.partial", "true")
    tracker.client.log_metric(partial, "zz_run/windows", 3.0)
    experiment = tracker.experiment_id("e")
    tags = {"attnsim.kind": "measure", "attnsim.windows": "64", "attnsim.host": socket.gethostname()}
    dead = tracker.client.create_run(experiment, run_name="dead", tags={**tags, "attnsim.pid": str(2**22 + 12345)}).info.run_id  # above pid_max
    live = tracker.client.create_run(experiment, run_name="live", tags={**tags, "attnsim.pid": str(os.getpid())}).info.run_id
    rows = {r["run_id"]: r for r in list_runs(uri)}
    assert rows[partial]["windows"] == "3/8" and rows[partial]["status"] == "KILLED"
    assert (rows[dead]["status"], rows[dead]["windows"]) == ("RUNNING (process gone)", "0/64")
    assert rows[live]["status"] == "RUNNING"  # this test's own process
    assert describe_run(dead, uri).status == "RUNNING (process gone)"
    assert tracker.client.get_run(dead).info.status == "RUNNING"  # listing writes nothing


def test_bad_arguments_of_the_python_calls(store):
    uri, _ = store
    for bad in (None, 123):
        with pytest.raises(TrackingError, match=rf"A run id is a string of 32 hexadecimal characters.*got {bad}"):
            describe_run(bad, uri)
    with pytest.raises(ValueError, match=r"limit must be a whole number of runs, 1 to 50000; got '5'"):
        list_runs(uri, limit="5")


def test_a_narrow_terminal_gets_each_run_on_two_lines(store):
    """Wider than the terminal: each run over two lines, none longer than the width, every value there (cut with ...
    only past the width); as wide as it needs, one line per run."""
    uri, ids = store
    rows = list_runs(uri)
    wide = format_runs(rows).splitlines()
    assert max(len(line) for line in wide) > 100 and format_runs(rows, width=500).splitlines() == wide
    narrow = format_runs(rows, width=100).splitlines()
    assert len(narrow) == 2 * len(wide) and max(len(line) for line in narrow) <= 100
    assert narrow[0].split()[:4] == ["run", "id", "status", "experiment"] and narrow[1].split()[:2] == ["model", "corpus"]
    for row, first, second in zip(rows, narrow[2::2], narrow[3::2]):
        assert first.split()[:3] == [row["run_id"], row["status"], row["experiment"]] and row["start"] in first
        assert second.startswith("    ") and second.split()[:2] == [row["model"], row["corpus"]] and row["run_name"] in second
    assert max(len(line) for line in format_runs(rows, width=10).splitlines()[1::2]) <= 60  # second lines: cut at 60 at least
