"""`attnsim sweep ... --jobs N`: children measured in worker processes give what one process gives, nested
under one parent, and a sweep run again skips the finished children."""

from __future__ import annotations

import json
import shutil
import struct

import pandas as pd
import pytest
from mlflow import MlflowClient

import attnsim
from attnsim.cli import main
from attnsim.tracking.sink import run_key
from attnsim.workflows.sweep import SweepError
from tests.helpers.runs import SWEEP


def runs_in(client: MlflowClient, experiment: str):
    """(the sweep parents, the children by step) of one MLflow experiment."""
    eid = client.get_experiment_by_name(experiment).experiment_id
    runs = client.search_runs([eid], order_by=["attributes.start_time ASC"])
    parents = [r for r in runs if r.data.tags.get("attnsim.kind") == "sweep"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


def statistics(run) -> dict:
    """A run's logged metrics but its phase timings (``zz_run/time_*``, seconds), which differ run to run."""
    return {k: v for k, v in run.data.metrics.items() if not k.startswith(run_key("time_"))}


def test_two_jobs_give_the_metrics_of_one_nested_under_one_parent(checkpoints, tracking_uri, capsys):  # noqa: F811
    one = attnsim.sweep("csm", str(checkpoints), [*SWEEP, "tracking.experiment=one"], jobs=1)
    assert main(["sweep", "csm", "--jobs", "2", "--checkpoints", str(checkpoints), *SWEEP, "tracking.experiment=two"]) == 0
    assert "3 children: 3 measured now, up to 2 at once, 0 already finished" in capsys.readouterr().out

    client = MlflowClient(tracking_uri)
    (p1,), c1 = runs_in(client, "one")
    (p2,), c2 = runs_in(client, "two")
    assert p2.info.status == "FINISHED"
    assert {c.data.tags["mlflow.parentRunId"] for c in c2} == {p2.info.run_id}
    assert {c.info.status for c in c2} == {"FINISHED"} and {c.data.tags["attnsim.kind"] for c in c2} == {"sweep_child"}
    by_step_1 = {int(c.data.tags["attnsim.sweep_step"]): c for c in c1}
    by_step_2 = {int(c.data.tags["attnsim.sweep_step"]): c for c in c2}
    assert sorted(by_step_2) == [0, 2, 4]
    for step in (0, 2, 4):
        s1, s2 = statistics(by_step_1[step]), statistics(by_step_2[step])
        assert len(s1) > 10 and s1 == s2  # the same floats, bit for bit
        assert by_step_2[step].data.metrics["sweep/global_step"] == step
        assert by_step_2[step].info.run_name == f"step-{step:06d}"
    # the parent's curves: one point per step, the child's value, whatever order the workers finished in
    for key in ("csm/mean", "distance/short_range_share"):
        history = sorted(client.get_metric_history(p2.info.run_id, key), key=lambda m: m.step)
        assert [(m.step, m.value) for m in history] == [(s, by_step_2[s].data.metrics[key]) for s in (0, 2, 4)]
        assert history == sorted(client.get_metric_history(p2.info.run_id, key), key=lambda m: m.timestamp)  # logged in step order
    assert statistics(client.get_run(p1.info.run_id)).keys() == statistics(client.get_run(p2.info.run_id)).keys()

    # the same sweep again: the same parent, every child skipped, nothing logged twice
    again = attnsim.sweep("csm", str(checkpoints), [*SWEEP, "tracking.experiment=two"], jobs=2)
    assert again.parent_run_id == p2.info.run_id and list(again.runs["status"]) == ["skipped"] * 3
    assert len(runs_in(client, "two")[1]) == 3
    assert len(client.get_metric_history(p2.info.run_id, "csm/mean")) == 3
    pd.testing.assert_frame_equal(again.metrics, one.metrics, check_exact=True)  # the parents' curves: the same floats


def test_a_failing_child_fails_the_parent_keeps_the_others_and_resume_measures_it(checkpoints, tracking_uri, tmp_path):  # noqa: F811
    from transformers import BertConfig, BertModel

    from tests.helpers.models import save_tiny_model

    good = tmp_path / "good"
    shutil.copytree(checkpoints / "step-000002", good)
    # a whole checkpoint whose embedding has 100 rows for the tokenizer's 30,522 ids: it loads, then fails while its
    # child run measures (an IndexError in the worker), not as an unreadable checkpoint
    shutil.rmtree(checkpoints / "step-000002")
    save_tiny_model(checkpoints / "step-000002", seed=1)  # its tokenizer files, then a model of 100 ids over its weights
    small = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=256)
    BertModel(small).save_pretrained(checkpoints / "step-000002")
    (checkpoints / "step-000002" / "attnsim_checkpoint.json").write_text((good / "attnsim_checkpoint.json").read_text())
    with pytest.raises(IndexError, match="index out of range"):  # torch's own error, raised in the worker, re-raised here
        attnsim.sweep("csm", str(checkpoints), SWEEP, jobs=2)
    client = MlflowClient(tracking_uri)
    (parent,), children = runs_in(client, "csm")
    assert parent.info.status == "FAILED"
    assert {c.info.status for c in children if c.data.tags["attnsim.sweep_step"] == "2"} == {"FAILED"}  # created, then failed
    finished = {c.data.tags["attnsim.sweep_step"]: c.info.run_id for c in children if c.info.status == "FINISHED"}
    assert "2" not in finished and "0" in finished  # step 0 ran beside the failing one; step 4 ran or was cancelled
    assert sorted(m.step for m in client.get_metric_history(parent.info.run_id, "csm/mean")) == sorted(int(s) for s in finished)

    shutil.rmtree(checkpoints / "step-000002")
    shutil.copytree(good, checkpoints / "step-000002")
    result = attnsim.sweep("csm", str(checkpoints), SWEEP, jobs=2)
    assert result.parent_run_id == parent.info.run_id
    (parent,), children = runs_in(client, "csm")
    assert parent.info.status == "FINISHED"
    now = {c.data.tags["attnsim.sweep_step"]: c.info.run_id for c in children if c.info.status == "FINISHED"}
    assert sorted(now, key=int) == ["0", "2", "4"] and all(now[s] == run_id for s, run_id in finished.items())
    assert dict(zip(result.runs["step"], result.runs["status"]))[2] == "measured"
    assert sorted(m.step for m in client.get_metric_history(parent.info.run_id, "csm/mean")) == [0, 2, 4]


def test_a_checkpoint_a_worker_cannot_load_is_unreadable_and_the_others_are_measured(checkpoints, tracking_uri, capsys):  # noqa: F811
    weights = checkpoints / "step-000002" / "model.safetensors"
    # a whole file whose header names an unknown dtype: config, tokenizer and the weights' byte ranges pass the sweep's
    # checks (a truncated file is skipped before: test_robustness_models.py); loading fails in the worker
    header = json.dumps({"w": {"dtype": "XX", "shape": [1], "data_offsets": [0, 4]}}).encode()
    weights.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    assert main(["sweep", "csm", "--jobs", "2", "--checkpoints", str(checkpoints), *SWEEP]) == 3
    assert "3 children: 2 measured now, up to 2 at once, 0 already finished, 1 unreadable" in capsys.readouterr().out
    client = MlflowClient(tracking_uri)
    (parent,), children = runs_in(client, "csm")
    assert parent.info.status == "FINISHED" and parent.data.tags["attnsim.sweep_unreadable_count"] == "1"
    why = parent.data.tags["attnsim.sweep_unreadable"]
    assert why.startswith("step 2: Could not load the weights of ") and f"from '{checkpoints / 'step-000002'}'" in why
    assert sorted(c.data.tags["attnsim.sweep_step"] for c in children) == ["0", "4"]  # no run of step 2, not even a failed one
    assert {c.info.status for c in children} == {"FINISHED"}
    assert sorted(m.step for m in client.get_metric_history(parent.info.run_id, "csm/mean")) == [0, 4]


def test_jobs_below_one_are_refused_before_any_run(checkpoints, tracking_uri, capsys):  # noqa: F811
    with pytest.raises(SweepError, match="at least 1"):
        attnsim.sweep("csm", str(checkpoints), SWEEP, jobs=0)
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", "csm", "--jobs", "0", "--checkpoints", str(checkpoints), *SWEEP])
    assert exit_.value.code == 2 and "give 1 or more children to measure at once" in capsys.readouterr().err
    client = MlflowClient(tracking_uri)
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []
