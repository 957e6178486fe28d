"""Headless Chromium for the tests that render pages (explorer, MLflow UI): Debian's package, which
.ci/run installs; elsewhere those tests skip with the reason."""

from __future__ import annotations

import os
import shutil

import pytest

# no background traffic: this machine's network is closed, and Chromium would retry its own services
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def chromium() -> str:
    """Path of the Chromium binary; fails under CI (which must install it), skips elsewhere."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (.ci/run does: apt-get install -y chromium)")
        pytest.skip("headless Chromium is not installed here (Debian package 'chromium'); .ci/run installs it in CI")
    return found


class Page:
    """A page in headless Chromium driven over the DevTools protocol (``websocket-client``): evaluate JavaScript,
    type text as a user does (``Input.insertText``), press keys. Use as a context manager; Chromium is stopped
    (by its process id) on exit, with its profile in ``profile``."""

    def __init__(self, url: str, profile, width: int = 1400, height: int = 1000):
        import json as _json
        import re
        import subprocess
        import time
        import urllib.request

        import websocket

        self._json = _json
        self.proc = subprocess.Popen(
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "--remote-debugging-port=0", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            found = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line or "")
            if found:
                port = int(found.group(1))
            elif not line and self.proc.poll() is not None:
                raise RuntimeError("Chromium exited before it listened for DevTools")
        if port is None:
            self.close()
            raise RuntimeError("Chromium did not open its DevTools port within 60 s")
        target = None
        while target is None and time.monotonic() < deadline:
            pages = _json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
            target = next((p for p in pages if p.get("type") == "page"), None)
            if target is None:
                time.sleep(0.1)
        self.ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        self._id = 0

    def send(self, method: str, **params):
        """One DevTools command; returns its result (raises on a protocol error)."""
        self._id += 1
        self.ws.send(self._json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = self._json.loads(self.ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str, timeout_ms: int = 60000):
        """The value of a JavaScript expression (awaited when it is a promise)."""
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True, timeout=timeout_ms)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript failed: {result['exceptionDetails'].get('exception', {}).get('description') or result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, condition: str, timeout_s: float = 60.0):
        """Poll a JavaScript expression until it is truthy (an expression that throws, e.g. before the page has
        loaded, counts as false); returns its value."""
        import time

        deadline = time.monotonic() + timeout_s
        failure = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(condition)
            except RuntimeError as exc:
                value, failure = None, exc
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(f"{condition!r} was not true within {timeout_s} s" + (f" (last error: {failure})" if failure else ""))

    def type_text(self, text: str) -> None:
        """Type into the focused element as a user's keyboard does (one input event)."""
        self.send("Input.insertText", text=text)

    def press(self, key: str, code: str, key_code: int) -> None:
        """Press and release one key (e.g. ``press("ArrowDown", "ArrowDown", 40)``)."""
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", type=kind, key=key, code=code, windowsVirtualKeyCode=key_code)

    def click(self, element: str) -> None:
        """Click the middle of the element a JavaScript expression gives, with the mouse (as a user does; some of
        MLflow's buttons ignore ``element.click()``)."""
        box = self.evaluate(f"(() => {{ const r = ({element}).getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def screenshot(self, path, clip=None) -> None:
        """Save a PNG of the page (``clip``: x, y, width, height in CSS pixels, within the window: a page that scrolls
        inside its own panes, as MLflow's does, is shot as drawn; without ``clip``, the whole page beyond the window)."""
        import base64

        params = {"format": "png", "captureBeyondViewport": not clip}
        if clip:
            params["clip"] = {"x": clip[0], "y": clip[1], "width": clip[2], "height": clip[3], "scale": 1}
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(self.send("Page.captureScreenshot", **params)["data"]))

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=10)
                except Exception:  # noqa: BLE001 - a Chromium that does not stop is killed
                    self.proc.kill()
                    self.proc.wait(timeout=10)

    def __enter__(self) -> "Page":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
