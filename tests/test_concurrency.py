"""Concurrent processes never break a tracking store.

N = 4 processes, released together by a multiprocessing Barrier, each open the store the way
``attnsim run`` does (``open_tracker``: Tracker set-up, check, deleted-experiment check), then
create a run in a new experiment, log a metric and end it. Against (a) an SQLite store that does
not exist yet, (b) an existing SQLite store, (c) the tracking server on PostgreSQL: every process
finishes, exactly one experiment holds the N runs, and the store takes a later run and passes
``mlflow runs list``. Each case runs 3 times. One pair of full tiny ``attnsim run`` processes
covers case (a) end to end.
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import subprocess
import sys

import mlflow.store.db.utils  # noqa: F401 - imported once here, not in each forked child
import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
import pytest
from mlflow import MlflowClient

from attnsim.errors import TrackingError
from attnsim.tracking.store import HalfMigratedStoreError, Tracker
from attnsim.workflows.common import open_tracker
from tests.helpers.paths import ROOT

N = 4
TRIALS = 3
# fork: the children start in well under a second, so the barrier releases them together; the parent
# never opens the store under test before they finish (no inherited connection)
CTX = multiprocessing.get_context("fork")


def _one_run(uri: str, experiment: str, index: int, barrier, results) -> None:
    try:
        barrier.wait(timeout=60)
        tracker = open_tracker(uri, experiment)  # what `attnsim run` does before the model loads
        with tracker.run(experiment, run_name=f"proc-{index}") as sink:
            sink.log_metrics({"attnsim/windows": float(index)})
        results.put((index, "ok", ""))
    except BaseException as exc:  # noqa: BLE001 - report every failure to the parent
        results.put((index, "error", f"{type(exc).__name__}: {exc}"))


def race(uri: str, experiment: str, n: int = N) -> list:
    """Start ``n`` processes at one instant against ``uri``; return ``(index, status, error)`` of each."""
    barrier, results = CTX.Barrier(n), CTX.Queue()
    procs = [CTX.Process(target=_one_run, args=(uri, experiment, i, barrier, results)) for i in range(n)]
    for p in procs:
        p.start()
    outcome = sorted(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert [p.exitcode for p in procs] == [0] * n
    return outcome


def mlflow_listing(uri: str, experiment_id: str) -> str:
    """``mlflow runs list`` (MLflow's own command line) on the store."""
    env = dict(os.environ, MLFLOW_TRACKING_URI=uri)
    done = subprocess.run(
        [sys.executable, "-m", "mlflow", "runs", "list", "--experiment-id", experiment_id], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def check_store(uri: str, experiment: str, outcome: list, listing: bool) -> None:
    """All N finished; exactly one experiment ``experiment`` holds their N FINISHED runs; a later run works; MLflow lists them."""
    assert outcome == [(i, "ok", "") for i in range(N)]
    client = MlflowClient(uri)
    named = [e for e in client.search_experiments() if e.name == experiment]
    assert len(named) == 1
    runs = client.search_runs([named[0].experiment_id])
    assert sorted(r.info.run_name for r in runs) == [f"proc-{i}" for i in range(N)]
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert sorted(r.data.metrics["attnsim/windows"] for r in runs) == [0.0, 1.0, 2.0, 3.0]
    with Tracker(uri).run(experiment, run_name="later") as sink:
        later = sink.run_id
    assert len(client.search_runs([named[0].experiment_id])) == N + 1
    assert client.get_run(later).info.status == "FINISHED"
    if listing:
        out = mlflow_listing(uri, named[0].experiment_id)
        for r in runs:
            assert r.info.run_id in out


@pytest.mark.parametrize("trial", range(TRIALS))
def test_new_sqlite_store(tmp_path, trial):
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"  # does not exist yet
    check_store(uri, f"race-new-{trial}", race(uri, f"race-new-{trial}"), listing=trial == TRIALS - 1)


@pytest.mark.parametrize("trial", range(TRIALS))
def test_existing_sqlite_store(tmp_path, trial):
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    # the store exists (made by a process of its own, so this one holds no connection to it while they race)
    made = CTX.Process(target=lambda: Tracker(uri).check())
    made.start()
    made.join(timeout=120)
    assert made.exitcode == 0 and (tmp_path / "mlruns" / "mlflow.db").is_file()
    check_store(uri, f"race-old-{trial}", race(uri, f"race-old-{trial}"), listing=trial == TRIALS - 1)


@pytest.mark.parametrize("trial", range(TRIALS))
def test_server(mlflow_server, trial):
    experiment = f"race-server-{trial}-{os.getpid()}"
    check_store(mlflow_server, experiment, race(mlflow_server, experiment), listing=trial == TRIALS - 1)


def test_two_attnsim_runs_on_a_new_store(tmp_path, tiny_bert, text_dir):
    """Two full tiny `attnsim run` processes started together against an SQLite store that does not exist yet."""
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    command = [
        sys.executable,
        "-m",
        "attnsim.cli",
        "run",
        "csm",
        f"model.path={tiny_bert}",
        "corpus=text",
        f"corpus.path={text_dir}",
        "corpus.seq_len=32",
        "corpus.limit=4",
        "tracking.figures=false",
        "plots.examples=0",
        "trainer.progress_bar=false",
        "trainer.threads=1",
        "--uri",
        uri,
    ]
    procs = [subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    client = MlflowClient(uri)
    (experiment,) = [e for e in client.search_experiments() if e.name == "csm"]
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.metrics["zz_run/windows"] for r in runs} == {4.0}


def test_half_migrated_store_is_refused_with_the_repair(tmp_path):
    """A store a crash left with MLflow's temporary migration table: a TrackingError that says how to repair it."""
    path = tmp_path / "mlflow.db"
    uri = f"sqlite:///{path}"
    Tracker(uri).check()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE _alembic_tmp_experiments (experiment_id INTEGER)")
    with pytest.raises(HalfMigratedStoreError) as caught:
        Tracker(uri)
    message = str(caught.value)
    assert "half-migrated" in message and "_alembic_tmp_experiments" in message
    assert f"mlflow db upgrade '{uri}'" in message and "DROP TABLE" in message and ".bak" in message
    assert isinstance(caught.value, TrackingError)


def test_interrupted_upgrade_is_refused_with_the_repair(tmp_path):
    """A store whose recorded schema version is behind its tables (a migration that stopped after altering them):
    upgrading again fails (e.g. ``duplicate column name``), reported as a half-migrated store, not a traceback."""
    path = tmp_path / "mlflow.db"
    uri = f"sqlite:///{path}"
    Tracker(uri).check()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = '451aebb31d03'")  # MLflow's first migration: all later ones run again
    with pytest.raises(HalfMigratedStoreError, match=r"half-migrated.*OperationalError"):
        Tracker(uri)


def test_old_store_is_upgraded_once_under_the_lock(tmp_path, monkeypatch):
    """An up-to-date store is not migrated again; the lock file sits beside the database."""
    from mlflow.store.db import utils as db_utils

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    Tracker(uri).check()
    assert (tmp_path / "mlflow.db.lock").exists()
    calls = []
    monkeypatch.setattr(db_utils, "_upgrade_db", lambda engine: calls.append(engine))
    monkeypatch.setattr(db_utils, "_initialize_tables", lambda engine: calls.append(engine))
    Tracker(uri).check()
    assert calls == []


def test_a_file_that_is_not_sqlite_is_refused(tmp_path):
    path = tmp_path / "mlflow.db"
    path.write_text("not a database " * 100)
    with pytest.raises(TrackingError, match=r"is not an SQLite database .*move this file aside"):
        Tracker(f"sqlite:///{path}")
