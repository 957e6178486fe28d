"""Tracking URIs where something answers, but not as an MLflow server that can serve a run: a proxy's login page
(HTML with HTTP 200) on every path, a server that answers the experiment search but hangs or fails on the run search.
Each is one ``error:`` line naming the URI and what came back, before any model loads and without MLflow's retries
(minutes), and nothing is created on the server."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator, List, Tuple

import pytest

from attnsim.cli import main
from attnsim.errors import TrackingError
from attnsim.tracking.store import Tracker, existing_tracker

LOGIN_PAGE = b"<!doctype html><html><head><title>Sign in \xe2\x80\x93 Corp Proxy</title></head><body><form>...</form></body></html>"
HANG_S = 120.0  # how long a hanging endpoint holds a request (released when the test ends): far beyond the probe's timeout
TINY = ["corpus=text", "corpus.seq_len=32", "corpus.limit=2", "tracking.figures=false", "plots.examples=0"]

Answer = Tuple[int, str, bytes]  # status, content type, body; a 302's content type is its Location


def login_page(path: str) -> Answer:
    return 200, "text/html; charset=utf-8", LOGIN_PAGE


def experiments_only(runs: Callable[[str], Answer]) -> Callable[[str], Answer]:
    """MLflow's answers to the experiment calls (no experiment yet); ``runs`` answers every other path."""

    def answer(path: str) -> Answer:
        if path.startswith("/api/2.0/mlflow/experiments/search"):
            return 200, "application/json", json.dumps({"experiments": [{"experiment_id": "7", "name": "other"}]}).encode()
        if path.startswith("/api/2.0/mlflow/experiments/get-by-name"):
            return 404, "application/json", json.dumps({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no such experiment"}).encode()
        return runs(path)

    return answer


@pytest.fixture
def fake_server() -> Iterator[Callable[[Callable[[str], Answer]], Tuple[str, List[str], list]]]:
    """Start a throw-away HTTP server on a free 127.0.0.1 port answering by a function of the path (``None``: hold the
    request until the test ends); yields a starter returning (URI, the requests asked, their JSON bodies)."""
    servers = []
    release = threading.Event()

    def start(answer: Callable[[str], Answer]):
        asked: List[str] = []
        bodies: list = []

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                asked.append(f"{self.command} {self.path}")
                bodies.append(json.loads(body) if body else None)
                reply = answer(self.path)
                if reply is None:
                    release.wait(HANG_S)
                    return
                status, kind, body = reply
                self.send_response(status)
                self.send_header("Location" if status == 302 else "Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_DELETE = _answer

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", asked, bodies

    yield start
    release.set()
    for server in servers:
        server.shutdown()
        server.server_close()


def _run_cli(uri: str, tiny_bert, text_dir, monkeypatch, capsys) -> Tuple[int, List[str], float]:
    import attnsim.workflows.run as runner

    monkeypatch.setattr(runner, "build_module", lambda *a, **k: pytest.fail("model loaded before the store was checked"))
    started = time.monotonic()
    code = main(["run", "csm", f"model.path={tiny_bert}", *TINY, f"corpus.path={text_dir}", f"tracking.uri={uri}"])
    elapsed = time.monotonic() - started
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return code, err, elapsed


def test_a_proxy_login_page_is_one_error_line_naming_it(fake_server, tiny_bert, text_dir, monkeypatch, capsys):
    uri, asked, _ = fake_server(login_page)
    code, err, _ = _run_cli(uri, tiny_bert, text_dir, monkeypatch, capsys)
    assert code == 2
    errors = [line for line in err if line.startswith("error:")]
    assert errors == [
        f"error: The tracking URI {uri} does not answer as an MLflow server: /api/2.0/mlflow/experiments/search came back as "
        'HTTP 200 text/html, an HTML page titled "Sign in \u2013 Corp Proxy", not MLflow\'s JSON. A proxy in front of the server '
        "(a login page) or another web service answered: give the MLflow server's own address (http://HOST:PORT, as `attnsim server` "
        "or `mlflow server` prints it), or its credentials (MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD), in --uri, tracking.uri or MLFLOW_TRACKING_URI."
    ]
    assert not any("Traceback" in line for line in err)
    assert asked == ["POST /api/2.0/mlflow/experiments/search"]  # one request, no retry, nothing created


def test_a_redirect_to_a_login_page_says_where_it_went(fake_server):
    login, _, _ = fake_server(login_page)
    uri, asked, _ = fake_server(lambda path: (302, f"{login}/sso/login?next={path}", b""))
    with pytest.raises(TrackingError) as refused:
        Tracker(uri).check()
    assert (
        f"/api/2.0/mlflow/experiments/search came back as HTTP 200 text/html after a redirect to {login}/sso/login?next=/api/2.0/mlflow/experiments/search, "
        'an HTML page titled "Sign in \u2013 Corp Proxy"'
    ) in str(refused.value)
    assert asked == ["POST /api/2.0/mlflow/experiments/search"]


def test_a_server_that_hangs_on_the_run_search_is_refused_without_waiting(fake_server, tiny_bert, text_dir, monkeypatch, capsys):
    uri, asked, _ = fake_server(experiments_only(lambda path: None))
    code, err, elapsed = _run_cli(uri, tiny_bert, text_dir, monkeypatch, capsys)
    assert code == 2
    errors = [line for line in err if line.startswith("error:")]
    assert errors == [
        f"error: The MLflow tracking server {uri} answered /api/2.0/mlflow/experiments/search but did not answer "
        "/api/2.0/mlflow/runs/search within 5 s (nothing came back). Check that the server and its backend store work (a request that "
        "hangs there hangs every run), or point --uri, tracking.uri or MLFLOW_TRACKING_URI at a working store."
    ]
    assert elapsed < HANG_S / 2  # it did not wait for the hanging request (MLflow's client retried for about 300 s)
    assert asked == ["POST /api/2.0/mlflow/experiments/search", "POST /api/2.0/mlflow/runs/search"]  # nothing created


def test_a_server_that_answers_both_searches_passes_and_the_run_search_names_its_experiment(fake_server):
    uri, asked, bodies = fake_server(experiments_only(lambda path: (200, "application/json", b'{"runs": []}')))
    Tracker(uri).check()
    assert asked == ["POST /api/2.0/mlflow/experiments/search", "POST /api/2.0/mlflow/runs/search"]
    assert bodies == [{"max_results": 1}, {"max_results": 1, "experiment_ids": ["7"]}]


@pytest.mark.parametrize(
    "status, kind, body, shown",
    [
        (500, "text/html", b"<html><head><title>502 Bad Gateway</title></head></html>", 'HTTP 500 text/html, an HTML page titled "502 Bad Gateway"'),
        (503, "application/json", b'{"error_code": "TEMPORARILY_UNAVAILABLE", "message": "database is locked"}', "HTTP 503: database is locked"),
    ],
)
def test_a_server_that_fails_the_run_search_is_refused_with_its_answer(fake_server, status, kind, body, shown):
    uri, asked, _ = fake_server(experiments_only(lambda path: (status, kind, body)))
    with pytest.raises(TrackingError) as refused:
        existing_tracker(uri)  # what `attnsim runs`, `report` and `compare` open
    message = str(refused.value)
    assert message.startswith(f"The MLflow tracking server {uri} answers, but cannot serve requests ({shown}) at /api/2.0/mlflow/runs/search.")
    assert "\n" not in message
    assert asked == ["POST /api/2.0/mlflow/experiments/search", "POST /api/2.0/mlflow/runs/search"]  # no retry


@pytest.mark.parametrize(
    "status, kind, body, shown",
    [
        (404, "text/html", b"<html><title>Not Found</title></html>", 'HTTP 404 text/html, an HTML page titled "Not Found"'),
        (200, "text/plain", b"OK\n  all good", 'HTTP 200 text/plain, "OK all good"'),
        (404, "application/json", b'{"detail": "Not Found"}', 'HTTP 404 application/json, "{"detail": "Not Found"}"'),
        (200, "application/json", b"[1, 2]", 'HTTP 200 application/json, "[1, 2]"'),
    ],
)
def test_answers_that_are_not_mlflows_json_are_refused(fake_server, status, kind, body, shown):
    uri, _, _ = fake_server(lambda path: (status, kind, body))
    with pytest.raises(TrackingError) as refused:
        Tracker(uri).check()
    assert f"does not answer as an MLflow server: /api/2.0/mlflow/experiments/search came back as {shown}, not MLflow's JSON." in str(refused.value)


def test_a_server_asking_for_credentials_is_left_to_mlflows_client(fake_server):
    uri, asked, _ = fake_server(lambda path: (401, "text/plain", b"Unauthorized"))
    with pytest.raises(TrackingError, match=rf"The MLflow tracking store {uri} cannot be used: .*401"):
        Tracker(uri).check()
    assert asked[0] == "POST /api/2.0/mlflow/experiments/search" and len(asked) == 2  # the probe, then MLflow's one try
