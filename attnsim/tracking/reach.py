"""Whether a tracking store answers, found at once rather than after MLflow's retries (minutes).

:func:`probe_database` knocks on a database store's TCP port (or PostgreSQL's Unix socket); :func:`probe_server` asks an
MLflow server the two questions every command asks first (search experiments, search runs), one request each without
retries and with a short timeout, and refuses an answer that is not MLflow's: an error page, a proxy's login page
(HTML with HTTP 200), a server that answers one question and hangs on the other. MLflow's own client retries a
failing request with back-off for about five minutes, then prints a traceback. :func:`hide_password` keeps passwords
out of every message.
"""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import time
from typing import Any, Optional
from urllib.parse import parse_qs, urlparse

from attnsim.errors import TrackingError


def hide_password(uri: str) -> str:
    """``uri`` with any password replaced by ``***`` (for messages)."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(uri).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a database URL: nothing to hide
        return uri


DATABASE_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}
"""Default ports of the SQL databases MLflow stores runs in, for :func:`probe_database`."""


def probe_database(uri: str, timeout_s: float = 5.0) -> None:
    """Refuse a database tracking store (``postgresql://USER@HOST:PORT/DB``, ``mysql://``, ``mssql://``) whose server
    does not answer on its TCP port, in at most ``timeout_s`` seconds. MLflow itself retries a refused connection ten
    times with growing pauses (about 100 s) before it fails. A PostgreSQL store named without a host is probed on its
    Unix socket (``?host=FOLDER``, else ``/var/run/postgresql``); a MySQL or SQL Server one without a host is left to MLflow.

    Raises:
        TrackingError: a ``postgresql://`` store without its driver psycopg (the extra ``attnsim[server]``), or
        nothing answers at the database's host and port (the message hides any password).
    """
    parsed = urlparse(uri)
    kind = parsed.scheme.split("+")[0]
    if kind not in DATABASE_PORTS:
        return
    if parsed.scheme in ("postgresql", "postgresql+psycopg") and importlib.util.find_spec("psycopg") is None:
        raise TrackingError(f"The PostgreSQL tracking store {hide_password(uri)} needs psycopg, which is not installed: pip install 'attnsim[server]'.")
    port = parsed.port or DATABASE_PORTS[kind]
    if parsed.hostname:
        family, address, where = socket.AF_INET, (parsed.hostname, port), f"{parsed.hostname}:{port}"
    elif kind == "postgresql":  # libpq's Unix socket: the host= parameter's folder, else Debian's default
        folder = parse_qs(parsed.query).get("host", ["/var/run/postgresql"])[0]
        family, address = socket.AF_UNIX, f"{folder}/.s.PGSQL.{port}"
        where = address
    else:
        return
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.settimeout(timeout_s)
            probe.connect(address)
    except OSError as exc:
        raise TrackingError(
            f"The {kind} database of the tracking store {hide_password(uri)} cannot be reached at {where} ({exc}). "
            "Start the database server there (PostgreSQL: pg_ctl start), or point --uri, tracking.uri or MLFLOW_TRACKING_URI at a reachable store."
        ) from exc


SERVER_PROBES = (
    ("experiments/search", {"max_results": 1}),
    ("runs/search", {"max_results": 1}),
)
"""The REST calls (under ``/api/2.0/mlflow/``) :func:`probe_server` makes, in order: what every command asks first
(:meth:`~attnsim.tracking.store.Tracker.check_experiment`, :meth:`~attnsim.tracking.store.Tracker.end_dead_runs`).
The run search names the first experiment the first call found (else ``0``, MLflow's ``Default``)."""

_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


def _what_came_back(response: Any) -> str:
    """``HTTP 200 text/html, an HTML page titled "Sign in"`` (or the body's first characters), for a message."""
    kind = response.headers.get("Content-Type", "no content type").split(";")[0].strip()
    body = response.content or b""
    title = _TITLE.search(body[:65536])
    if title:
        shown = f'an HTML page titled "{" ".join(title.group(1).decode("utf-8", "replace").split())[:100]}"'
    elif body.strip():
        shown = f'"{" ".join(body[:400].decode("utf-8", "replace").split())[:120]}"'
    else:
        shown = "an empty body"
    moved = f" after a redirect to {response.url}" if response.history else ""
    return f"HTTP {response.status_code} {kind}{moved}, {shown}"


def _mlflow_json(response: Any) -> Optional[dict]:
    """The JSON object of an MLflow answer (an empty 200 body is ``{}``, as MLflow's client reads it), else None."""
    if response.status_code == 200 and not response.content.strip():
        return {}
    try:
        answer = json.loads(response.content)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _refuse_answer(uri: str, endpoint: str, response: Any, answer: Optional[dict]) -> None:
    """Raise :class:`~attnsim.errors.TrackingError` for an answer that is not MLflow's serving one: a server error
    (5xx), or anything but MLflow's JSON (a success, or an error with its ``error_code``)."""
    where = f"/api/2.0/mlflow/{endpoint}"
    if response.status_code >= 500:
        message = (answer or {}).get("message")
        shown = f"HTTP {response.status_code}: {' '.join(str(message).split())[:300]}" if message else _what_came_back(response)
        raise TrackingError(
            f"The MLflow tracking server {uri} answers, but cannot serve requests ({shown}) "
            f"at {where}. Its backend store may be down (e.g. the PostgreSQL server behind `attnsim server` or `mlflow server` stopped): start it, "
            "or point --uri, tracking.uri or MLFLOW_TRACKING_URI at a working store."
        )
    if answer is None or (response.status_code != 200 and "error_code" not in answer):
        raise TrackingError(
            f"The tracking URI {uri} does not answer as an MLflow server: {where} came back as {_what_came_back(response)}, not MLflow's JSON. "
            "A proxy in front of the server (a login page) or another web service answered: give the MLflow server's own address "
            "(http://HOST:PORT, as `attnsim server` or `mlflow server` prints it), or its credentials (MLFLOW_TRACKING_TOKEN, or "
            "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD), in --uri, tracking.uri or MLFLOW_TRACKING_URI."
        )


def _why_no_answer(exc: BaseException) -> str:
    """The innermost reason of a failed request (urllib3's, under requests' and MLflow's wrappers), short."""
    while (exc.__cause__ or exc.__context__) is not None:
        exc = exc.__cause__ or exc.__context__
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    text = " ".join(str(reason or exc).split())
    return "nothing came back" if "timed out" in text else text[:200]


def probe_port(uri: str, timeout_s: float = 5.0) -> None:
    """Refuse an MLflow tracking server (``http://``, ``https://``) where nothing accepts a TCP connection within
    ``timeout_s`` seconds. Standard library only: the command line asks it before MLflow is imported
    (:func:`attnsim.tracking.store.check_store`); :func:`probe_server` asks it first, then asks the server.

    Raises:
        TrackingError: naming the URI, why the connection failed, and how to start a server or point elsewhere.
    """
    parsed = urlparse(uri)
    try:
        with socket.create_connection((parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise TrackingError(
            f"The MLflow tracking server {uri} cannot be reached ({exc}). Start it (`attnsim server`, or `mlflow server --host 127.0.0.1`), "
            "or point --uri, tracking.uri or MLFLOW_TRACKING_URI at a reachable store."
        ) from exc


def probe_server(uri: str, timeout_s: float = 5.0) -> bool:
    """Refuse an MLflow tracking server (``http://``, ``https://``) that cannot serve a run, within about ``timeout_s``
    seconds: nothing listens, or the calls of :data:`SERVER_PROBES` (one request each, no retries, sharing
    ``timeout_s`` with at least 1 s each; MLflow's credentials and TLS settings from its environment variables) do not
    come back, come back as a server error, or come back as anything but MLflow's JSON.

    Returns:
        True when both calls were answered; False when the server asks for credentials it was not given or refuses
        them (HTTP 401 or 403: MLflow's own client, which says so, is left to check).

    Raises:
        TrackingError: naming the URI, the call and what came back (status, content type, an HTML page's title or the
        body's start), or how long nothing came.
    """
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    probe_port(uri, timeout_s)
    creds, deadline, experiment, answered = get_default_host_creds(uri), time.monotonic() + timeout_s, "0", []
    for endpoint, body in SERVER_PROBES:
        wait = max(deadline - time.monotonic(), 1.0)
        body = {**body, "experiment_ids": [experiment]} if endpoint == "runs/search" else body
        try:
            response = http_request(creds, f"/api/2.0/mlflow/{endpoint}", "POST", max_retries=0, timeout=wait, raise_on_status=False, json=body)
        except Exception as exc:  # noqa: BLE001 - MlflowException wraps the timeout or the broken connection
            before = f"answered /api/2.0/mlflow/{answered[-1]} but " if answered else ""
            raise TrackingError(
                f"The MLflow tracking server {uri} {before}did not answer /api/2.0/mlflow/{endpoint} within {wait:.0f} s "
                f"({_why_no_answer(exc)}). Check that the server and its backend store work "
                "(a request that hangs there hangs every run), or point --uri, tracking.uri or MLFLOW_TRACKING_URI at a working store."
            ) from None
        if response.status_code in (401, 403):
            return False
        answer = _mlflow_json(response)
        _refuse_answer(uri, endpoint, response, answer)
        found = (answer or {}).get("experiments")
        if isinstance(found, list) and found and isinstance(found[0], dict) and "experiment_id" in found[0]:
            experiment = str(found[0]["experiment_id"])
        answered.append(endpoint)
    return True
