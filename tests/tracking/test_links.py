"""Links into the MLflow UI open the classic machine-learning view; `attnsim ui` refuses bad stores and ports up front.

Every command that prints a link is run here with its heavy work replaced by a
stub (or, for `compare`, on runs written straight into a temporary store), so
these tests take seconds. tests/tracking/test_ui.py opens the links in Chromium.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import attnsim
from attnsim.cli import main
from attnsim.tracking import links
from attnsim.tracking.ui import UiError, check_port, check_store, server_command, server_env

RUN_ID = "0123456789abcdef0123456789abcdef"
SQLITE = "sqlite:////data/mlruns/mlflow.db"
CLASSIC = "?workflowType=machine_learning"
LINK = re.compile(r"https?://\S+/#/\S+")  # UI links, not store URIs


def test_run_and_experiment_links_select_the_classic_view():
    assert links.run_url("3", RUN_ID, SQLITE) == f"http://127.0.0.1:5000/#/experiments/3/runs/{RUN_ID}{CLASSIC}"
    assert links.run_url("3", RUN_ID, SQLITE, port=5123) == f"http://127.0.0.1:5123/#/experiments/3/runs/{RUN_ID}{CLASSIC}"
    assert (
        links.run_url("3", RUN_ID, artifact="reports/report.md") == f"http://127.0.0.1:5000/#/experiments/3/runs/{RUN_ID}/artifacts/reports/report.md{CLASSIC}"
    )
    assert links.experiment_url("3") == f"http://127.0.0.1:5000/#/experiments/3/runs{CLASSIC}"
    assert links.experiments_url(port=5001) == f"http://127.0.0.1:5001/#/experiments{CLASSIC}"


def test_a_tracking_server_is_linked_directly_and_a_local_store_through_attnsim_ui():
    server = "http://mlflow.lab:8080/"
    assert links.run_url("3", RUN_ID, server) == f"http://mlflow.lab:8080/#/experiments/3/runs/{RUN_ID}{CLASSIC}"
    assert links.open_hint(server, "3", RUN_ID) == f"open it: http://mlflow.lab:8080/#/experiments/3/runs/{RUN_ID}{CLASSIC}"
    ui = links.ui_command()
    assert links.open_hint(SQLITE, "3", RUN_ID) == f"open it: {ui} --uri '{SQLITE}'  then  http://127.0.0.1:5000/#/experiments/3/runs/{RUN_ID}{CLASSIC}"
    assert links.open_hint(SQLITE, "3") == f"open it: {ui} --uri '{SQLITE}'  then  http://127.0.0.1:5000/#/experiments/3/runs{CLASSIC}"


def test_links_say_the_port_of_the_attnsim_ui_serving_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    marker = links.ui_marker(SQLITE)
    assert marker.parent == tmp_path / "attnsim" / "ui" and links.running_ui_port(SQLITE) is None
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"port": 5123, "pid": os.getpid()}))
    assert links.running_ui_port(SQLITE) == 5123
    assert links.open_hint(SQLITE, "3", RUN_ID) == f"open it: http://127.0.0.1:5123/#/experiments/3/runs/{RUN_ID}{CLASSIC}  (attnsim ui serves this store)"
    assert links.running_ui_port("sqlite:////another/mlflow.db") is None  # one marker per store
    marker.write_text(json.dumps({"port": 5123, "pid": 2**22 + 1}))  # above Linux's largest pid: no live process

    assert links.running_ui_port(SQLITE) is None
    assert "--uri" in links.open_hint(SQLITE, "3", RUN_ID)


def test_no_link_is_built_outside_the_links_module():
    """Every link goes through attnsim.tracking.links, so every printed link carries the workflow type."""
    package = Path(attnsim.__file__).parent
    offenders = [str(p.relative_to(package)) for p in package.rglob("*.py") if p.name != "links.py" and "#/experiments" in p.read_text()]
    assert offenders == []


def _printed_links(capsys) -> list:
    return LINK.findall(capsys.readouterr().out)


def test_attnsim_run_prints_a_classic_view_link(monkeypatch, capsys):
    import attnsim.workflows.run

    monkeypatch.setattr(attnsim.workflows.run, "prepare", lambda cfg: cfg)
    monkeypatch.setattr(
        attnsim.workflows.run, "execute", lambda prepared, **kwargs: SimpleNamespace(run_id=RUN_ID, experiment_id="7", windows=2, tracking_uri=SQLITE, rank=0)
    )
    assert main(["run", "csm"]) == 0
    assert _printed_links(capsys) == [f"http://127.0.0.1:5000/#/experiments/7/runs/{RUN_ID}{CLASSIC}"]


def test_attnsim_sweep_prints_the_parent_run_link(monkeypatch, capsys):
    import attnsim.workflows.sweep as sweep_module

    result = sweep_module.SweepResult(
        RUN_ID,
        "4",
        SQLITE,
        pd.DataFrame({"step": [0], "checkpoint": ["base"], "run_id": ["c" * 32], "status": ["measured"]}),
        pd.DataFrame({"csm/mean": [0.5]}, index=pd.Index([0], name="step")),
    )
    monkeypatch.setattr(sweep_module, "sweep", lambda *args, **kwargs: result)
    assert main(["sweep", "csm", "--checkpoints", "a" * 32]) == 0
    assert _printed_links(capsys) == [f"http://127.0.0.1:5000/#/experiments/4/runs/{RUN_ID}{CLASSIC}"]


def test_attnsim_finetune_prints_its_run_link(monkeypatch, capsys):
    import attnsim.workflows.finetune as finetune_module

    result = finetune_module.FinetuneResult(
        RUN_ID,
        "5",
        "http://127.0.0.1:7777",
        "/ckpt",
        [(2, "/ckpt/step-000002")],
        {"val/accuracy": 0.5, "val/loss": 1.0},
        ["a", "b"],
        3.0,
        {"train": 8, "val": 4},
    )
    monkeypatch.setattr(finetune_module, "finetune", lambda *args, **kwargs: result)
    assert main(["finetune"]) == 0
    assert _printed_links(capsys) == [f"http://127.0.0.1:7777/#/experiments/5/runs/{RUN_ID}{CLASSIC}"]


def test_attnsim_compare_prints_the_comparison_run_link(tmp_path, monkeypatch, capsys):
    from attnsim.tracking.store import Tracker
    from tests.helpers.runs import fake_compare_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri)
    tracker.test_experiment = "measured"
    first, second = (fake_compare_run(tracker, name, {"mean": [1.0, 2.0]}) for name in ("a", "b"))
    assert main(["compare", first, second, "--uri", uri, "--csv", str(tmp_path / "c.csv")]) == 0
    (link,) = _printed_links(capsys)
    (comparison,) = tracker.client.search_runs([tracker.client.get_experiment_by_name("compare").experiment_id])
    assert link == f"http://127.0.0.1:5000/#/experiments/{comparison.info.experiment_id}/runs/{comparison.info.run_id}{CLASSIC}"


# -- attnsim ui: refusals before anything starts, and the server it starts -------------------


def test_ui_refuses_a_store_with_nothing_in_it(tmp_path, capsys):
    missing = tmp_path / "nowhere" / "mlflow.db"
    assert main(["ui", "--uri", f"sqlite:///{missing}"]) == 2
    err = capsys.readouterr().err
    assert f"There is no tracking store at {missing}" in err and "attnsim run" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "uri, message",
    [
        ("http://mlflow.lab:5000", f"serves its own UI; `attnsim ui` serves local stores only. Open http://mlflow.lab:5000/#/experiments{CLASSIC}"),
        ("./mlruns", "is an MLflow file store"),
        ("file:///tmp/mlruns", "is an MLflow file store"),
    ],
)
def test_ui_refuses_stores_it_cannot_serve(uri, message):
    with pytest.raises(UiError) as error:
        check_store(uri)
    assert message in str(error.value)


def test_ui_refuses_a_store_scheme_mlflow_cannot_serve_before_starting():
    with pytest.raises(UiError, match=r"Tracking store 'bogus://x' is not a database MLflow can serve: its scheme 'bogus'"):
        check_store("bogus://x")


def test_a_host_that_is_not_this_machines_is_not_called_a_port_in_use():
    with pytest.raises(UiError, match=r"--host bogus.invalid is not a name this machine can resolve"):
        check_port(8771, host="bogus.invalid")
    with pytest.raises(UiError, match=r"--host 203.0.113.9 is not an address of this machine"):
        check_port(8771, host="203.0.113.9")


def test_ui_refuses_a_busy_or_impossible_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UiError, match=f"Port {port} on 127.0.0.1 is in use.*attnsim ui --port {port + 1}"):
            check_port(port)
    for bad in (0, 70000):
        with pytest.raises(UiError, match=f"Port {bad} is not a TCP port"):
            check_port(bad)


def test_ui_server_runs_mlflow_in_one_process_without_job_workers(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    command = server_command(uri, 5123)
    assert command[1:] == ["-m", "attnsim.tracking.ui", uri, "5123"]
    assert server_env({"PATH": "/bin", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "true"}) == {"PATH": "/bin", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def test_stop_ends_the_whole_process_group_even_processes_that_ignore_sigterm(tmp_path):
    import os
    import sys
    import time

    from attnsim.tracking.ui import UiServer

    pids = tmp_path / "pids"
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    server = UiServer("sqlite:///unused.db", 5123)
    server.command = [
        sys.executable,
        "-c",
        f"import os, subprocess, sys; child = subprocess.Popen([sys.executable, '-c', {stubborn!r}]); open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}'); exec({stubborn!r})",
    ]
    server.start()
    try:
        deadline = time.monotonic() + 30
        while not (pids.exists() and len(pids.read_text().split()) == 2):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        parent, child = (int(p) for p in pids.read_text().split())
        assert os.getpgid(child) == os.getpgid(parent) == parent  # the grandchild is in the server's group
        server.stop(grace_s=0.5)  # SIGTERM is ignored, so SIGKILL ends them
        assert not server.alive()
        for pid in (parent, child):
            assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    finally:
        server.stop(grace_s=0.1)


def test_the_printed_ui_command_works_from_a_new_shell(monkeypatch):
    """After `make run`, attnsim lives in .venv/bin, which a new shell's PATH lacks: the hint names it in full."""
    import os
    import sys

    here = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert links.ui_command() == f"{os.path.join(here, 'attnsim')} ui"
    monkeypatch.setenv("PATH", here + os.pathsep + "/usr/bin:/bin")  # an activated virtualenv
    assert links.ui_command() == "attnsim ui"


def test_a_port_whose_connections_wait_in_time_wait_is_free():
    """A browser used the previous server: its closed connections wait in TIME_WAIT for a minute or more; a new
    server (SO_REUSEADDR, as MLflow's) can listen there, so the port check must not refuse it."""
    import socket

    from attnsim.tracking.ui import UiError, check_port

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its end waits in TIME_WAIT
    client.close()
    with pytest.raises(UiError, match="is in use"):
        check_port(port)  # still listening: refused
    server.close()
    check_port(port)  # nothing listens now, whatever waits in TIME_WAIT
