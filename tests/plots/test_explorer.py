"""The explorer.html artifact: embedded data, self-containment, and an end-to-end render in headless Chromium."""

from __future__ import annotations

import json
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from attnsim.plots.explorer import explorer_data, explorer_html
from tests.helpers import browser
from tests.helpers.browser import CHROMIUM_FLAGS


def _embedded(page: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', page, re.S).group(1))


def test_pooling_quantisation_and_labels():
    rng = np.random.default_rng(0)
    csm = rng.normal(size=(2, 1, 3, 10, 10))  # (layer, example, head, T, T)
    attention = rng.random((2, 1, 3, 10, 10))
    tokens = [[f"t{i}" for i in range(10)]]
    data = explorer_data(csm, attention, tokens, [10], ["doc"], max_tokens=4)
    example = data["examples"][0]
    # 10 tokens pooled to ceil(10 / ceil(10 / 4)) = 4 cells of 3 tokens (the last holds 1)
    assert example["cells"] == 4 and example["block"] == 3
    assert example["labels"] == ["t0 … t2 [0-2]", "t3 … t5 [3-5]", "t6 … t8 [6-8]", "t9 [9]"]
    import base64

    codes = np.frombuffer(base64.b64decode(example["attention"]["codes"]), dtype=np.uint8).reshape(2, 3, 4, 4)
    low, high = example["attention"]["ranges"][1][2]
    decoded = low + (high - low) * codes[1, 2] / 253
    pooled = attention[1, 0, 2, :9, :9].reshape(3, 3, 3, 3).mean((1, 3))
    assert np.allclose(decoded[:3, :3], pooled, atol=(high - low) / 253 + 1e-3)
    only_csm = explorer_data(csm, None, tokens, [10], ["doc"], max_tokens=64)
    page = explorer_html(only_csm, "t")
    assert 'id="attention"' not in page and "attention" not in only_csm["examples"][0]  # the CSM panel alone


@pytest.fixture(scope="module")
def explorer_page(tiny_bert, tmp_path_factory) -> Path:
    """explorer.html of one attention_maps run of the tiny BERT on three small documents (run once per module)."""
    from mlflow import MlflowClient

    from attnsim.workflows.run import run

    folder = tmp_path_factory.mktemp("explorer")
    texts = folder / "texts"
    texts.mkdir()
    words = "river rain cattle library station children lake colder measure spring farmers council mayor volunteers ground days".split()
    for i in range(3):
        # no repeated stretch: two windows of one document never hold the same tokens
        sentences = [f"The {words[(i + k) % 16]} met the {words[(3 * k + i) % 16]} on day {k}." for k in range(12)]
        (texts / f"doc{i}.txt").write_text(" ".join(sentences))
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    result = run(
        "attention_maps",
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
    client = MlflowClient(uri)
    assert "explorer.html" in {a.path for a in client.list_artifacts(result.run_id)}
    return Path(client.download_artifacts(result.run_id, "explorer.html", str(folder)))


class _Dom(HTMLParser):
    """Attributes of the canvases and body, and the status text, of a dumped DOM."""

    def __init__(self):
        super().__init__()
        self.attrs: dict = {}
        self.status = ""
        self._in_status = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "body" or (tag == "canvas" and "id" in attrs):
            self.attrs[attrs.get("id", tag)] = attrs
        self._in_status = attrs.get("id") == "status"

    def handle_data(self, data):
        if self._in_status:
            self.status += data

    def handle_endtag(self, tag):
        self._in_status = False


def _render(chromium: str, page: Path, fragment: str, profile: Path) -> _Dom:
    out = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=500", "--dump-dom", f"{page.as_uri()}#{fragment}"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    dom = _Dom()
    dom.feed(out.stdout)
    return dom


def test_explorer_artifact_is_self_contained_and_small(explorer_page):
    page = explorer_page.read_text()
    # nothing is fetched: no external scripts, styles, images or URLs at all
    assert not re.search(r"(src|href)\s*=", page) and "http://" not in page and "https://" not in page
    data = _embedded(page)
    assert data["layers"] == 2 and data["heads"] == 4 and len(data["examples"]) == 2
    assert len(page) < 100_000  # 2 examples x 2 layers x 4 heads x 24 x 24 cells x 2 kinds, one byte each, base64


def test_explorer_renders_in_headless_chromium_and_switches(explorer_page, tmp_path):
    chromium = browser.chromium()
    page = explorer_page
    first = _render(chromium, page, "example=0&layer=0&head=0", tmp_path / "profile0")
    second = _render(chromium, page, "example=0&layer=1&head=2", tmp_path / "profile1")
    third = _render(chromium, page, "example=1&layer=1&head=2", tmp_path / "profile2")
    for dom, (example, layer, head) in ((first, (0, 0, 0)), (second, (0, 1, 2)), (third, (1, 1, 2))):
        body = dom.attrs["body"]
        assert (body["data-example"], body["data-layer"], body["data-head"]) == (str(example), str(layer), str(head))
        assert f"layer {layer}, head {head}" in dom.status
        for kind in ("csm", "attention"):
            assert dom.attrs[kind].get("data-checksum"), f"{kind} was not drawn"
            assert int(dom.attrs[kind]["width"]) >= 24  # one cell per token, scaled up
    # switching layer and head, then example, changes what is drawn in both panels
    for kind in ("csm", "attention"):
        checksums = {dom.attrs[kind]["data-checksum"] for dom in (first, second, third)}
        assert len(checksums) == 3, kind
