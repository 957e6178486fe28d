"""End to end: `attnsim ui` serves a store made by a tiny `attnsim run`, `attnsim sweep` and `attnsim report`; the links
those commands print open, in headless Chromium, the classic machine-learning view with the run's metrics and the
report rendered; SIGTERM stops the UI with every process it started.

Chromium renders the MLflow UI's JavaScript (``--dump-dom`` after the network is idle) from a fresh profile, as a
newcomer's browser would: without ``workflowType`` in the URL MLflow would show its GenAI mode.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import socket
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from mlflow import MlflowClient

from attnsim.cli import main
from tests.helpers.browser import CHROMIUM_FLAGS
from tests.helpers.browser import chromium as _chromium
from tests.helpers.models import save_tiny_model

pytestmark = pytest.mark.e2e

TINY = ["corpus.limit=2", "corpus.seq_len=32", "trainer.batch_size=2", "trainer.progress_bar=false", "tracking.figures=false", "plots.examples=0"]
LINK = re.compile(r"http://127\.0\.0\.1:5000(/#/\S+)")


def _run_cli(args) -> str:
    """``attnsim ARGS`` in this process; its standard output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def store(tiny_bert, tmp_path_factory) -> dict:
    """A store with a run of a tiny BERT and one of a tiny GPT-2 (with figures), a sweep (parent and two children) and a
    report, and the links the commands printed."""
    from tests.helpers.tiny_models import save_tiny

    root = tmp_path_factory.mktemp("ui_store")
    uri = f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"
    common = [*TINY, f"tracking.uri={uri}"]
    run_out = _run_cli(["run", "csm", f"model.path={tiny_bert}", *common])
    gpt2 = save_tiny(root / "gpt2-tiny", "gpt2")
    gpt2_out = _run_cli(["run", "csm", f"model.path={gpt2}", *common, "tracking.figures=true", "plots.explorer=false"])
    checkpoints = root / "checkpoints"
    save_tiny_model(checkpoints / "step-000002", seed=1)
    sweep_out = _run_cli(["sweep", "csm", "--base", str(tiny_bert), "--checkpoints", str(checkpoints), *common])
    (run_link,) = LINK.findall(run_out)
    (parent_link,) = LINK.findall(sweep_out)
    run_id = re.search(r"run id: (\w+)", run_out).group(1)
    parent_id = re.search(r"sweep parent run: (\w+)", sweep_out).group(1)
    report_out = _run_cli(["report", run_id, "--uri", uri, "--out", str(root / "report.md")])
    (report_link,) = LINK.findall(report_out)
    gpt2_id = re.search(r"run id: (\w+)", gpt2_out).group(1)
    return {"uri": uri, "run": (run_id, run_link), "gpt2": gpt2_id, "parent": (parent_id, parent_link), "report": report_link}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_ui(uri: str, log: Path, port: int = 0) -> subprocess.Popen:
    """`attnsim ui` on ``uri`` and ``port`` (0: a free one), started as a user would (its own process), once it says it is ready."""
    port = port or _free_port()
    with open(log, "w") as sink:
        process = subprocess.Popen([sys.executable, "-m", "attnsim.cli", "ui", "--uri", uri, "--port", str(port)], stdout=sink, stderr=subprocess.STDOUT)
    process.port = port
    deadline = time.monotonic() + 180
    while "ready after" not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            _stop(process)
            pytest.fail(f"attnsim ui exited with {process.returncode} or was not ready after 180 s:\n{log.read_text()}")
        time.sleep(0.2)
    return process


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def ui(store, tmp_path_factory):
    """`attnsim ui` on the store; always stopped."""
    log = tmp_path_factory.mktemp("ui_log") / "ui.log"
    process = _start_ui(store["uri"], log)
    try:
        yield {"process": process, "port": process.port, "log": log}
    finally:
        _stop(process)


class _Page(HTMLParser):
    """Visible text nodes (no style or script) and the links of a dumped DOM."""

    def __init__(self, html: str):
        super().__init__()
        self.texts: list = []
        self.links: dict = {}  # data-testid -> (href, text)
        self.headings: list = []
        self.tables = 0
        self._skip = 0
        self._link = None
        self._heading = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("style", "script"):
            self._skip += 1
        elif tag == "a" and attrs.get("data-testid"):
            self._link = [attrs["data-testid"], attrs.get("href", ""), ""]
        elif tag in ("h1", "h2"):
            self._heading = ""
        if tag == "table" or attrs.get("role") == "table":  # MLflow draws Markdown tables as role="table" grids
            self.tables += 1

    def handle_endtag(self, tag):
        if tag in ("style", "script"):
            self._skip -= 1
        elif tag == "a" and self._link:
            self.links[self._link[0]] = (self._link[1], self._link[2].strip())
            self._link = None
        elif tag in ("h1", "h2") and self._heading is not None:
            self.headings.append(self._heading.strip())
            self._heading = None

    def handle_data(self, data):
        if self._skip or not data.strip():
            return
        self.texts.append(data.strip())
        if self._link:
            self._link[2] += data
        if self._heading is not None:
            self._heading += data

    @property
    def text(self) -> str:
        return " ".join(self.texts)

    def follows(self, first: str, second: str) -> bool:
        """Whether a text node ``first`` is directly followed by the text node ``second``."""
        return any(a == first and b == second for a, b in zip(self.texts, self.texts[1:]))


def _open(url: str, profile: Path, ready: str) -> _Page:
    """The DOM of ``url`` after its scripts ran, from a fresh Chromium profile; tried again with more time if ``ready`` is not shown yet."""
    chromium = _chromium()
    for budget in (15000, 60000):
        out = subprocess.run(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}-{budget}", "--window-size=1400,1000", f"--virtual-time-budget={budget}", "--dump-dom", url],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        page = _Page(out.stdout)
        if ready in page.text:
            break
    return page


def _assert_classic_view_with_metrics(page: _Page, run) -> None:
    # the classic view: the run sits under "Runs" (GenAI mode files it under "Evaluations", /evaluation-runs)
    href, text = page.links["experiment-observatory-link-runs"]
    assert (text, href) == ("Runs", f"#/experiments/{run.info.experiment_id}/runs")
    assert "Model registry" in page.texts and "Evaluation runs" not in page.texts
    # the run's metrics, with their logged values
    assert f"Metrics ({len(run.data.metrics)})" in page.text
    assert page.follows("csm/mean", repr(run.data.metrics["csm/mean"]))


def test_printed_links_open_the_run_and_the_sweep_parent_in_the_classic_view(store, ui, tmp_path):
    client = MlflowClient(store["uri"])
    base = f"http://127.0.0.1:{ui['port']}"
    for name in ("run", "parent"):
        run_id, route = store[name]
        assert route.endswith("?workflowType=machine_learning")
        run = client.get_run(run_id)
        page = _open(base + route, tmp_path / name, ready="Metrics (")
        _assert_classic_view_with_metrics(page, run)
    assert client.get_run(store["parent"][0]).data.tags["attnsim.kind"] == "sweep"


def test_the_report_renders_in_mlflows_artifact_viewer(store, ui, tmp_path):
    page = _open(f"http://127.0.0.1:{ui['port']}{store['report']}", tmp_path / "report", ready="Verdicts at a glance")
    assert "Verdicts at a glance" in page.headings and "1. Early layers pair tokens at long range" in page.headings
    assert page.tables >= 2  # verdicts and runs, as tables
    assert "<br>" not in page.text and "**" not in page.text  # no raw HTML or Markdown shown as text


def test_the_bare_url_opens_the_experiment_list_in_the_classic_view(store, ui, tmp_path):
    """A fresh browser at http://127.0.0.1:<port>/ lands on the experiments (classic view), not MLflow's GenAI home;
    the page's own defaults say that the Assistant panel has already opened once (so it does not open by itself)."""
    page = _open(f"http://127.0.0.1:{ui['port']}/", tmp_path / "bare", ready="Create")
    assert "Welcome to MLflow" not in page.text and "Experiments - MLflow" in page.text
    assert "Model registry" in page.texts and "csm" in page.texts  # the classic navigation, and the store's experiment
    import urllib.request

    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"http://127.0.0.1:{ui['port']}/", timeout=30) as answer:
        html = answer.read().decode()
    assert '"mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true"' in html and html.index("localStorage") < html.index("</head>")


def test_the_run_page_compares_heads_and_tells_models_apart(store, ui, tmp_path):
    """In Chromium, on the store's two runs (a tiny BERT and a tiny GPT-2): the runs list names each run's model; a
    run's landing tab (Overview) opens on its description, which links its mosaics, tables and explorer, shows its
    headline numbers rounded and draws its heads mosaic; its Model metrics tab opens on line charts of a layer's heads
    on one axis (MLflow steps = heads). With ATTNSIM_SCREENSHOTS=DIR the pages are saved there (docs/assets)."""
    from tests.helpers.browser import Page

    client = MlflowClient(store["uri"])
    bert, gpt2 = client.get_run(store["run"][0]), client.get_run(store["gpt2"])
    names = (bert.info.run_name, gpt2.info.run_name)
    assert names == (f"csm · {bert.data.tags['attnsim.model']}", "csm · gpt2-tiny") and names[0] != names[1]
    assert gpt2.data.tags["attnsim.model_path"].endswith("gpt2-tiny") and not gpt2.data.tags["attnsim.model"].startswith("/")
    # MLflow's empty Default experiment is gone; the experiment has its description
    assert [e.name for e in client.search_experiments()] == ["csm"] and client.get_experiment("1").tags["mlflow.note.content"]
    shots = os.environ.get("ATTNSIM_SCREENSHOTS")
    base, eid = f"http://127.0.0.1:{ui['port']}", gpt2.info.experiment_id
    with Page(f"{base}/#/experiments/{eid}/runs?workflowType=machine_learning", tmp_path / "runs", width=1200, height=700) as page:
        page.wait_for(f"document.body.innerText.includes({names[1]!r}) && document.body.innerText.includes({names[0]!r})")
        if shots:
            page.screenshot(Path(shots) / "mlflow-runs.png", clip=(0, 0, 1200, 420))
    run_page = f"{base}/#/experiments/{eid}/runs/{gpt2.info.run_id}"
    with Page(f"{run_page}?workflowType=machine_learning", tmp_path / "overview", width=1200, height=800) as page:
        page.wait_for("[...document.images].some(i => i.src.includes('get-artifact') && i.complete && i.naturalWidth > 0)")
        text = page.evaluate("document.body.innerText")
        assert "Read this run:" in text and f"attnsim explore --run {gpt2.info.run_id}" in text
        links = page.evaluate("JSON.stringify([...document.querySelectorAll('a')].map(a => a.getAttribute('href')))")
        assert f"#/experiments/{eid}/runs/{gpt2.info.run_id}/artifacts/figures/csm/heads.png?workflowType=machine_learning" in links
        mean = gpt2.data.metrics["csm/mean"]
        assert f"{mean:.4g}" in text and repr(mean) not in text.split("Metrics (")[0]  # rounded in the description
        if shots:
            page.click("[...document.querySelectorAll('button')].find(e => e.innerText.trim() === 'Show more')")
            page.wait_for("[...document.querySelectorAll('button')].some(e => e.innerText.trim() === 'Show less')")
            page.screenshot(Path(shots) / "mlflow-run-overview.png", clip=(200, 0, 1000, 660))
    with Page(f"{run_page}/model-metrics?workflowType=machine_learning", tmp_path / "metrics", width=1200, height=800) as page:
        page.wait_for("document.querySelectorAll('.js-plotly-plot g.trace').length >= 2")  # two charts drawn
        sections = page.evaluate(
            "JSON.stringify([...document.querySelectorAll('h3, [role=heading], span')].map(e => e.innerText).filter(t => /^0_|^csm|^distance/.test(t)))"
        )
        assert sections.index("0_heads/csm/mean") < sections.index("csm/mean")  # the comparison opens the tab
        layer = client.get_metric_history(gpt2.info.run_id, "0_heads/csm/mean/layer 00")
        heads = [gpt2.data.metrics.get(f"csm/mean/L00/H{h:02d}") for h in range(4)]
        assert [m.step for m in layer] == [0, 1, 2, 3] and [m.value for m in layer] == heads  # the same numbers, step = head
        if shots:
            page.screenshot(Path(shots) / "mlflow-model-metrics.png", clip=(200, 0, 1000, 660))


def test_ui_keeps_mlflows_security_middleware(ui):
    """A page of another site cannot reach the local UI by DNS rebinding: a foreign Host header is refused."""
    import http.client

    def status(host: str) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", ui["port"], timeout=30)
        try:
            connection.request("GET", "/ajax-api/2.0/mlflow/experiments/search?max_results=1", headers={"Host": host})
            return connection.getresponse().status
        finally:
            connection.close()

    assert status(f"127.0.0.1:{ui['port']}") == 200
    assert status("evil.example") == 403
    # the page with attnsim's browser defaults still goes through MLflow's checks
    connection = http.client.HTTPConnection("127.0.0.1", ui["port"], timeout=30)
    try:
        connection.request("GET", "/", headers={"Host": "evil.example"})
        assert connection.getresponse().status == 403
    finally:
        connection.close()


def _process_tree(root: int) -> dict:
    """``{pid: command line}`` of the live (not zombie) descendants of ``root``, from /proc."""
    parents, commands = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            parents[int(entry)] = int(ppid)
            commands[int(entry)] = command
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = commands[pid]
                frontier.append(pid)
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _server_of(process: subprocess.Popen) -> int:
    """The one server process `attnsim ui` started (MLflow's app in uvicorn): no job runner, no Huey consumers."""
    tree = _process_tree(process.pid)
    assert len(tree) == 1, tree  # MLflow's app in uvicorn, in one process: no job runner, no Huey consumers
    ((server, command),) = tree.items()
    assert "-m attnsim.tracking.ui" in command and "huey" not in command and "job" not in command
    assert os.getpgid(server) == server != os.getpgid(process.pid)  # a process group of its own
    return server


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from Linux's /proc")
def test_ui_runs_one_server_process_and_sigterm_stops_them_all(ui, store):
    from attnsim.tracking.links import open_hint, running_ui_port

    assert running_ui_port(store["uri"]) == ui["port"]  # links printed while it runs say its port
    assert open_hint(store["uri"], "1").startswith(f"open it: http://127.0.0.1:{ui['port']}/#/experiments/1/runs")
    process = ui["process"]
    server = _server_of(process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    deadline = time.monotonic() + 10
    while _alive(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(server)
    assert ui["log"].read_text().rstrip().endswith("stopped the MLflow UI")
    assert running_ui_port(store["uri"]) is None  # its marker is gone


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from Linux's /proc")
def test_ctrl_c_stops_the_ui_and_its_server(store, ui, tmp_path):
    """Also: `attnsim ui` starts again at once on the port the earlier one served a browser on (its closed connections
    wait in TIME_WAIT)."""
    _stop(ui["process"])
    started = time.monotonic()
    process = _start_ui(store["uri"], tmp_path / "ui.log", port=ui["port"])
    assert time.monotonic() - started < 120 and "in use" not in (tmp_path / "ui.log").read_text()
    try:
        server = _server_of(process)
        process.send_signal(signal.SIGINT)  # what Ctrl-C sends to the terminal's foreground process
        assert process.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server)
    finally:
        _stop(process)
