"""The live page's thin local server (``attnsim explore``): FastAPI, served by uvicorn on 127.0.0.1.

Routes:

- ``GET /``: the page (:func:`attnsim.explore.page.page`), its view from the URL's hash.
- ``POST /api/analyse`` ``{"text", "layer", "head", "off": [[layer, head], ...], "mode", "page", "seq"}``: one text's maps and
  numbers (:meth:`attnsim.explore.session.Explorer.analyse`). Bad input is HTTP 400 ``{"error": message}``.
  A body larger than :func:`body_limit` (256 KiB at the default 256 tokens) is HTTP 413 with the limit, answered
  before the body is read in full. ``page`` (an id of the page) and ``seq`` (its request number) mark superseded
  work: a request of a page that sent a higher ``seq`` since is answered HTTP 409 ``{"error", "superseded": true}``
  without its forward pass (:class:`Newest`); a request whose client disconnected stops before its forward pass.
- ``GET /api/context?run=RUN_ID``: a logged run's per-head corpus statistics (:func:`attnsim.explore.context.corpus_context`);
  an empty ``run`` clears it. An unknown or foreign run is HTTP 400 with the reason.
- ``GET /api/info``: the model's name, shape and kind.

The endpoints are plain functions, which FastAPI runs in its thread pool; the model is used under the
explorer's lock, so two tabs typing at once each get their own text's answer (the page itself keeps at most one
request in flight and sends its newest text when the answer arrives). The server keeps running
whatever a request holds.
"""

# no `from __future__ import annotations`: FastAPI reads the request model from the endpoint's annotation object
import logging
import threading
from collections import OrderedDict
from typing import Any, Callable, List, Optional

from attnsim.errors import AttnsimError

HOST = "127.0.0.1"
BYTES_PER_CHAR = 12  # the most JSON bytes one character of text takes: an escaped astral character, "\ud83d\ude00"
BODY_SLACK = 64 * 1024  # the request's other fields (layer, head, the heads switched off) and JSON punctuation
log = logging.getLogger(__name__)


class Newest:
    """The highest request number (``seq``) seen from each page, so that older requests still waiting are dropped.

    Thread-safe; it remembers the ``pages`` pages seen last (a page forgotten only loses the dropping of its stale
    requests, never an answer). Requests without a page id are never stale.
    """

    def __init__(self, pages: int = 1024):
        self.pages = int(pages)
        self._seen: "OrderedDict[str, int]" = OrderedDict()
        self._lock = threading.Lock()

    def note(self, page: str, seq: int) -> None:
        """Record that ``page`` sent request ``seq`` (on arrival, before it waits for the model)."""
        if not page:
            return
        with self._lock:
            self._seen[page] = max(int(seq), self._seen.get(page, int(seq)))
            self._seen.move_to_end(page)
            while len(self._seen) > self.pages:
                self._seen.popitem(last=False)

    def newer(self, page: str, seq: int) -> Optional[int]:
        """The newer request number of ``page`` that supersedes ``seq``, or None while ``seq`` is its newest."""
        with self._lock:
            newest = self._seen.get(page) if page else None
        return newest if newest is not None and newest > seq else None


def body_limit(max_chars: int) -> int:
    """The largest request body (bytes) the server reads: a text of ``max_chars`` characters
    (:attr:`attnsim.explore.session.Explorer.max_chars`, the most it tokenises) written as JSON at
    :data:`BYTES_PER_CHAR` bytes a character, plus :data:`BODY_SLACK` for the other fields.

    At the default 256 tokens (16,384 characters) it is 256 KiB; a larger body is refused with HTTP 413
    instead of being read, parsed and tokenised.
    """
    return int(max_chars) * BYTES_PER_CHAR + BODY_SLACK


class BodyLimit:
    """ASGI middleware: a request body larger than ``limit`` bytes is answered HTTP 413 ``{"error": ...}`` naming the
    limit, before the body is read in full.

    A ``Content-Length`` above the limit is refused before any of the body is read; a body without one (chunked) is
    read up to the limit and refused as soon as it passes it. A body within the limit is handed to ``app`` as it came.
    The refusal closes the connection (``Connection: close``), so the rest of the body is never read.
    """

    def __init__(self, app: Any, limit: int, hint: str = ""):
        self.app, self.limit, self.hint = app, int(limit), hint

    async def refuse(self, send: Callable) -> None:
        """Send the 413 answer."""
        import json

        body = json.dumps({"error": f"The request body is larger than the explorer reads ({self.limit:,} bytes at most). {self.hint}".strip()}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                declared = None
            if declared is not None and declared > self.limit:
                await self.refuse(send)
                return
        # read the body (at most limit + one message), counting; refuse as soon as it passes the limit
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: the app sees it as it would have
                chunks = None
                first = message
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await self.refuse(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        replay = [first] if chunks is None else [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replayed() -> dict:
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)


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
    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, JSONResponse
    from pydantic import BaseModel, Field

    from attnsim.explore.context import corpus_context
    from attnsim.explore.page import page
    from attnsim.explore.session import Stopped

    class Analyse(BaseModel):
        text: str = ""
        layer: int = 0
        head: int = 0
        off: List[List[int]] = Field(default_factory=list)
        mode: Optional[str] = None
        page: str = Field("", max_length=64)  # the page's id, and its request number: a higher one supersedes this request
        seq: int = 0

    app = FastAPI(title="attnsim explore", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.context = context

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        info = explorer.describe()
        initial = {"text": text, "layer": 0, "head": 0, "off": [], "mode": info["mode"]}
        boot = {"live": True, "api": "", "info": info, "context": app.state.context, "context_error": context_error, "initial": initial}
        return page(boot, f"attnsim explore — {info['model']}")

    @app.get("/api/info")
    def api_info() -> dict:
        return explorer.describe()

    newest = Newest()
    app.state.newest = newest

    @app.post("/api/analyse")
    def api_analyse(request: Analyse, http: Request):
        if any(len(pair) != 2 for pair in request.off):
            return _refused("Each head switched off is [layer, head]; got " + str(request.off) + ".")
        newest.note(request.page, request.seq)
        stop = _stopper(newest, request.page, request.seq, http)
        try:
            return explorer.analyse(request.text, request.layer, request.head, [tuple(p) for p in request.off], request.mode, stop=stop)
        except Stopped as exc:
            return JSONResponse({"error": str(exc), "superseded": True}, status_code=409)
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
    app.add_middleware(
        BodyLimit,
        limit=body_limit(explorer.max_chars),
        hint=f"It reads at most {explorer.max_tokens} tokens, from a text's first {explorer.max_chars:,} characters: send at most that much text.",
    )
    return app


def _stopper(newest: "Newest", page_id: str, seq: int, http: Any) -> Callable[[], Optional[str]]:
    """What :meth:`Explorer.analyse <attnsim.explore.session.Explorer.analyse>` asks, in the request's worker thread,
    before each forward pass: why to stop (a newer request of the same page arrived, or the client disconnected), or None."""
    import anyio.from_thread

    def stop() -> Optional[str]:
        newer = newest.newer(page_id, seq)
        if newer is not None:
            return f"Request {seq} of this page was superseded by its request {newer} before its forward pass; it was not computed."
        if anyio.from_thread.run(http.is_disconnected):
            return "The client disconnected before the forward pass; the request was not computed."
        return None

    return stop


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


__all__ = ["HOST", "BodyLimit", "ExploreServerError", "Newest", "body_limit", "check_port", "create_app", "serve"]
