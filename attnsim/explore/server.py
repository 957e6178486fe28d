"""The live page's thin local server (``attnsim explore``): FastAPI, served by uvicorn on 127.0.0.1.

Routes:

- ``GET /``: the page (:func:`attnsim.explore.page.page`), its view from the URL's hash.
- ``POST /api/analyse`` ``{"text", "layer", "head", "off": [[layer, head], ...], "mode"}``: one text's maps and
  numbers (:meth:`attnsim.explore.session.Explorer.analyse`). Bad input is HTTP 400 ``{"error": message}``.
- ``GET /api/context?run=RUN_ID``: a logged run's per-head corpus statistics (:func:`attnsim.explore.context.corpus_context`);
  an empty ``run`` clears it. An unknown or foreign run is HTTP 400 with the reason.
- ``GET /api/info``: the model's name, shape and kind.

The endpoints are plain functions, which FastAPI runs in its thread pool; the model is used under the
explorer's lock, so two tabs typing at once each get their own text's answer. The server keeps running
whatever a request holds.
"""

# no `from __future__ import annotations`: FastAPI reads the request model from the endpoint's annotation object
import logging
import socket
from typing import Any, Callable, List, Optional

from attnsim.errors import AttnsimError

HOST = "127.0.0.1"
log = logging.getLogger(__name__)


class ExploreServerError(AttnsimError):
    """The server cannot start (a port in use or out of range)."""


def create_app(explorer: Any, context: Optional[dict] = None, context_error: Optional[str] = None, uri: Optional[str] = None, text: str = ""):
    """The FastAPI application of one loaded :class:`~attnsim.explore.session.Explorer`.

    Args:
        explorer: the loaded model.
        context: corpus context given at start-up (``--run``), or None.
        context_error: why the start-up run was refused, shown on the page (the server runs without it).
        uri: the tracking store that ``/api/context`` reads.
        text: the text the page opens with when its URL holds none.
    """
    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse, JSONResponse
    from pydantic import BaseModel, Field

    from attnsim.explore.context import corpus_context
    from attnsim.explore.page import page

    class Analyse(BaseModel):
        text: str = ""
        layer: int = 0
        head: int = 0
        off: List[List[int]] = Field(default_factory=list)
        mode: Optional[str] = None

    app = FastAPI(title="attnsim explore", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.context = context

    def refused(message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=400)

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        info = explorer.describe()
        boot = {
            "live": True,
            "api": "",
            "info": info,
            "context": app.state.context,
            "context_error": context_error,
            "initial": {"text": text, "layer": 0, "head": 0, "off": [], "mode": info["mode"]},
        }
        return page(boot, f"attnsim explore — {info['model']}")

    @app.get("/api/info")
    def api_info() -> dict:
        return explorer.describe()

    @app.post("/api/analyse")
    def api_analyse(request: Analyse):
        if any(len(pair) != 2 for pair in request.off):
            return refused("Each head switched off is [layer, head]; got " + str(request.off) + ".")
        try:
            return explorer.analyse(request.text, request.layer, request.head, [tuple(p) for p in request.off], request.mode)
        except AttnsimError as exc:
            return refused(str(exc))

    @app.get("/api/context")
    def api_context(run: str = ""):
        if not run.strip():
            app.state.context = None
            return {"context": None}
        try:
            app.state.context = corpus_context(run, explorer.info, uri)
        except AttnsimError as exc:
            return refused(str(exc))
        return {"context": app.state.context}

    @app.exception_handler(Exception)
    def unexpected(_request, exc: Exception):  # noqa: ANN001 - Starlette's handler signature
        log.exception("explore request failed")
        return JSONResponse(
            {"error": f"The explorer failed on this request ({type(exc).__name__}: {str(exc)[:200]}); the server keeps running. Try another text or head."},
            status_code=500,
        )

    return app


def check_port(port: int, host: str = HOST) -> None:
    """Refuse a port that is out of range or already in use on ``host``.

    Raises:
        ExploreServerError: naming the port and a free one to try.
    """
    if not 1 <= port <= 65535:
        raise ExploreServerError(f"Port {port} is not a TCP port; give --port between 1 and 65535 (default 8765).")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT does not block
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ExploreServerError(
                f"Port {port} on {host} is in use ({exc.strerror}). Stop what listens there, or pass another: attnsim explore --port {port + 1}."
            ) from exc


def serve(app: Any, host: str = HOST, port: int = 8765, say: Callable[[str], None] = print) -> int:
    """Serve ``app`` with uvicorn until Ctrl-C (SIGINT) or SIGTERM; the port is free again as soon as it returns.

    Raises:
        ExploreServerError: the port is in use or out of range.
    """
    import uvicorn

    check_port(port, host)
    shown = "localhost" if host in ("127.0.0.1", "::1") else host

    class Server(uvicorn.Server):
        async def startup(self, sockets=None):  # noqa: ANN001 - uvicorn's signature
            await super().startup(sockets)
            if self.started:  # listening: the address is said once it answers
                say(f"attnsim explore: http://{shown}:{port}/ (Ctrl-C stops it)")
                if host not in ("127.0.0.1", "localhost", "::1"):
                    say(
                        f"warning: listening on {host}: anyone who can reach this machine on port {port} can run texts through the model and read what it answers (no password, no TLS)."
                    )

    # uvicorn binds with SO_REUSEADDR and closes its socket on Ctrl-C: the port is free again as soon as it returns
    Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=2)).run()
    return 0


__all__ = ["HOST", "ExploreServerError", "check_port", "create_app", "serve"]
