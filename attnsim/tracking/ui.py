"""``attnsim ui``: serve a local tracking store with the MLflow UI, light and stoppable.

What ``mlflow ui`` / ``mlflow server`` start: MLflow's command line (a Python
process that imports most of MLflow), which then spawns a uvicorn server (a
second full import) and, in MLflow 3, a job runner and seven Huey consumers
for GenAI jobs (scorers, trace rollups) that attnsim never submits: ten
processes, about 1.8-2.7 GB, 25-35 s until the UI answers on this machine.

What ``attnsim ui`` starts instead: one server process that runs MLflow's own
ASGI app (``mlflow.server.fastapi_app:app``, the app ``mlflow server`` runs)
in uvicorn in-process, configured the way ``mlflow server`` configures its
workers (the ``_MLFLOW_SERVER_*`` variables named in ``mlflow.server.constants``,
:func:`mlflow.server.handlers.initialize_backend_stores`), with
``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``. MLflow's security checks stay
on (a foreign Host header is refused); uvicorn is imported before MLflow's
server package, as under ``mlflow server``, so that its Flask app installs
its own security middleware too. It listens on 127.0.0.1 only.

The server runs in a process group of its own, watched by the ``attnsim ui``
process. :func:`serve` waits until ``/health`` answers 200, prints the seconds
that took and the classic-view link, and on Ctrl-C, SIGTERM or SIGHUP stops
the whole group: SIGTERM, then SIGKILL for whatever is left after
:data:`STOP_GRACE_S` seconds.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence
from urllib.parse import urlparse

from attnsim.errors import TrackingError
from attnsim.tracking.links import HOST, classic_fragment, experiments_url, is_server, ui_marker
from attnsim.tracking.store import missing_sqlite_store

NO_JOBS_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
SERVER_MODULE = "attnsim.tracking.ui"  # run with `python -m` as the server process


class UiError(TrackingError):
    """The MLflow UI cannot be started for this store or port."""


DATABASES = ("sqlite", "postgresql", "mysql", "mssql")  # MLflow's SQL stores (a scheme may name a driver: postgresql+psycopg2)


def check_store(uri: str) -> None:
    """Refuse a store ``attnsim ui`` cannot serve, before any process is started.

    Raises:
        UiError: ``uri`` is an MLflow server (it has its own UI), a file store
            (MLflow 3 refuses it), a URI that names no SQL database MLflow knows, or an SQLite database that does not exist
            (nothing was logged there; serving it would show an empty UI).
    """
    if is_server(uri):
        raise UiError(
            f"The tracking store {uri} is an MLflow server, which serves its own UI; `attnsim ui` serves local stores only. Open {experiments_url(uri)} in a browser."
        )
    scheme = urlparse(uri).scheme
    if scheme in ("", "file"):
        raise UiError(
            f"Tracking store '{uri}' is an MLflow file store, which MLflow 3 refuses. Give the SQLite store that `attnsim run` printed (--uri sqlite:///PATH/mlflow.db)."
        )
    if scheme.split("+")[0] not in DATABASES:
        raise UiError(
            f"Tracking store '{uri}' is not a database MLflow can serve: its scheme '{scheme}' is none of {', '.join(DATABASES)}. "
            "Give the SQLite store that `attnsim run` printed (--uri sqlite:///PATH/mlflow.db) or a database URI, e.g. postgresql://USER@HOST/DB."
        )
    missing = missing_sqlite_store(uri)
    if missing:
        raise UiError(missing)


def check_port(port: int, host: str = HOST, command: str = "attnsim ui", default: int = 5000, error: type = None) -> None:
    """Refuse a port that is out of range, in use, not allowed to this user, or a host that is not this machine's,
    before any server starts; shared by ``attnsim ui`` and ``attnsim explore`` (``command``, ``default``, ``error``).

    Raises:
        UiError (or ``error``): naming the problem and the fix (a free port, a port of 1024 or more, --host 127.0.0.1).
    """
    error = error or UiError
    if not 1 <= port <= 65535:
        raise error(f"Port {port} is not a TCP port; give --port between 1 and 65535 (default {default}).")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # as the server itself binds: a port whose last connections wait in TIME_WAIT (a browser used the previous
        # server) is free to listen on, and only a live listener makes the bind fail
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except socket.gaierror as exc:
            raise error(
                f"--host {host} is not a name this machine can resolve ({exc.strerror}); give --host 127.0.0.1 (this machine only) or one of its addresses."
            ) from exc
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                message = f"Port {port} on {host} is in use, perhaps by another `{command}` or MLflow server. Stop that one, or pass a free port: {command} --port {port + 1}."
            elif exc.errno == errno.EACCES:
                message = f"Port {port} needs administrator rights on this machine (ports below 1024 do); pass a port of 1024 or more, e.g. {command} --port {default}."
            elif exc.errno == errno.EADDRNOTAVAIL:
                message = f"--host {host} is not an address of this machine; give --host 127.0.0.1 (this machine only) or one of its own addresses."
            else:
                message = f"Cannot listen on {host}:{port} ({exc.strerror}); try another port, e.g. {command} --port {port + 1}."
            raise error(message) from exc


def artifact_root(uri: str) -> Optional[str]:
    """Default artifact root of an SQLite store: ``<database folder>/artifacts`` as a ``file://`` URI (None for other stores)."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///") :]).resolve().parent / "artifacts").as_uri()
    return None


def server_command(uri: str, port: int, verbose: bool = False) -> List[str]:
    """The command line of the server process (this module run with ``python -m``)."""
    return [sys.executable, "-m", SERVER_MODULE, uri, str(port)] + (["--verbose"] if verbose else [])


def server_env(base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """``base`` (default the current environment) with MLflow's job execution switched off (:data:`NO_JOBS_ENV`)."""
    env = dict(os.environ if base is None else base)
    env.update(NO_JOBS_ENV)
    return env


def run_server(uri: str, port: int, verbose: bool = False) -> None:
    """Run MLflow's tracking server app for ``uri`` in uvicorn, in this process, on 127.0.0.1:``port``, until SIGINT/SIGTERM.

    The body of the server process; :class:`UiServer` starts it. ``verbose``:
    uvicorn's INFO messages and access log, and MLflow's deprecation warnings.
    """
    os.environ.update(NO_JOBS_ENV)
    if not verbose:
        warnings.filterwarnings("ignore", message=r".*starlette\.middleware\.wsgi is deprecated")  # inside MLflow, not actionable
    import uvicorn  # noqa: I001 - before mlflow.server: its Flask app adds its security middleware only when a server module is loaded

    from mlflow.server import constants
    from mlflow.server.handlers import initialize_backend_stores

    root = artifact_root(uri)
    os.environ[constants.BACKEND_STORE_URI_ENV_VAR] = uri
    os.environ[constants.REGISTRY_STORE_URI_ENV_VAR] = uri
    if root:
        os.environ[constants.ARTIFACT_ROOT_ENV_VAR] = root
    initialize_backend_stores(uri, uri, root)
    from mlflow.server.fastapi_app import app

    uvicorn.run(with_browser_defaults(app), host=HOST, port=port, access_log=verbose, log_level="info" if verbose else "warning")


# What MLflow's UI (3.x) keeps in the browser's local storage, as its own hook writes it (key "<name>_v<version>",
# a JSON value; read from its bundle, mlflow/server/js/build). Set once, only where the browser has no value yet:
# - the workflow type a bare URL opens: the classic machine-learning view, not the GenAI home (and the bare URL
#   itself, which MLflow routes to its Home page, goes to the experiment list in that view);
# - that the Assistant panel has "already opened on first load", so it does not open by itself and push the
#   run's description and metrics below the fold (the button beside the experiment still opens it).
BROWSER_DEFAULTS = {"mlflow.workflowType_v1": '"machine_learning"', "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true"}
DEFAULTS_SCRIPT = (
    "<script>(function(){try{var d=" + json.dumps(BROWSER_DEFAULTS) + ";for(var k in d){if(localStorage.getItem(k)===null)"
    "{localStorage.setItem(k,d[k]);}}}catch(e){}"
    "if(!location.hash||location.hash==='#/'){location.replace(" + json.dumps(classic_fragment("/experiments")) + ");}})();</script>"
).encode("utf-8")


def with_browser_defaults(app):  # noqa: ANN001, ANN201 - an ASGI application in, one out
    """``app`` (MLflow's ASGI app) whose page (``GET /``) sets :data:`BROWSER_DEFAULTS` before MLflow's UI starts.

    The page is MLflow's own ``index.html`` as MLflow answered it (so its security checks still apply): a
    200 ``text/html`` answer that is not compressed gets the script just before ``</head>``; every other
    request and answer passes unchanged.
    """

    async def wrapped(scope, receive, send):  # noqa: ANN001
        if scope.get("type") != "http" or scope.get("method") != "GET" or scope.get("path") not in ("/", "/index.html"):
            await app(scope, receive, send)
            return
        start, chunks = {}, []

        async def capture(message):  # noqa: ANN001
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            headers = {k.lower(): v for k, v in start.get("headers", [])}
            if start.get("status") == 200 and b"text/html" in headers.get(b"content-type", b"") and b"content-encoding" not in headers and b"</head>" in body:
                body = body.replace(b"</head>", DEFAULTS_SCRIPT + b"</head>", 1)
            kept = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
            await send({**start, "headers": kept + [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await app(scope, receive, capture)

    return wrapped


def _running_in_group(pgid: int) -> Optional[List[int]]:
    """Pids of the processes of group ``pgid`` that are not zombies, from Linux's /proc; None without /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
        except (OSError, IndexError):
            continue  # the process ended while being read
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


class _Stop(Exception):
    """Raised in the main thread by SIGINT (Ctrl-C), SIGTERM or SIGHUP while the UI runs."""


def _raise_stop(signum, frame):  # noqa: ANN001 - signal handler signature
    raise _Stop(signal.Signals(signum).name)


class UiServer:
    """The server process for one store, in a process group of its own.

    :meth:`start` it, :meth:`wait_ready`, and always :meth:`stop` it (that stops the whole group).
    """

    def __init__(self, uri: str, port: int, verbose: bool = False):
        self.uri, self.port = uri, port
        self.command = server_command(uri, port, verbose)
        self.process: Optional[subprocess.Popen] = None
        self.started = 0.0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{HOST}:{self.port}"

    def start(self) -> "UiServer":
        """Start the server in a new session (so a process group of its own); returns at once (see :meth:`wait_ready`)."""
        self.started = time.monotonic()
        self.process = subprocess.Popen(self.command, env=server_env(), stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> float:
        """Block until ``GET /health`` answers 200; return the seconds since :meth:`start`.

        Raises:
            UiError: the server exited first (its messages are on the terminal) or did not answer within ``timeout_s``.
        """
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 never goes through $http_proxy
        while True:
            code = self.process.poll()
            if code is not None:
                raise UiError(
                    f"The MLflow server for {self.uri} exited with status {code} before it was ready; its messages are above. Check that the store is an MLflow database you can read."
                )
            try:
                with opener.open(f"{self.url}/health", timeout=1.0) as response:
                    if response.status == 200:
                        return time.monotonic() - self.started
            except OSError:  # URLError, connection refused or reset while the server starts
                pass
            if time.monotonic() - self.started > timeout_s:
                raise UiError(
                    f"The MLflow server for {self.uri} did not answer on {self.url}/health within {timeout_s:.0f} s, so it was stopped. Try again with `attnsim -v ui` to see its messages."
                )
            time.sleep(0.1)

    def alive(self) -> bool:
        """Whether any process of the server's group is still running (zombies, which hold nothing, do not count)."""
        if self.process is None:
            return False
        self.process.poll()  # reap the server process once it has exited
        members = _running_in_group(self.process.pid)
        if members is not None:
            return bool(members)
        try:  # no /proc: ask the kernel whether the group still has members
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop every process of the group: SIGTERM, then SIGKILL after ``grace_s`` seconds; return once they are gone."""
        if self.process is None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if not self.alive():
                break
        try:
            self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass


def serve(uri: str, port: int, verbose: bool = False, say: Optional[Callable[[str], None]] = None) -> int:
    """Serve ``uri`` on http://127.0.0.1:``port`` until Ctrl-C, SIGTERM or SIGHUP; return the exit status (0).

    Tells ``say`` (``attnsim ui`` prints each line) when the server starts, when the UI is ready
    (with the seconds it took and the classic-view link of the experiment list) and when it
    stopped; always stops the server's whole process group.

    Raises:
        UiError: bad store or port (before anything starts), or the server failed to start or died.
    """
    check_store(uri)
    check_port(port)
    say = say or (lambda line: None)
    server = UiServer(uri, port, verbose)
    marker = ui_marker(uri)

    def ready(seconds: float) -> str:
        try:  # links printed while it runs use its port (attnsim.tracking.links.running_ui_port)
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(json.dumps({"port": port, "pid": os.getpid()}), encoding="utf-8")
        except OSError:  # no cache folder: the links say the default port
            pass
        return f"ready after {seconds:.1f} s: {experiments_url(port=port)}  (Ctrl-C stops it)"

    try:
        run_until_stopped(
            server,
            say,
            starting=f"starting the MLflow UI for {uri} on {server.url} ...",
            ready=ready,
            failed=lambda code: UiError(f"The MLflow server for {uri} exited with status {code}; its messages are above."),
        )
    finally:
        try:
            if json.loads(marker.read_text(encoding="utf-8")).get("pid") == os.getpid():
                marker.unlink()
        except (OSError, ValueError, AttributeError):
            pass
    say("stopped the MLflow UI")
    return 0


def run_until_stopped(server: "UiServer", say: Callable[[str], None], starting: str, ready: Callable[[float], str], failed: Callable[[int], Exception]) -> None:
    """Start ``server``, wait until it answers, then until Ctrl-C, SIGTERM or SIGHUP; always stop its process group.

    Shared by ``attnsim ui`` and ``attnsim server``. SIGINT is caught too (a shell starts background
    jobs with it ignored); during the shutdown the signals are ignored, so a second Ctrl-C cannot
    cut it short; the previous handlers are restored afterwards.

    Args:
        server: a :class:`UiServer` (or subclass) not yet started.
        say: receives ``starting``, then ``ready(seconds)`` once the server answers.
        failed: the error to raise for a non-zero exit status of the server process.

    Raises:
        What ``failed`` returns, when the server exits on its own with a non-zero status.
    """
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in stops}
    for sig in stops:
        signal.signal(sig, _raise_stop)
    try:
        say(starting)
        server.start()
        say(ready(server.wait_ready()))
        code = server.process.wait()
        if code != 0:
            raise failed(code)
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        for sig in stops:  # a second Ctrl-C must not cut the shutdown short
            signal.signal(sig, signal.SIG_IGN)
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {SERVER_MODULE}", description="The server process of `attnsim ui` (start it with `attnsim ui`).")
    parser.add_argument("uri")
    parser.add_argument("port", type=int)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    run_server(args.uri, args.port, args.verbose)


if __name__ == "__main__":
    _main(sys.argv[1:])
