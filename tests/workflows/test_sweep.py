"""End to end: fine-tune a tiny model for a few steps, sweep `csm` over its checkpoints, compare the children."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

import attnsim
from attnsim.cli import main
from attnsim.errors import ModelError
from attnsim.workflows.sweep import SweepError
from tests.helpers.runs import SWEEP, children_of, tiny_fit


def test_finetune_then_sweep_then_compare(tiny_bert, tracking_uri, tmp_path, capsys):
    tuned = attnsim.finetune(overrides=tiny_fit(tiny_bert, tmp_path / "ckpt", steps=4, every=2))
    assert [step for step, _ in tuned.checkpoints] == [2, 4]

    result = attnsim.sweep("csm", tuned.checkpoint_dir, SWEEP)
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("csm")
    (parent,) = client.search_runs([experiment.experiment_id], filter_string="tags.`attnsim.kind` = 'sweep'")
    assert parent.info.run_id == result.parent_run_id and parent.info.status == "FINISHED"
    children = children_of(client, parent)
    assert len(children) == 3 and {c.info.status for c in children} == {"FINISHED"}
    by_step = {int(c.data.tags["attnsim.sweep_step"]): c for c in children}
    assert sorted(by_step) == [0, 2, 4]
    assert by_step[0].data.tags["attnsim.model_path"] == str(tiny_bert)  # the base model, from the checkpoints' metadata
    assert by_step[4].data.tags["attnsim.model_path"] == f"{tuned.checkpoint_dir}/step-000004"
    # one set of windows for every child
    assert {c.data.tags["attnsim.corpus_hash"] for c in children} == {parent.data.tags["attnsim.corpus_hash"]}

    for key in ("csm/mean", "distance/short_range_share", "distance/short_range_share/L01"):
        history = client.get_metric_history(parent.info.run_id, key)
        assert [m.step for m in sorted(history, key=lambda m: m.step)] == [0, 2, 4]
        for m in history:
            assert m.value == pytest.approx(by_step[m.step].data.metrics[key])
    assert "csm/mean/L00/H00" not in parent.data.metrics  # per-head values stay on the children
    assert list(result.metrics.index) == [0, 2, 4] and "csm/mean" in result.metrics.columns
    assert list(result.runs["status"]) == ["measured"] * 3

    table = attnsim.compare(parent=result.parent_run_id, log_run=False)
    assert list(table.columns) == ["step 0", "step 2", "step 4"]
    assert table.loc[("csm/mean", "mean"), "step 2"] == pytest.approx(by_step[2].data.metrics["csm/mean"])

    # the same sweep named by the fine-tuning run id: same parent, nothing measured again
    assert main(["sweep", "csm", "--checkpoints", tuned.run_id, *SWEEP]) == 0
    out = capsys.readouterr().out
    assert f"sweep parent run: {result.parent_run_id}" in out and "0 measured now, 3 already finished" in out
    assert len(children_of(client, parent)) == 3
    assert len(client.get_metric_history(parent.info.run_id, "csm/mean")) == 3
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"


def test_bad_checkpoint_sources_are_refused_before_any_run(tiny_bert, tracking_uri, tmp_path):
    with pytest.raises(SweepError, match="neither an existing directory nor an MLflow run id"):
        attnsim.sweep("csm", str(tmp_path / "missing"), SWEEP)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelError, match="No checkpoint in"):
        attnsim.sweep("csm", str(empty), SWEEP)
    client = MlflowClient(tracking_uri)
    assert client.search_runs([e.experiment_id for e in client.search_experiments()]) == []


def test_checkpoints_of_a_sweep_run_or_a_file_are_refused_with_the_fix(tracking_uri, tmp_path):
    from attnsim.errors import AttnsimError
    from attnsim.tracking.store import Tracker
    from attnsim.workflows.sweep import resolve_checkpoints

    tracker = Tracker(tracking_uri)
    experiment = tracker.experiment_id("sweeps")
    parent = tracker.client.create_run(
        experiment, run_name="sweep", tags={"attnsim.kind": "sweep", "attnsim.checkpoint_dir": str(tmp_path)}
    ).info.run_id  # a sweep's parent carries its checkpoints' folder as a tag too
    with pytest.raises(AttnsimError, match=rf"Run {parent} \('sweep'\) is a sweep run, not a run of `attnsim finetune`; --checkpoints takes"):
        resolve_checkpoints(parent, tracker)
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    with pytest.raises(AttnsimError, match=r"Checkpoint directory '.*notes.txt' is a file, not a directory\. Give the folder `attnsim finetune` saved"):
        resolve_checkpoints(str(afile), tracker)
