"""A sweep killed after its first child continues, when run again, without repeating that child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from mlflow import MlflowClient

import attnsim
import attnsim.workflows.run
from tests.helpers.runs import SWEEP


def sweep_runs(uri: str):
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("csm")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    parents = [r for r in runs if r.data.tags.get("attnsim.kind") == "sweep"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return client, parents, children


def test_interrupted_sweep_resumes_without_repeating_finished_children(checkpoints, tracking_uri, monkeypatch):
    original = attnsim.workflows.run.predict_loop
    calls = []

    def interrupted_on_second_child(kind, trainer, module, datamodule):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated Ctrl-C during the second child")
        return original(kind, trainer, module, datamodule)

    monkeypatch.setattr(attnsim.workflows.run, "predict_loop", interrupted_on_second_child)
    with pytest.raises(KeyboardInterrupt):
        attnsim.sweep("csm", str(checkpoints), SWEEP)
    client, (parent,), children = sweep_runs(tracking_uri)
    assert parent.info.status == "KILLED"
    assert [(c.data.tags["attnsim.sweep_step"], c.info.status) for c in children] == [("0", "FINISHED"), ("2", "KILLED")]
    first = children[0].info.run_id
    assert [m.step for m in client.get_metric_history(parent.info.run_id, "csm/mean")] == [0]

    monkeypatch.setattr(attnsim.workflows.run, "predict_loop", original)
    result = attnsim.sweep("csm", str(checkpoints), SWEEP)
    client, parents, children = sweep_runs(tracking_uri)
    assert [p.info.run_id for p in parents] == [parent.info.run_id] == [result.parent_run_id]
    assert parents[0].info.status == "FINISHED" and "attnsim.error" not in parents[0].data.tags
    finished = {c.data.tags["attnsim.sweep_step"]: c.info.run_id for c in children if c.info.status == "FINISHED"}
    assert sorted(finished, key=int) == ["0", "2", "4"]
    assert finished["0"] == first  # not measured again
    assert list(result.runs["status"]) == ["skipped", "measured", "measured"]
    assert len([c for c in children if c.data.tags["attnsim.sweep_step"] == "0"]) == 1
    assert sorted(m.step for m in client.get_metric_history(parent.info.run_id, "csm/mean")) == [0, 2, 4]


def test_sweep_process_killed_after_first_child_resumes(checkpoints, tracking_uri, tmp_path):
    """The real thing: SIGKILL the sweep process once its first child is FINISHED, then run it again."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri}
    # 48 windows: each child takes a few seconds, time enough to kill the process between children
    overrides = ["corpus.seq_len=32", "corpus.limit=48", "trainer.progress_bar=false", "tracking.figures=false", "plots.examples=0"]
    command = [sys.executable, "-m", "attnsim.cli", "sweep", "csm", "--checkpoints", str(checkpoints), *overrides]
    process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = MlflowClient(tracking_uri)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and process.poll() is None:
            experiment = client.get_experiment_by_name("csm")
            if experiment is not None and client.search_runs([experiment.experiment_id], "tags.`attnsim.sweep_step` = '0' AND attributes.status = 'FINISHED'"):
                break
            time.sleep(0.2)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    _, (parent,), children = sweep_runs(tracking_uri)
    first = next(c.info.run_id for c in children if c.data.tags["attnsim.sweep_step"] == "0")
    killed_mid_sweep = parent.info.status == "RUNNING"

    rerun = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    _, parents, children = sweep_runs(tracking_uri)
    assert [p.info.run_id for p in parents] == [parent.info.run_id] and parents[0].info.status == "FINISHED"
    # nothing left RUNNING: the child the kill interrupted was ended FAILED ("process ended without closing the run")
    # by the rerun's first look at the experiment, or KILLED by the sweep's own check of its children
    assert {c.info.status for c in children} <= {"FINISHED", "KILLED", "FAILED"}
    finished = {c.data.tags["attnsim.sweep_step"]: c.info.run_id for c in children if c.info.status == "FINISHED"}
    assert sorted(finished, key=int) == ["0", "2", "4"] and finished["0"] == first
    if killed_mid_sweep:
        assert "0 measured now" not in rerun.stdout and "skipped" in rerun.stdout
