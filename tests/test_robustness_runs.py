"""Runs whose process died without ending them (SIGKILL, the out-of-memory killer): RUNNING in MLflow for ever,
until the next attnsim command on the experiment marks them FAILED, with what they logged kept."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

from mlflow import MlflowClient

from attnsim.tracking.store import Tracker, process_tags
from attnsim.workflows.common import open_tracker
from tests.helpers.runs import runs_of, slow_run


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_dead_running_runs_are_failed_live_ones_left_alone(tracking_uri):
    tracker = Tracker(tracking_uri)
    client = MlflowClient(tracking_uri)
    experiment = tracker.experiment_id("news")
    host = socket.gethostname()
    dead = client.create_run(experiment, tags={"attnsim.host": host, "attnsim.pid": str(_dead_pid())}).info.run_id
    client.log_metric(dead, "csm/mean", 1.5)
    mine = client.create_run(experiment, tags=process_tags()).info.run_id  # this very process: alive
    reused = client.create_run(experiment, tags={**process_tags(), "attnsim.process_start": "1"}).info.run_id  # a reused pid
    elsewhere = client.create_run(experiment, tags={"attnsim.host": "another-machine", "attnsim.pid": str(_dead_pid())}).info.run_id
    open_tracker(tracking_uri, "news")
    status = {run_id: client.get_run(run_id).info.status for run_id in (dead, mine, reused, elsewhere)}
    assert status == {dead: "FAILED", mine: "RUNNING", reused: "FAILED", elsewhere: "RUNNING"}
    failed = client.get_run(dead)
    assert failed.data.metrics["csm/mean"] == 1.5 and "process ended without closing the run" in failed.data.tags["attnsim.error"]


def test_a_sigkilled_run_is_failed_by_the_next_command(tracking_uri, tiny_bert, text_dir, tmp_path):
    proc = slow_run(tracking_uri, tiny_bert, text_dir, tmp_path)
    for line in proc.stdout:
        if line.startswith("batch"):
            proc.send_signal(signal.SIGKILL)  # nothing runs after this: no handler, no finally
            break
    proc.communicate(timeout=60)
    (run,) = runs_of(tracking_uri)[1]
    assert run.info.status == "RUNNING" and run.data.tags["attnsim.pid"] == str(proc.pid)
    time.sleep(0.1)
    open_tracker(tracking_uri, "csm")  # what `attnsim run csm ...` does first
    run = MlflowClient(tracking_uri).get_run(run.info.run_id)
    assert run.info.status == "FAILED" and "process ended without closing the run" in run.data.tags["attnsim.error"]


def test_a_server_whose_database_is_down_fails_in_seconds_with_its_error(tiny_bert, capsys):
    """`mlflow server` up, PostgreSQL behind it stopped: every request answers 500. attnsim says so at once, with the
    server's own message, before any model loads (MLflow's client retried for about 257 s)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from attnsim.cli import main

    class DatabaseDown(BaseHTTPRequestHandler):
        def _answer(self):
            body = json.dumps(
                {
                    "error_code": "INTERNAL_ERROR",
                    "message": '(psycopg.OperationalError) connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused',
                }
            ).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), DatabaseDown)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        start = time.perf_counter()
        code = main(["run", "csm", f"model.path={tiny_bert}", "corpus.limit=2", "--uri", f"http://127.0.0.1:{server.server_address[1]}"])
        elapsed = time.perf_counter() - start
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert code == 2 and elapsed < 15, (elapsed, err)
    assert "answers, but cannot serve requests (HTTP 500: (psycopg.OperationalError) connection failed" in err and "PostgreSQL" in err
