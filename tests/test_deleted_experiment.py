"""An MLflow experiment deleted in the UI: one paragraph before any model loads, no run created."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient
from mlflow.entities import ViewType

import attnsim
from attnsim.cli import main
from attnsim.errors import TrackingError
from attnsim.tracking.store import Tracker

TINY = ["corpus=text", "corpus.seq_len=32", "corpus.limit=2", "trainer.batch_size=2", "tracking.figures=false", "plots.examples=0"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """One SQLite tracking store for this module (creating one takes seconds)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()
    return uri


@pytest.fixture
def deleted(store, request, monkeypatch):
    """An experiment created and then deleted in the store: (client, name, experiment id); the store is $MLFLOW_TRACKING_URI."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    client = MlflowClient(store)
    name = f"gone-{request.node.name[5:20]}"
    experiment_id = client.create_experiment(name)
    client.delete_experiment(experiment_id)
    return client, name, experiment_id


def _no_runs(client, experiment_id):
    return client.search_runs([experiment_id], run_view_type=ViewType.ALL) == []


def _check_message(message: str, name: str, experiment_id: str, uri: str) -> None:
    assert "\n" not in message.strip()  # one paragraph
    assert f"'{name}' (id {experiment_id})" in message and "was deleted" in message
    assert f"MLFLOW_TRACKING_URI='{uri}' mlflow experiments restore --experiment-id {experiment_id}" in message
    assert "tracking.experiment=OTHER_NAME" in message
    assert f"mlflow gc --tracking-uri '{uri}' --experiment-ids {experiment_id}" in message


def test_run_into_a_deleted_experiment_fails_before_the_model_loads(deleted, store, tiny_bert, text_dir, capsys, monkeypatch):
    import attnsim.workflows.run as runner

    client, name, experiment_id = deleted
    monkeypatch.setattr(runner, "build_module", lambda *a, **k: pytest.fail("model loaded before the experiment was checked"))
    code = main(["run", "csm", f"model.path={tiny_bert}", f"corpus.path={text_dir}", *TINY, f"tracking.experiment={name}"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    _check_message(err, name, experiment_id, store)
    assert _no_runs(client, experiment_id)


def test_finetune_into_a_deleted_experiment_fails_before_the_model_loads(deleted, store, tiny_bert, monkeypatch, tmp_path):
    import attnsim.workflows.finetune as finetune

    client, name, experiment_id = deleted
    monkeypatch.setattr(finetune, "trainable_classifier", lambda *a, **k: pytest.fail("model loaded before the experiment was checked"))
    with pytest.raises(TrackingError) as info:
        finetune.finetune(
            "finetune_bbc",
            [f"model.path={tiny_bert}", "corpus.seq_len=32", "corpus.limit=4", f"tracking.experiment={name}", f"checkpoint.dir={tmp_path / 'ck'}"],
        )
    _check_message(str(info.value), name, experiment_id, store)
    assert _no_runs(client, experiment_id) and not (tmp_path / "ck").exists()


def test_sweep_into_a_deleted_experiment_fails_before_anything_else(deleted, store, tmp_path):
    client, name, experiment_id = deleted
    # the experiment is checked before the checkpoints are looked at (these do not exist)
    with pytest.raises(TrackingError) as info:
        attnsim.sweep("csm", str(tmp_path / "missing"), [f"tracking.experiment={name}"])
    _check_message(str(info.value), name, experiment_id, store)
    assert _no_runs(client, experiment_id)


def test_tracker_refuses_a_deleted_experiment_and_accepts_it_restored(deleted, store):
    client, name, experiment_id = deleted
    tracker = Tracker(store)
    with pytest.raises(TrackingError, match="was deleted"):
        tracker.experiment_id(name)  # also where runs are created, not only in the early check
    assert tracker.check_experiment(name + "-new") is None  # missing: created later
    client.restore_experiment(experiment_id)
    assert tracker.check_experiment(name) == experiment_id == tracker.experiment_id(name)
