"""A run's artifact root is read in place only when it is on this machine's filesystem; every other URI
(a tracking server's ``mlflow-artifacts:``, S3, another host's ``file:``) is left to MLflow's download."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnsim.tracking.artifacts import local_artifact, local_artifact_root


@pytest.mark.parametrize(
    "uri, expected",
    [
        ("file:///data/mlruns/artifacts/csm/abc/artifacts", Path("/data/mlruns/artifacts/csm/abc/artifacts")),
        ("file://localhost/data/my%20runs/artifacts", Path("/data/my runs/artifacts")),  # percent-escapes decoded, as MLflow does
        ("file:/data/artifacts", Path("/data/artifacts")),
        ("/data/plain/artifacts", Path("/data/plain/artifacts")),
        ("relative/artifacts", Path("relative/artifacts")),
        ("mlflow-artifacts:/1/abc/artifacts", None),
        ("s3://bucket/1/abc/artifacts", None),
        ("http://127.0.0.1:5000/api/2.0/mlflow-artifacts/artifacts/1/abc", None),
        ("file://otherhost/data/artifacts", None),
        ("", None),
        (None, None),
    ],
)
def test_only_a_local_artifact_root_is_a_folder(uri, expected):
    assert local_artifact_root(uri) == expected


def test_an_artifact_path_joins_the_root_by_its_parts_and_may_not_leave_it():
    assert local_artifact("file:///r/artifacts", "tables/csm_heads.csv") == Path("/r/artifacts/tables/csm_heads.csv")
    assert local_artifact("mlflow-artifacts:/1/abc/artifacts", "tables/csm_heads.csv") is None
    for bad in ("../other/tables/x.csv", "/etc/passwd", "tables/../../x.csv", ""):
        with pytest.raises(ValueError, match="relative to the run's artifact root"):
            local_artifact("file:///r/artifacts", bad)


def test_a_relative_sqlite_store_keeps_its_artifacts_beside_it(tmp_path, monkeypatch):
    """sqlite:/// then a relative path is read from the current folder (as MLflow reads it); its artifact root is the
    absolute folder beside the database, so the URI of a relative store is no error (it was: a relative file URI)."""
    from attnsim.tracking.store import Tracker, experiment_location

    monkeypatch.chdir(tmp_path)
    tracker = Tracker("sqlite:///rel/mlflow.db")
    assert (tmp_path / "rel" / "mlflow.db").is_file()
    assert experiment_location(tracker.uri, "news") == (tmp_path / "rel" / "artifacts" / "news").as_uri()
