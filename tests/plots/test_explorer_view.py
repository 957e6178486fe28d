"""explorer.html: the URL hash follows the view, token labels on both axes, examples named by document
and window, and a run without attention shows the CSM panel alone (headless Chromium)."""

from __future__ import annotations

import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from attnsim.findings.examples import Examples, window_label
from attnsim.plots.explorer import axis_labels, explorer_data, explorer_html
from tests.helpers.browser import CHROMIUM_FLAGS
from tests.helpers.browser import chromium as _chromium

TOKENS = [[f"w{i}" for i in range(10)], [f"v{i}" for i in range(10)]]


class _Page(HTMLParser):
    """Body attributes, status text, canvases and the token labels of each axis box of a dumped DOM."""

    def __init__(self):
        super().__init__()
        self.body: dict = {}
        self.canvases: dict = {}
        self.axes: dict = {}  # box id -> [(cell, text)]
        self.status = ""
        self._box = None
        self._cell = None
        self._in_status = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "body":
            self.body = attrs
        elif tag == "canvas":
            self.canvases[attrs["id"]] = attrs
        elif tag == "div" and attrs.get("class") in ("ylab", "xlab"):
            self._box = attrs["id"]
            self.axes[self._box] = []
        elif tag == "span" and self._box is not None:
            self._cell = int(attrs["data-cell"])
        self._in_status = attrs.get("id") == "status"

    def handle_data(self, data):
        if self._cell is not None:
            self.axes[self._box].append((self._cell, data))
        if self._in_status:
            self.status += data

    def handle_endtag(self, tag):
        if tag == "span":
            self._cell = None
        elif tag == "div":
            self._box = None if self._cell is None else self._box
        self._in_status = False


def _render(page: Path, url_suffix: str, profile: Path, script: str = "") -> _Page:
    """Dump the DOM of ``page`` opened at ``url_suffix`` (``#...`` or ``?...``), after ``script`` (run in
    the page, after its own script) when given."""
    if script:  # a copy of the page with the script appended, as a user's actions would follow the page's own
        copy = page.with_name(f"{page.stem}-{profile.name}.html")
        copy.write_text(page.read_text().replace("</body>", f"<script>{script}</script></body>"))
        page = copy
    out = subprocess.run(
        [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=500", "--dump-dom", page.as_uri() + url_suffix],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    parsed = _Page()
    parsed.feed(out.stdout)
    return parsed


def _data(attention: bool = True, max_tokens: int = 64) -> dict:
    rng = np.random.default_rng(0)
    csm = rng.normal(size=(2, 2, 3, 10, 10))  # (layer, example, head, T, T)
    probs = rng.random((2, 2, 3, 10, 10)) if attention else None
    return explorer_data(csm, probs, TOKENS, [10, 8], ["bbc/business/351", "bbc/business/351"], max_tokens, ["bbc/business/351 #0", "bbc/business/351 #1"])


@pytest.fixture
def page(tmp_path) -> Path:
    path = tmp_path / "explorer.html"
    path.write_text(explorer_html(_data(), "t"))
    return path


def _view(dom: _Page) -> tuple:
    return dom.body["data-example"], dom.body["data-layer"], dom.body["data-head"]


def test_the_hash_opens_that_view(page, tmp_path):
    dom = _render(page, "#example=1&layer=1&head=2", tmp_path / "p0")
    assert _view(dom) == ("1", "1", "2") and "example 1 (bbc/business/351 #1), layer 1, head 2" in dom.status
    assert dom.body["data-hash"] == "#example=1&layer=1&head=2"
    # a query string opens a view too, and the hash wins over it
    assert _view(_render(page, "?example=1&layer=0&head=1", tmp_path / "p1")) == ("1", "0", "1")
    assert _view(_render(page, "?example=0&layer=0&head=0#example=1&layer=1&head=1", tmp_path / "p2")) == ("1", "1", "1")


def test_the_hash_follows_a_change_of_view(page, tmp_path):
    # the user picks head 1, then layer 0, then example 0, in the menus; the page rewrites the hash
    steps = "".join(
        f"(function(){{const s=document.getElementById('{name}');s.value='{value}';s.dispatchEvent(new Event('change'));}})();"
        for name, value in (("head", 1), ("layer", 0), ("example", 0))
    )
    script = steps + "document.body.setAttribute('data-url-after', location.hash);"
    dom = _render(page, "#example=1&layer=1&head=2", tmp_path / "p3", script)
    assert _view(dom) == ("0", "0", "1")
    assert dom.body["data-url-after"] == "#example=0&layer=0&head=1"
    # a view opened without a hash gets one
    fresh = _render(page, "", tmp_path / "p4", "document.body.setAttribute('data-url-after', location.hash);")
    assert fresh.body["data-url-after"] == "#example=0&layer=0&head=0"


def test_token_labels_on_both_axes_of_both_panels(page, tmp_path):
    dom = _render(page, "#example=1&layer=0&head=0", tmp_path / "p5")
    # example 1 has 8 positions drawn, one cell each (64 pixels: a label on every cell)
    for box in ("csm-ylab", "csm-xlab", "attention-ylab", "attention-xlab"):
        assert dom.axes[box] == [(i, f"v{i}") for i in range(8)], box


def test_pooled_cells_carry_pooled_labels(tmp_path):
    data = _data(max_tokens=4)
    first = data["examples"][0]
    assert first["block"] == 3 and first["axis"] == ["w0…w2", "w3…w5", "w6…w8", "w9"]
    path = tmp_path / "pooled.html"
    path.write_text(explorer_html(data, "t"))
    dom = _render(path, "#example=0&layer=0&head=0", tmp_path / "p6")
    assert dom.axes["csm-ylab"] == dom.axes["csm-xlab"] == list(enumerate(first["axis"]))


def test_axis_labels_are_short():
    assert axis_labels(["[CLS]", "the", "extraordinarily", "river", ",", "x"], 2) == ["[CLS]…the", "extraordina…", ",…x"]
    assert axis_labels(["extraordinarily", "a"], 1) == ["extraordina…", "a"]


def test_a_run_without_attention_shows_only_the_csm_panel(tmp_path):
    data = _data(attention=False)
    assert all("attention" not in example for example in data["examples"])
    page = explorer_html(data, "t")
    assert 'id="attention' not in page and "not captured" not in page and 'id="csm"' in page
    path = tmp_path / "csm.html"
    path.write_text(page)
    dom = _render(path, "#example=0&layer=1&head=1", tmp_path / "p7")
    assert set(dom.canvases) == {"csm"} and dom.canvases["csm"].get("data-checksum")
    assert set(dom.axes) == {"csm-ylab", "csm-xlab"} and len(dom.axes["csm-ylab"]) == 10


def test_examples_are_named_by_document_and_window():
    # windows of one document are consecutive in the corpus: k counts them from 0
    assert [window_label("bbc/business/351", i, 4) for i in (4, 5, 6)] == ["bbc/business/351 #0", "bbc/business/351 #1", "bbc/business/351 #2"]
    examples = Examples(doc_ids=["a", "a"], labels=["a #0", "a #1"])
    assert [examples.label(e) for e in range(2)] == ["a #0", "a #1"] and Examples(doc_ids=["b"]).label(0) == "b"


def test_a_run_names_its_examples_by_document_and_window(tiny_bert, tmp_path):
    """Two windows of one document get #0 and #1 in the explorer's data and menu (a csm run: CSM panel only)."""
    from mlflow import MlflowClient

    from attnsim.workflows.run import run

    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "only.txt").write_text(" ".join(f"The river rose on day {k} and the farmers moved." for k in range(20)))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = run(
        "csm",
        [
            f"model.path={tiny_bert}",
            "corpus=text",
            f"corpus.path={texts}",
            "corpus.seq_len=24",
            "corpus.limit=3",
            "plots.examples=2",
            "trainer.progress_bar=false",
            f"tracking.uri={uri}",
        ],
    )
    page = Path(MlflowClient(uri).download_artifacts(result.run_id, "explorer.html", str(tmp_path))).read_text()
    data = json.loads(re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', page, re.S).group(1))
    doc = data["examples"][0]["doc"]
    assert [e["name"] for e in data["examples"]] == [f"{doc} #0", f"{doc} #1"] and doc.endswith("only.txt")
    assert 'id="attention"' not in page


def test_a_link_out_of_range_says_so(page, tmp_path):
    script = "document.body.setAttribute('data-notice', document.getElementById('notice').hidden ? '' : document.getElementById('notice').textContent);"
    dom = _render(page, "#example=1&layer=99&head=2", tmp_path / "p6", script)
    assert _view(dom) == ("1", "0", "2")  # what it can show of the link
    assert dom.body["data-notice"] == "The link asks for layer 99 (this page has layers 0-1): showing example 1, layer 0, head 2 instead."
    assert _render(page, "#example=1&layer=1&head=2", tmp_path / "p7", script).body["data-notice"] == ""


def test_an_arrow_key_on_a_focused_menu_steps_once(page, tmp_path):
    # the menu's own handling of the key is prevented: only the page's handler steps (one head, not two)
    script = (
        "const s=document.getElementById('head');s.focus();"
        "const ev=new KeyboardEvent('keydown',{key:'ArrowRight',bubbles:true,cancelable:true});s.dispatchEvent(ev);"
        "document.body.setAttribute('data-prevented', String(ev.defaultPrevented));"
    )
    dom = _render(page, "#example=0&layer=0&head=1", tmp_path / "p8", script)
    assert _view(dom) == ("0", "0", "2") and dom.body["data-prevented"] == "true"


def test_both_panels_stand_side_by_side_in_a_1000_px_pane(page, tmp_path):
    script = (
        "const a=document.getElementById('csm').getBoundingClientRect(), b=document.getElementById('attention').getBoundingClientRect();"
        "document.body.setAttribute('data-rows', String(a.top===b.top));document.body.setAttribute('data-right', String(b.right));"
    )
    copy = page.with_name("narrow.html")
    copy.write_text(page.read_text().replace("</body>", f"<script>{script}</script></body>"))
    out = subprocess.run(
        [
            _chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'p9'}",
            "--window-size=1020,900",
            "--virtual-time-budget=500",
            "--dump-dom",
            copy.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    dom = _Page()
    dom.feed(out.stdout)
    assert dom.body["data-rows"] == "true" and float(dom.body["data-right"]) <= 1020, dom.body
