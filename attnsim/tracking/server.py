"""``attnsim server``: a shared MLflow tracking server on a PostgreSQL backend store, with proxied artifacts.

It runs MLflow's own command line, printed when it starts, so that the same
server can be started without attnsim::

    MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false python -m mlflow server \\
        --backend-store-uri postgresql://USER@HOST:PORT/DB \\
        --serve-artifacts --artifacts-destination /abs/artifacts/dir \\
        --host 127.0.0.1 --port 5000 --workers 1

Runs, metrics and params go to PostgreSQL; clients send artifacts to the server
(``--serve-artifacts``), which stores them under ``--artifacts-destination``, so
clients need no access to that folder. MLflow's GenAI job workers are switched
off (``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``; attnsim submits no jobs).
It listens on 127.0.0.1 unless ``--host`` says otherwise. Every attnsim command
then logs there with ``--uri http://HOST:PORT`` (or ``tracking.uri=``, or
``MLFLOW_TRACKING_URI``).

Before starting it, :func:`check_backend` connects to the database, so that a
wrong URI, a stopped PostgreSQL or a missing driver get one paragraph, not
MLflow's traceback. The server runs in a process group of its own and is always
stopped as a whole (:class:`~attnsim.tracking.ui.UiServer`'s machinery).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Callable, List, Optional

from attnsim.errors import TrackingError
from attnsim.tracking.store import hide_password  # noqa: F401 - imported from here by its users too
from attnsim.tracking.ui import UiServer, check_port, run_until_stopped

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5000
DEFAULT_ARTIFACTS = "mlartifacts"  # MLflow's own default for --artifacts-destination, made absolute here


class ServerError(TrackingError):
    """The shared tracking server cannot be started with these settings."""


def check_backend(uri: str, timeout_s: int = 10) -> None:
    """Refuse a backend store ``uri`` that is not a reachable PostgreSQL database, before any server starts.

    Args:
        uri: SQLAlchemy URL, ``postgresql://USER[:PASSWORD]@HOST:PORT/DB`` (driver psycopg, SQLAlchemy 2.1's default).
        timeout_s: connection timeout in seconds.

    Raises:
        ServerError: not a ``postgresql`` URI, the driver is missing, or the database cannot be reached.
    """
    shown = hide_password(uri)
    if not uri.startswith(("postgresql://", "postgresql+")):
        raise ServerError(
            f"--backend-store-uri '{shown}' is not a PostgreSQL database. `attnsim server` serves a PostgreSQL backend store: "
            "give postgresql://USER@HOST:PORT/DB (create it with `createdb DB`). For a local single-user SQLite store, use `attnsim ui` instead."
        )
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(uri, connect_args={"connect_timeout": timeout_s})
    except ImportError as exc:
        raise ServerError(f"The PostgreSQL backend needs psycopg, which is not installed ({exc}): pip install 'attnsim[server]'.") from exc
    try:
        with engine.connect():
            pass
    except Exception as exc:  # noqa: BLE001 - OperationalError and friends from the driver
        first = str(getattr(exc, "orig", exc)).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ServerError(
            f"Cannot connect to the PostgreSQL backend store {shown}: {first}. Check that PostgreSQL runs there "
            "(pg_ctl status / pg_ctl start), that the database exists (createdb DB) and that the user may log in."
        ) from exc
    finally:
        engine.dispose()


def server_command(backend_uri: str, artifacts: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> List[str]:
    """The ``mlflow server`` command line ``attnsim server`` runs (run it with ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``)."""
    return [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        backend_uri,
        "--serve-artifacts",
        "--artifacts-destination",
        str(artifacts),
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]


def starting_line(command: List[str]) -> str:
    """The line ``attnsim server`` prints as it starts the server: ``starting: MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false``
    and the command (:func:`server_command`, the URI's password hidden), quoted as a shell needs it."""
    return "starting: MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false " + shlex.join(command)


class TrackingServer(UiServer):
    """``mlflow server`` on a PostgreSQL backend, in a process group of its own: :meth:`start`, :meth:`wait_ready`, always :meth:`stop`."""

    def __init__(self, backend_uri: str, artifacts: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT):
        super().__init__(hide_password(backend_uri), port)
        self.host = host
        self.command = server_command(backend_uri, artifacts, host, port)

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (the tracking URI clients use)."""
        return f"http://{self.host}:{self.port}"

    def start(self, log: Optional[Path] = None) -> "TrackingServer":
        """Start the server in a process group of its own; its output goes to the terminal, or to the file ``log``."""
        if log is None:
            return super().start()
        import subprocess
        import time

        from attnsim.tracking.ui import server_env

        self.started = time.monotonic()
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                self.command, env=server_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self


def serve(
    backend_uri: str, artifacts: Optional[str] = None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, say: Optional[Callable[[str], None]] = None
) -> int:
    """Run the shared tracking server until Ctrl-C, SIGTERM or SIGHUP; return the exit status (0).

    Args:
        backend_uri: PostgreSQL database URI (:func:`check_backend`).
        artifacts: folder where the server stores artifacts (default ``./mlartifacts``), made absolute and created.
        host, port: where it listens (default 127.0.0.1:5000).
        say: receives the lines to print (the command line, when it is ready, when it stopped).

    Raises:
        ServerError: bad backend, port in use, or the server failed to start.
    """
    say = say or (lambda line: None)
    check_backend(backend_uri)
    check_port(port, host)
    folder = Path(artifacts or DEFAULT_ARTIFACTS).resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ServerError(f"Cannot create the artifacts folder {folder}: {exc}. Give a writable --artifacts-destination.") from exc
    server = TrackingServer(backend_uri, folder, host, port)
    shown = [hide_password(part) for part in server.command]
    run_until_stopped(  # with MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false (ui.server_env)
        server,
        say,
        starting=starting_line(shown),
        ready=lambda seconds: (
            f"ready after {seconds:.1f} s on {server.url}; log to it with --uri {server.url} or MLFLOW_TRACKING_URI={server.url}  (Ctrl-C stops it)"
        ),
        failed=lambda code: ServerError(f"The MLflow server exited with status {code}; its messages are above."),
    )
    say("stopped the MLflow server")
    return 0
