"""The shared tracking server: `attnsim server` = `mlflow server` on PostgreSQL with proxied
artifacts; every logging command takes `--uri` (or MLFLOW_TRACKING_URI); a `paper` run, a report and a sweep
logged through the server are read back. The server tests skip, saying why, where PostgreSQL is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient

from attnsim.cli import build_parser, main
from attnsim.tracking.server import ServerError, check_backend, hide_password, server_command
from tests.helpers.runs import SWEEP, children_of, tiny_fit

TINY_TEXT = ["corpus=text", "corpus.seq_len=32", "corpus.limit=4", "tracking.figures=false", "trainer.progress_bar=false", "plots.examples=0"]


# -- without PostgreSQL ----------------------------------------------------------------------------------------


def test_server_command_is_mlflow_server_on_loopback_with_proxied_artifacts(tmp_path):
    command = server_command("postgresql://u@127.0.0.1:5432/db", tmp_path / "art")
    assert command[1:4] == ["-m", "mlflow", "server"]
    args = command[4:]
    assert args[args.index("--backend-store-uri") + 1] == "postgresql://u@127.0.0.1:5432/db"
    assert "--serve-artifacts" in args and args[args.index("--artifacts-destination") + 1] == str(tmp_path / "art")
    assert args[args.index("--host") + 1] == "127.0.0.1" and args[args.index("--port") + 1] == "5000"
    assert build_parser().parse_args(["server"]).host == "127.0.0.1"


def test_password_is_hidden_in_messages():
    assert hide_password("postgresql://bob:secret@db:5432/mlflow") == "postgresql://bob:***@db:5432/mlflow"


def test_server_refuses_a_store_that_is_not_postgresql(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("ATTNSIM_BACKEND_STORE_URI", raising=False)
    assert main(["server", "--backend-store-uri", f"sqlite:///{tmp_path}/mlflow.db"]) == 2
    err = capsys.readouterr().err
    assert "is not a PostgreSQL database" in err and "postgresql://USER@HOST:PORT/DB" in err and "Traceback" not in err
    assert main(["server"]) == 2
    assert "--backend-store-uri postgresql://" in capsys.readouterr().err


def test_server_refuses_an_unreachable_database_before_starting():
    with pytest.raises(ServerError, match=r"Cannot connect to the PostgreSQL backend store postgresql://bob:\*\*\*@127.0.0.1:1/x: .*pg_ctl"):
        check_backend("postgresql://bob:pw@127.0.0.1:1/x", timeout_s=2)


@pytest.mark.parametrize("command", [["run", "csm"], ["sweep", "csm", "--checkpoints", "x"], ["finetune"]])
def test_every_logging_command_takes_uri(command):
    args = build_parser().parse_args([*command, "--uri", "http://127.0.0.1:5000"])
    assert args.uri == "http://127.0.0.1:5000"


def test_run_uses_uri_over_the_environment(capsys, tracking_uri, tiny_bert, text_dir):
    """--uri wins over $MLFLOW_TRACKING_URI: an unreachable server there is refused before any run is made."""
    assert main(["run", "csm", f"model.path={tiny_bert}", f"corpus.path={text_dir}", *TINY_TEXT, "--uri", "http://127.0.0.1:1"]) == 2
    assert "The MLflow tracking server http://127.0.0.1:1 cannot be reached" in capsys.readouterr().err
    assert not Path(tracking_uri[len("sqlite:///") :]).exists()


# -- through a real server on PostgreSQL -------------------------------------------------------------------------


def test_paper_run_and_report_through_the_server(mlflow_server, tiny_bert, text_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    name = f"paper-server-{tmp_path.name}"
    assert main(["run", "paper", f"model.path={tiny_bert}", f"corpus.path={text_dir}", f"tracking.experiment={name}", *TINY_TEXT, "--uri", mlflow_server]) == 0
    assert f"tracking store: {mlflow_server}" in capsys.readouterr().out
    assert not (tmp_path / "mlruns").exists()  # nothing went to the default SQLite store
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name(name)
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.data.metrics["zz_run/windows"] == 4
    assert run.info.artifact_uri.startswith("mlflow-artifacts:/")  # proxied by the server
    assert "config.yaml" in [a.path for a in client.list_artifacts(run.info.run_id)]

    out = tmp_path / "report.md"
    assert main(["report", run.info.run_id, "--out", str(out), "--uri", mlflow_server]) == 0
    assert [a.path for a in client.list_artifacts(run.info.run_id, "reports")] == ["reports/report.html", "reports/report.md"]
    fetched = Path(client.download_artifacts(run.info.run_id, "reports/report.md", str(tmp_path / "back")))
    assert fetched.read_text() == out.read_text() and run.info.run_id in fetched.read_text()


def test_finetune_and_sweep_through_the_server(mlflow_server, tiny_bert, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)  # finetune: the environment; sweep: --uri
    monkeypatch.chdir(tmp_path)
    assert main(["finetune", *tiny_fit(tiny_bert, tmp_path / "ckpt", steps=2, every=2), f"tracking.experiment=ft-{tmp_path.name}"]) == 0
    capsys.readouterr()
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    name = f"sweep-server-{tmp_path.name}"
    assert main(["sweep", "csm", "--checkpoints", str(tmp_path / "ckpt"), *SWEEP, f"tracking.experiment={name}", "--uri", mlflow_server]) == 0
    assert not (tmp_path / "mlruns").exists()
    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name(name)
    (parent,) = client.search_runs([experiment.experiment_id], filter_string="tags.`attnsim.kind` = 'sweep'")
    children = children_of(client, parent)
    assert parent.info.status == "FINISHED" and sorted(int(c.data.tags["attnsim.sweep_step"]) for c in children) == [0, 2]
    assert {c.info.status for c in children} == {"FINISHED"}
    assert [m.step for m in sorted(client.get_metric_history(parent.info.run_id, "csm/mean"), key=lambda m: m.step)] == [0, 2]
