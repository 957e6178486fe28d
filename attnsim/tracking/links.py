"""Links into the MLflow UI that open in its classic machine-learning view.

MLflow 3's UI has two modes, GenAI (traces, evaluations) and machine learning
(runs, metrics, artifacts). It reads the mode from the ``workflowType`` query
parameter of the page's URL (``genai`` or ``machine_learning``); without it,
it uses the mode last chosen in that browser, and a fresh browser starts in
GenAI mode, where an attnsim run shows as an empty "Traces" dashboard with
the run filed under "Evaluations". Every link attnsim prints therefore ends
in ``?workflowType=machine_learning``. (Source: MLflow 3.x's UI bundle,
``mlflow/server/js/build``: the workflow-type context takes
``searchParams.get("workflowType")`` before its local-storage value, whose
default is ``genai``.)

The UI routes through the URL fragment: ``/#/experiments/<id>/runs/<run id>``.
A tracking store that is an MLflow server (``http(s)://...``) is linked
directly; any other store (SQLite) is served by ``attnsim ui`` on
``http://127.0.0.1:<port>`` (default :data:`DEFAULT_PORT`). While ``attnsim ui`` serves a store it
leaves a marker (:func:`ui_marker`: its port and process id), so that the links printed meanwhile
use the port in use (:func:`running_ui_port`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Optional
from urllib.parse import quote, urlencode

WORKFLOW_PARAM = "workflowType"
CLASSIC = "machine_learning"
DEFAULT_PORT = 5000
HOST = "127.0.0.1"


def is_server(tracking_uri: str) -> bool:
    """Whether ``tracking_uri`` is an MLflow tracking server (``http://`` or ``https://``) that serves its own UI."""
    return tracking_uri.startswith(("http://", "https://"))


def ui_base(tracking_uri: Optional[str] = None, port: int = DEFAULT_PORT) -> str:
    """Root URL of the UI that shows ``tracking_uri``: the server itself, else ``http://127.0.0.1:<port>`` (``attnsim ui``)."""
    if tracking_uri and is_server(tracking_uri):
        return tracking_uri.rstrip("/")
    return f"http://{HOST}:{port}"


def _classic(base: str, route: str) -> str:
    return f"{base}/{classic_fragment(route)}"


def classic_fragment(route: str) -> str:
    """The URL fragment of ``route`` in the classic view: ``#/experiments?workflowType=machine_learning``."""
    return f"#{route}?{urlencode({WORKFLOW_PARAM: CLASSIC})}"


def experiments_url(tracking_uri: Optional[str] = None, port: int = DEFAULT_PORT) -> str:
    """The experiment list in the classic view: ``<base>/#/experiments?workflowType=machine_learning``."""
    return _classic(ui_base(tracking_uri, port), "/experiments")


def experiment_url(experiment_id: str, tracking_uri: Optional[str] = None, port: int = DEFAULT_PORT) -> str:
    """An experiment's runs table in the classic view: ``<base>/#/experiments/<id>/runs?workflowType=machine_learning``."""
    return _classic(ui_base(tracking_uri, port), f"/experiments/{quote(str(experiment_id))}/runs")


def run_url(experiment_id: str, run_id: str, tracking_uri: Optional[str] = None, port: int = DEFAULT_PORT, artifact: Optional[str] = None) -> str:
    """A run's page (overview, metrics, params) in the classic view; with ``artifact``, that artifact's page.

    Example: ``http://127.0.0.1:5000/#/experiments/1/runs/<run id>?workflowType=machine_learning``;
    ``artifact="reports/report.md"`` gives ``.../runs/<run id>/artifacts/reports/report.md?workflowType=...``.
    """
    route = f"/experiments/{quote(str(experiment_id))}/runs/{quote(run_id)}"
    if artifact:
        route += "/artifacts/" + quote(artifact.strip("/"))
    return _classic(ui_base(tracking_uri, port), route)


def artifact_link(experiment_id: str, run_id: str, path: str) -> str:
    """The route of a run's artifact ``path`` (a file or a folder) in the classic view, relative to the UI's root, for
    Markdown that MLflow renders on its own pages (a run's description):
    ``#/experiments/1/runs/<run id>/artifacts/figures/csm/heads.png?workflowType=machine_learning``."""
    return classic_fragment(f"/experiments/{quote(str(experiment_id))}/runs/{quote(run_id)}/artifacts/{quote(path.strip('/'))}")


def ui_marker(tracking_uri: str) -> Path:
    """The file in which a running ``attnsim ui`` of ``tracking_uri`` keeps its port and process id
    (``{"port": 5001, "pid": 1234}``), in attnsim's folder of the user's cache (``platformdirs.user_cache_dir``)."""
    import platformdirs

    key = hashlib.sha256(tracking_uri.encode("utf-8")).hexdigest()[:16]
    return Path(platformdirs.user_cache_dir("attnsim")) / "ui" / f"{key}.json"


def running_ui_port(tracking_uri: str) -> Optional[int]:
    """The port of the ``attnsim ui`` serving ``tracking_uri`` now (its marker names a live process), else None."""
    try:
        found = json.loads(ui_marker(tracking_uri).read_text(encoding="utf-8"))
        port, pid = int(found["port"]), int(found["pid"])
        os.kill(pid, 0)  # raises when no such process
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return port


def open_hint(tracking_uri: str, experiment_id: str, run_id: Optional[str] = None, artifact: Optional[str] = None) -> str:
    """The line attnsim prints after a run: the link, and for a local store the ``attnsim ui`` command that serves it.

    ``open it: attnsim ui --uri 'sqlite:///...'  then  http://127.0.0.1:5000/#/experiments/1/runs/<id>?workflowType=machine_learning``
    (the experiment's runs table when ``run_id`` is None). While an ``attnsim ui`` serves the store, the link
    alone, on the port it uses: ``open it: http://127.0.0.1:5001/#/... (attnsim ui serves this store)``.
    """
    port = None if is_server(tracking_uri) else running_ui_port(tracking_uri)
    url = (
        run_url(experiment_id, run_id, tracking_uri, port=port or DEFAULT_PORT, artifact=artifact)
        if run_id
        else experiment_url(experiment_id, tracking_uri, port=port or DEFAULT_PORT)
    )
    if is_server(tracking_uri):
        return f"open it: {url}"
    if port is not None:
        return f"open it: {url}  (attnsim ui serves this store)"
    return f"open it: {ui_command()} --uri '{tracking_uri}'  then  {url}"


def ui_command() -> str:
    """``attnsim ui`` as a new shell runs it: ``attnsim`` where the ``attnsim`` on PATH is this installation's,
    else this installation's full path (``make run`` installs into ``.venv/bin``, which a new shell's PATH lacks)."""
    import os
    import shutil
    import sys

    mine = os.path.join(os.path.dirname(sys.executable), "attnsim")
    found = shutil.which("attnsim")
    if not os.path.exists(mine) or (found and os.path.realpath(found) == os.path.realpath(mine)):
        return "attnsim ui"
    return f"{mine} ui"
