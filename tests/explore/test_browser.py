"""The live explorer in headless Chromium, driven over the DevTools protocol as a user drives it.

A server of the bundled MiniLM (and of a tiny causal LM) runs in a thread of the test on 127.0.0.1 and is
stopped by it. Typing changes the maps, whose values equal attnsim's capture of the same text (<= 1e-6);
the arrow keys move between heads and the URL reopens the view; switching a head off changes the prediction
as a direct ablation does; the notebook view (``attnsim.view(...).save``) renders from disk with no server;
``attnsim explore`` stops on Ctrl-C and frees its port at once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

from attnsim.explore.server import check_port, create_app
from attnsim.explore.session import Explorer
from tests.helpers import browser
from tests.helpers.paths import ROOT
from tests.helpers.tiny_models import save_tiny

ROOT_JS = "document.querySelector('.attnsim-explore')"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Served:
    """uvicorn serving an explorer's app in a thread, on 127.0.0.1."""

    def __init__(self, explorer: Explorer):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(explorer), host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started, "the explorer's server did not start"
        self.url = f"http://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def minilm():
    browser.chromium()  # skip before loading anything where Chromium is missing
    explorer = Explorer.load(["corpus.seq_len=128"])
    served = Served(explorer)
    yield explorer, served.url
    served.stop()


def wait_drawn(page, after: int = 0) -> int:
    """Wait until the page drew an answer newer than request ``after``; returns its number."""
    seq = page.wait_for(
        f"(function(){{var r={ROOT_JS}; var s=+(r.getAttribute('data-seq')||0); return r.getAttribute('data-state')==='ready' && s>{after} ? s : 0}})()", 90
    )
    return int(seq)


def page_maps(page, name: str = "attention", ablated: bool = False) -> np.ndarray:
    where = "d.ablation._maps" if ablated else "d._maps"
    values = page.evaluate(f"(function(){{var d={ROOT_JS}.__explore.data; return Array.from({where}.{name})}})()")
    n = int(round(len(values) ** 0.5))
    return np.asarray(values, dtype=np.float32).reshape(n, n)


def captured(explorer: Explorer, text: str, layer: int, head: int) -> np.ndarray:
    from attnsim.capture.hooks import forward_with_capture
    from attnsim.capture.load import load_model

    window = explorer.window(text)
    model, _ = load_model(explorer.info, needs_attention=True)
    inputs = {"input_ids": window.batch["input_ids"], "attention_mask": window.batch["attention_mask"]}
    with torch.inference_mode():
        _, capture = forward_with_capture(model, explorer.info.arch, explorer.info.n_heads, inputs, attention=True)
    return capture.attention_layers[layer][0, head].numpy()


def test_typing_changes_the_maps_which_equal_attnsim_capture(minilm, tmp_path):
    explorer, url = minilm
    with browser.Page(url + "#layer=2&head=5&text=The%20cat%20sat.", tmp_path / "profile") as page:
        first = wait_drawn(page)
        before = page.evaluate(f"{ROOT_JS}.querySelector('[data-role=attention]').getAttribute('data-checksum')")
        page.evaluate(f"(function(){{var b={ROOT_JS}.querySelector('textarea'); b.focus(); b.setSelectionRange(b.value.length, b.value.length)}})()")
        page.type_text(" The cat sat on the mat, and then the cat sat again.")
        second = wait_drawn(page, first)
        text = page.evaluate(f"{ROOT_JS}.querySelector('textarea').value")
        assert text == "The cat sat. The cat sat on the mat, and then the cat sat again."
        after = page.evaluate(f"{ROOT_JS}.querySelector('[data-role=attention]').getAttribute('data-checksum')")
        assert after != before
        assert np.abs(page_maps(page) - captured(explorer, text, 2, 5)).max() <= 1e-6
        # keyboard: leave the text box, one layer down, one head right; the URL holds the view
        page.press("Escape", "Escape", 27)
        page.press("ArrowDown", "ArrowDown", 40)
        third = wait_drawn(page, second)
        page.press("ArrowRight", "ArrowRight", 39)
        wait_drawn(page, third)
        assert page.evaluate(f"{ROOT_JS}.getAttribute('data-layer') + ',' + {ROOT_JS}.getAttribute('data-head')") == "3,6"
        assert np.abs(page_maps(page) - captured(explorer, text, 3, 6)).max() <= 1e-6
        tokens = page.evaluate(f"{ROOT_JS}.__explore.data.tokens")
        assert tokens[:3] == ["[CLS]", "The", "cat"]
        hash_ = page.evaluate("location.hash")
    assert "layer=3" in hash_ and "head=6" in hash_ and "text=The%20cat%20sat." in hash_
    with browser.Page(url + hash_, tmp_path / "profile2") as page:  # the URL reopens the same view
        wait_drawn(page)
        assert page.evaluate(f"{ROOT_JS}.getAttribute('data-layer') + ',' + {ROOT_JS}.getAttribute('data-head')") == "3,6"
        assert np.abs(page_maps(page) - captured(explorer, text, 3, 6)).max() <= 1e-6
        timings = page.evaluate(f"{ROOT_JS}.__explore.timings")
        assert timings and timings[-1]["server_ms"] > 0


def test_a_typing_burst_keeps_one_request_in_flight_and_draws_the_last_text(minilm, tmp_path, monkeypatch):
    explorer, url = minilm
    forward, passes = explorer.forward, []

    def slow(window, *args, **kwargs):  # a slow model: requests would pile up behind it
        passes.append(window.batch["input_ids"].shape[1])
        time.sleep(0.3)
        return forward(window, *args, **kwargs)

    monkeypatch.setattr(explorer, "forward", slow)
    with browser.Page(url + "#layer=0&head=0&text=A%20word", tmp_path / "profile") as page:
        first = wait_drawn(page)
        page.evaluate(f"(function(){{var b={ROOT_JS}.querySelector('textarea'); b.focus(); b.setSelectionRange(b.value.length, b.value.length)}})()")
        before = page.evaluate(f"{ROOT_JS}.__explore.sent")
        for letter in " stations":  # nine characters at 8 a second
            page.type_text(letter)
            time.sleep(0.125)
        wait_drawn(page, first)
        page.wait_for(f"{ROOT_JS}.__explore.flying === 0 && {ROOT_JS}.getAttribute('data-state') === 'ready'", 60)
        sent = page.evaluate(f"{ROOT_JS}.__explore.sent") - before
        assert page.evaluate(f"{ROOT_JS}.__explore.mostFlying") == 1
        assert 1 <= sent < 9  # edits made while one request was in flight went out together, as the newest text
        assert page.evaluate(f"{ROOT_JS}.__explore.data.tokens")[-2] == "stations"  # the last text is the one drawn
        assert np.abs(page_maps(page) - captured(explorer, "A word stations", 0, 0)).max() <= 1e-6


def test_bad_input_shows_a_message(minilm, tmp_path):
    _, url = minilm
    with browser.Page(url + "#layer=9&head=0&text=hello", tmp_path / "profile") as page:
        page.wait_for(f"{ROOT_JS}.getAttribute('data-state') === 'error'", 90)
        status = page.evaluate(f"{ROOT_JS}.querySelector('[data-role=status]').textContent")
        assert "does not exist" in status and "layer 0..5" in status
        page.press("ArrowUp", "ArrowUp", 38)  # layer 9 - 1 wraps into range: the server answers again
        wait_drawn(page)
        page.evaluate(f"(function(){{var b={ROOT_JS}.querySelector('textarea'); b.focus(); b.select()}})()")
        page.send("Input.dispatchKeyEvent", type="keyDown", key="Backspace", code="Backspace", windowsVirtualKeyCode=8)
        page.send("Input.dispatchKeyEvent", type="keyUp", key="Backspace", code="Backspace", windowsVirtualKeyCode=8)
        page.wait_for(f"{ROOT_JS}.getAttribute('data-state') === 'error'", 60)
        assert "empty" in page.evaluate(f"{ROOT_JS}.querySelector('[data-role=status]').textContent")


def test_switching_a_head_off_in_the_page_equals_a_direct_ablation(tmp_path):
    from attnsim.capture.interventions import ablation_values, replace_heads

    browser.chromium()
    explorer = Explorer.load([f"model.path={save_tiny(tmp_path / 'llama', 'llama')}", "corpus.seq_len=48"])
    served = Served(explorer)
    text = "the farmers met the council at the station"
    try:
        with browser.Page(served.url + "#layer=1&head=2&text=" + text.replace(" ", "%20"), tmp_path / "profile") as page:
            first = wait_drawn(page)
            assert page.evaluate(f"{ROOT_JS}.__explore.data.ablation") is None
            page.press("ArrowUp", "ArrowUp", 38)  # layer 0, head 2
            second = wait_drawn(page, first)
            page.press("x", "KeyX", 88)  # switch it off
            wait_drawn(page, second)
            data = page.evaluate(
                f"(function(){{var d={ROOT_JS}.__explore.data; return {{off: d.ablation.off, p: d.ablation.predictions.p, ids: d.ablation.predictions.ids, clean: d.predictions.p, cells: {ROOT_JS}.querySelector('[data-role=predictions]').textContent}}}})()"
            )
            assert "off=0.2" in page.evaluate("location.hash")
    finally:
        served.stop()
    assert data["off"] == [[0, 2]] and "heads off" in data["cells"]
    window = explorer.window(text)
    inputs = {"input_ids": window.batch["input_ids"], "attention_mask": window.batch["attention_mask"]}
    with torch.inference_mode(), replace_heads(explorer.model, explorer.info.arch, explorer.info.n_heads, ablation_values([(0, 2)], "zero")):
        direct = torch.softmax(explorer.model(**inputs).logits[0], -1).topk(5, -1)
    assert data["ids"] == direct.indices.tolist()
    assert np.abs(np.array(data["p"]) - direct.values.numpy()).max() <= 1e-6
    assert not np.allclose(data["p"], data["clean"])


def test_notebook_view_renders_in_chromium_without_a_server(tiny_bert, tmp_path):
    import attnsim

    browser.chromium()
    shown = attnsim.view("The river rose. The river rose again.", model=str(tiny_bert), layer=1, head=0, off=[(0, 1)])
    html = shown._repr_html_()
    assert "AttnsimExplore.mount" in html and "http" not in html.replace("http-equiv", "")
    path = shown.save(tmp_path / "view.html")
    with browser.Page(path.as_uri(), tmp_path / "profile") as page:
        page.wait_for(f"{ROOT_JS} && {ROOT_JS}.getAttribute('data-state') === 'ready'", 60)
        assert "embedded view" in page.evaluate(f"{ROOT_JS}.querySelector('[data-role=status]').textContent")
        assert page.evaluate(f"{ROOT_JS}.querySelector('[data-role=attention]').getAttribute('data-checksum')")
        exact = np.frombuffer(__import__("base64").b64decode(shown.data["maps"]["attention"]), dtype="<f4")
        assert np.abs(page_maps(page).ravel() - exact).max() <= 1e-6
        page.evaluate(f"{ROOT_JS}.focus()")
        page.press("ArrowRight", "ArrowRight", 39)  # another head, from the embedded bytes
        page.wait_for(f"{ROOT_JS}.getAttribute('data-head') === '1'", 30)
        other = page_maps(page)
    n = shown.data["n_tokens"]
    explorer = Explorer.load([f"model.path={tiny_bert}"])
    expected = captured(explorer, "The river rose. The river rose again.", 1, 1)
    assert other.shape == (n, n) and np.abs(other - expected).max() <= (expected.max() - expected.min()) / 255 + 1e-6


def test_ctrl_c_stops_the_server_and_frees_the_port(tiny_bert):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnsim.cli", "explore", f"model.path={tiny_bert}", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "Ctrl-C stops it" in line or not line:
                break
        assert f"http://localhost:{port}/" in "".join(lines), "".join(lines)
        import urllib.request

        info = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/info", timeout=30).read())
        assert info["layers"] == 2 and info["heads"] == 4
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) in (0, 130)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check_port(port)  # free again at once: binding it raises nothing
