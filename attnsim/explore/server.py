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
from typing import Any, Callable, List, Optional

from attnsim.errors import AttnsimError

HOST = "127.0.0.1"
log = logging.getLogger(__name__)


class ExploreServerError(AttnsimError):
    """The server cannot start (a port in use or out of range)."""


def _refused(message: str) -> Any:
    """A 400 answer in the page's ``{"error": message}`` shape."""
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=400)


def _add_error_handlers(app: Any) -> None:
    """Answer every failed request of ``app`` in the page's ``{"error": ...}`` shape: a request of the wrong shape or
    not JSON (400), Starlette's own refusals (their status), anything else (500; the server keeps running)."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(RequestValidationError)
    def invalid(_request, exc: RequestValidationError):  # noqa: ANN001 - Starlette's handler signature
        # a request whose fields have the wrong types (off="1.2", text=5, a body that is not JSON): the same 400
        # {"error": ...} as every refused request, naming the field and what it takes, instead of FastAPI's 422 list
        errors = exc.errors()
        broken = [e for e in errors if e.get("type") == "json_invalid"]
        if broken:
            at = broken[0].get("loc", ("body", "?"))[-1]
            return _refused(
                f'The request body is not valid JSON (it breaks at character {at}). Send JSON such as {{"text": "The cat sat.", "layer": 0, "head": 0}}.'
            )
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'the body'}: {e.get('msg', 'invalid')}" for e in errors)
        return _refused(
            f"The request is not one the explorer takes ({problems}). It takes JSON: text (a string), layer and head (integers), "
            'off (a list of [layer, head] pairs) and mode ("zero" or "mean").'
        )

    @app.exception_handler(StarletteHTTPException)
    def http_error(_request, exc: StarletteHTTPException):  # noqa: ANN001 - Starlette's handler signature
        # Starlette's own refusals (a body that is not UTF-8, an unknown route) in the page's {"error": ...} shape
        if exc.status_code == 400:
            return _refused(f"The request body could not be read ({exc.detail}). Send UTF-8 encoded JSON with the content type application/json.")
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    def unexpected(_request, exc: Exception):  # noqa: ANN001 - Starlette's handler signature
        log.exception("explore request failed")
        return JSONResponse(
            {"error": f"The explorer failed on this request ({type(exc).__name__}: {str(exc)[:200]}); the server keeps running. Try another text or head."},
            status_code=500,
        )


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
    from fastapi.responses import HTMLResponse
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
            return _refused("Each head switched off is [layer, head]; got " + str(request.off) + ".")
        try:
            return explorer.analyse(request.text, request.layer, request.head, [tuple(p) for p in request.off], request.mode)
        except AttnsimError as exc:
            return _refused(str(exc))

    @app.get("/api/context")
    def api_context(run: str = ""):
        if not run.strip():
            app.state.context = None
            return {"context": None}
        try:
            app.state.context = corpus_context(run, explorer.info, uri)
        except AttnsimError as exc:
            return _refused(str(exc))
        return {"context": app.state.context}

    _add_error_handlers(app)
    return app


def check_port(port: int, host: str = HOST) -> None:
    """Refuse a port that is out of range, in use or not allowed, or a host that is not this machine's
    (:func:`attnsim.tracking.ui.check_port`, with this command's hints).

    Raises:
        ExploreServerError: naming the problem and the fix.
    """
    from attnsim.tracking.ui import check_port as check

    check(port, host, command="attnsim explore", default=8765, error=ExploreServerError)


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
