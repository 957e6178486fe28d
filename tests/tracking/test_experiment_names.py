"""Experiment names are folders under the store's artifact root: a name that would leave it, or share it, is refused
before any run; names in any script stay inside it."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from attnsim.cli import main
from attnsim.config import load_config
from attnsim.errors import ConfigError, TrackingError
from attnsim.tracking.artifacts import local_artifact_root
from attnsim.tracking.store import Tracker
from tests.helpers.runs import runs_of

TINY = ["corpus=text", "corpus.seq_len=32", "corpus.limit=2", "trainer.batch_size=2", "tracking.figures=false", "plots.examples=0"]

PATH_NAMES = [
    ("..", "holds '..'"),
    ("../news", "holds '..'"),
    ("a/../../b", "holds '..'"),
    ("/abs", "holds an empty part"),
    ("news/", "holds an empty part"),
    ("a//b", "holds an empty part"),
    (".", "holds '.'"),
    ("a/./b", "holds '.'"),
]


def _files(store: Path) -> list:
    return sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())


@pytest.mark.parametrize("name, what", PATH_NAMES)
def test_a_name_that_leaves_or_shares_the_artifact_root_is_refused_before_any_run(name, what, tracking_uri, tmp_path, capsys):
    with pytest.raises(ConfigError) as refused:
        load_config("csm", [f"tracking.experiment={name}"])
    message = str(refused.value)
    assert message.startswith(f"Config key 'tracking.experiment' is \"{name}\", which {what}: ")
    assert "one folder per '/'-separated part" in message and "tracking.experiment=team/news" in message
    assert main(["run", "csm", f"tracking.experiment={name}"]) == 2
    err = capsys.readouterr().err
    assert f"error: Config key 'tracking.experiment' is \"{name}\", which {what}" in err
    assert not (tmp_path / "mlruns").exists()  # refused before the store was opened: nothing created anywhere


@pytest.mark.parametrize("name", [name for name, _ in PATH_NAMES])
def test_the_tracker_refuses_such_a_name_before_creating_anything(name, tracking_uri, tmp_path):
    tracker = Tracker(tracking_uri)
    with pytest.raises(TrackingError, match=rf'MLflow experiment name "{name}" holds .*one folder per'):
        with tracker.run(name):
            pytest.fail("a run was created")
    with pytest.raises(TrackingError, match="one folder per"):
        tracker.check_experiment(name)  # what every command calls before any model loads
    client, runs = runs_of(tracking_uri)
    assert runs == [] and [e.name for e in client.search_experiments()] == ["Default"]
    assert _files(tmp_path / "mlruns") == ["mlflow.db", "mlflow.db.lock"]  # no artifact folder, inside or outside


@pytest.mark.parametrize("name", ["team/news", "Новости", "ニュース", "news 1", "v1.2/..hidden"])
def test_names_of_folders_in_any_script_keep_their_artifacts_inside_the_root(name, tracking_uri, tmp_path):
    assert load_config("csm", [f"tracking.experiment={name}"]).tracking.experiment == name
    tracker = Tracker(tracking_uri)
    with tracker.run(name) as sink:
        MlflowClient(tracking_uri).log_text(sink.run_id, "kept", "note.txt")
    (run,) = runs_of(tracking_uri)[1]
    root = (tmp_path / "mlruns" / "artifacts").resolve()
    folder = local_artifact_root(run.info.artifact_uri).resolve()
    assert folder == root / name / run.info.run_id / "artifacts"
    assert (folder / "note.txt").read_text() == "kept"
    assert [f for f in _files(tmp_path / "mlruns") if not f.startswith("mlflow.db")] == [f"artifacts/{name}/{run.info.run_id}/artifacts/note.txt"]


def test_a_run_into_a_japanese_experiment_logs_inside_the_root(tracking_uri, tiny_bert, text_dir, tmp_path):
    assert main(["run", "csm", f"model.path={tiny_bert}", *TINY, f"corpus.path={text_dir}", "tracking.experiment=ニュース"]) == 0
    (run,) = runs_of(tracking_uri)[1]
    assert run.info.status == "FINISHED"
    outside = [f for f in _files(tmp_path / "mlruns") if not f.startswith(("mlflow.db", f"artifacts/ニュース/{run.info.run_id}/"))]
    assert outside == []
    assert local_artifact_root(run.info.artifact_uri).resolve().is_relative_to((tmp_path / "mlruns" / "artifacts").resolve())
