"""Figures drawn in forked helper processes (attnsim/workflows/figures.py).

The helpers must log exactly the files one process logs, pixel for pixel; an error in a helper's
figure code must reach the run; a helper that dies must leave nothing undrawn.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from attnsim.errors import ConfigError
from attnsim.plots.common import has_fixed_layout, inch_axes
from attnsim.workflows import figures as drawing
from tests.helpers.paths import ROOT
from tests.helpers.runs import runs_of

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="helpers are forked on Linux only")
PARENT = os.getpid()


class FakeFinding:
    """Draws ``count`` small figures (one laid out by tight bbox) and one page naming the drawing process."""

    def __init__(self, name: str, count: int = 2, cost: float = 1.0, in_helper=None):
        self.name, self.count, self.figure_cost, self.in_helper = name, count, cost, in_helper

    def figures(self, summary, examples, plots_cfg):
        if self.in_helper is not None and os.getpid() != PARENT:
            self.in_helper()
        for index in range(self.count):
            if index == 0:
                fig, ax = inch_axes(2.0, 1.0, left=0.4, right=0.1, bottom=0.3, top=0.25)
            else:
                fig, ax = plt.subplots(figsize=(2.5, 1.5))  # saved with bbox_inches="tight"
            ax.plot([0, 1, 2], [summary, index, summary * index])
            ax.set_title(f"{self.name} {index} ({examples})", fontsize=8)
            yield f"figures/{self.name}/figure{index}.png", fig

    def pages(self, summary, plots_cfg, title):
        yield f"pages/{self.name}.html", f"{title} {self.name} pid={os.getpid()}"


class FakeSink:
    """The three calls log_figures makes of a RunSink, with log_figure encoding as the real one does."""

    def __init__(self):
        self.files, self.texts = {}, {}

    def log_figure(self, figure, artifact_file, dpi=100, fixed_layout=False):
        from attnsim.tracking.png import figure_pixels, png_bytes

        try:
            self.files[artifact_file] = png_bytes(figure_pixels(figure, dpi, fixed_layout), dpi)
        finally:
            plt.close(figure)

    def log_png(self, data, artifact_file):
        self.files[artifact_file] = data

    def log_text(self, text, artifact_file):
        self.texts[artifact_file] = text


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _draw(findings, processes, explorer=True):
    sink = FakeSink()
    jobs = [(finding, 1.5 + index) for index, finding in enumerate(findings)]
    used = drawing.log_figures(sink, jobs, "ex", SimpleNamespace(processes=processes, dpi=60, explorer=explorer), "title", has_fixed_layout)
    return sink, used


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)


@linux_only
def test_helpers_log_the_files_one_process_logs_pixel_for_pixel(two_cpus):
    findings = [FakeFinding(name, count) for name, count in (("a", 2), ("b", 3), ("c", 1), ("d", 2))]
    alone, used_alone = _draw(findings, 1)
    helped, used_helped = _draw(findings, 2)
    assert (used_alone, used_helped) == (1, 2)
    assert sorted(helped.files) == sorted(alone.files) and len(alone.files) == 8
    for path in alone.files:
        np.testing.assert_array_equal(_pixels(helped.files[path]), _pixels(alone.files[path]), err_msg=path)
    assert sorted(helped.texts) == sorted(alone.texts) == [f"pages/{name}.html" for name in "abcd"]
    drawn_by = {int(text.rsplit("pid=", 1)[1]) for text in helped.texts.values()}
    assert PARENT not in drawn_by and {int(t.rsplit("pid=", 1)[1]) for t in alone.texts.values()} == {PARENT}
    assert drawing._JOB is None  # nothing of the run is left referenced


@linux_only
def test_a_costly_finding_is_split_between_the_helpers(two_cpus):
    """A finding of figure_cost 3 is drawn in two parts (figures 0, 2, 4 and 1, 3) by both helpers: the same files
    pixel for pixel as one process draws, its page once."""
    findings = [FakeFinding("a", 5, cost=3.0), FakeFinding("b", 1)]
    assert drawing.drawing_tasks([(f, 0) for f in findings], 2) == [(0, 0, 2), (0, 1, 2), (1, 0, 1)]
    assert drawing.drawing_tasks([(f, 0) for f in findings], 3) == [(0, 0, 3), (0, 1, 3), (0, 2, 3), (1, 0, 1)]
    # a paper run's costs (csm 3, separators 2, seven of 1): each helper's share is 6, nothing is split
    paper = [(FakeFinding(str(i), cost=c), 0) for i, c in enumerate([1.0, 3.0, 1.0, 2.0] + [1.0] * 5)]
    assert drawing.drawing_tasks(paper, 2) == [(1, 0, 1), (3, 0, 1), (0, 0, 1)] + [(i, 0, 1) for i in (2, 4, 5, 6, 7, 8)]
    alone, _ = _draw(findings, 1)
    helped, used = _draw(findings, 2)
    assert used == 2 and sorted(helped.files) == sorted(alone.files) and len(alone.files) == 6
    for path in alone.files:
        np.testing.assert_array_equal(_pixels(helped.files[path]), _pixels(alone.files[path]), err_msg=path)
    assert sorted(helped.texts) == ["pages/a.html", "pages/b.html"]


@linux_only
def test_a_helper_that_dies_in_a_part_leaves_that_part_to_this_process(two_cpus, monkeypatch):
    """The helper drawing part 1 of finding a (figures 1, 3) dies as it draws figure 3: every file is still logged,
    the same pixels as one process draws, and figure 3 comes from this process."""
    from attnsim.tracking import png

    drawn_here = []
    real = png.figure_pixels

    def dies_at_figure_3(figure, dpi, fixed_layout):
        title = figure.axes[0].get_title()
        if title.startswith("a 3"):
            if os.getpid() != PARENT:
                os._exit(3)
            drawn_here.append(title)
        return real(figure, dpi, fixed_layout)

    findings = [FakeFinding("a", 4, cost=2.0), FakeFinding("b")]
    alone, _ = _draw(findings, 1)
    drawn_here.clear()
    monkeypatch.setattr(png, "figure_pixels", dies_at_figure_3)
    sink, _ = _draw(findings, 2)
    assert sorted(sink.files) == sorted(alone.files) and len(alone.files) == 6
    for path in alone.files:
        np.testing.assert_array_equal(_pixels(sink.files[path]), _pixels(alone.files[path]), err_msg=path)
    assert sorted(sink.texts) == ["pages/a.html", "pages/b.html"]
    assert drawn_here == ["a 3 (ex)"]


@linux_only
def test_pages_are_left_out_without_the_explorer(two_cpus):
    sink, _ = _draw([FakeFinding("a"), FakeFinding("b")], 2, explorer=False)
    assert sink.texts == {} and len(sink.files) == 4


@linux_only
def test_an_error_in_a_helper_is_raised_here(two_cpus):
    def broken():
        raise ValueError("finding b cannot draw its figure: no layers")

    with pytest.raises(ValueError, match="finding b cannot draw its figure: no layers"):
        _draw([FakeFinding("a"), FakeFinding("b", in_helper=broken), FakeFinding("c")], 2)
    assert drawing._JOB is None


@linux_only
def test_a_helper_that_dies_leaves_its_findings_to_this_process(two_cpus, caplog):
    def die():
        os._exit(3)  # e.g. killed by the out-of-memory killer

    with caplog.at_level(logging.WARNING, logger="attnsim.workflows.figures"):
        sink, _ = _draw([FakeFinding("a"), FakeFinding("b", in_helper=die), FakeFinding("c")], 2)
    assert sorted(sink.files) == sorted(f"figures/{name}/figure{i}.png" for name in "abc" for i in range(2))
    assert sorted(sink.texts) == ["pages/a.html", "pages/b.html", "pages/c.html"]
    assert f"pid={PARENT}" in sink.texts["pages/b.html"]  # drawn again here
    assert "A process drawing figures stopped" in caplog.text


def test_usable_processes(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    assert [drawing.usable_processes(n) for n in (1, 2, 3)] == [1, 2, 2]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert drawing.usable_processes(2) == 1  # one CPU: helpers would only take turns with this process
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    for platform in ("darwin", "win32"):
        monkeypatch.setattr(sys, "platform", platform)
        assert drawing.usable_processes(4) == 1


@linux_only
def test_the_logging_runs_here_while_the_helpers_draw(two_cpus):
    """log_figures calls ``meanwhile`` once, in this process, with the helpers already started (the run's
    metrics and tables are logged while they draw); drawing alone, it calls it once before drawing."""
    import multiprocessing

    seen = []

    def meanwhile():
        seen.append((os.getpid(), len(multiprocessing.active_children())))

    findings = [FakeFinding("a"), FakeFinding("b")]
    sink = FakeSink()
    jobs = [(finding, 1.5) for finding in findings]
    cfg = SimpleNamespace(processes=2, dpi=60, explorer=True)
    assert drawing.log_figures(sink, jobs, "ex", cfg, "title", has_fixed_layout, meanwhile=meanwhile) == 2
    assert seen == [(PARENT, 2)] and len(sink.files) == 4
    seen.clear()
    cfg.processes = 1
    assert drawing.log_figures(FakeSink(), jobs, "ex", cfg, "title", has_fixed_layout, meanwhile=meanwhile) == 1
    assert seen == [(PARENT, 0)]


def test_one_finding_or_one_process_draws_here(two_cpus):
    sink, used = _draw([FakeFinding("a")], 2)
    assert used == 1 and f"pid={PARENT}" in sink.texts["pages/a.html"]


def test_the_costliest_findings_are_drawn_first():
    jobs = [(FakeFinding("a"), 0), (FakeFinding("b", cost=3.0), 0), (FakeFinding("c"), 0), (FakeFinding("d", cost=2.0), 0)]
    assert drawing.drawing_order(jobs) == [1, 3, 0, 2]
    from attnsim.findings.csm import CSMFinding
    from attnsim.findings.sentences import SentencesFinding
    from attnsim.findings.separators import SeparatorsFinding

    assert CSMFinding.figure_cost > SeparatorsFinding.figure_cost > SentencesFinding.figure_cost == 1.0


def test_processes_below_one_are_refused():
    from attnsim.config import load_config

    with pytest.raises(ConfigError, match=r"'plots.processes' is 0; give 1"):
        load_config("csm", ["plots.processes=0"])


@linux_only
def test_a_run_logs_the_same_figures_drawn_in_one_process_or_in_helpers(tiny_bert, tmp_path, two_cpus):
    from attnsim.workflows.run import run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    base = [
        f"model.path={tiny_bert}",
        "corpus.limit=4",
        "corpus.seq_len=24",
        "trainer.batch_size=2",
        "trainer.progress_bar=false",
        "plots.examples=1",
        f"tracking.uri={uri}",
    ]
    alone = run("paper", base + ["plots.processes=1"])
    helped = run("paper", base + ["plots.processes=2"])
    client, logged = runs_of(uri)
    assert [r.info.status for r in logged] == ["FINISHED", "FINISHED"]

    def files(run_id, folder=""):
        out = []
        for item in client.list_artifacts(run_id, folder or None):
            out += files(run_id, item.path) if item.is_dir else [(item.path, item.file_size)]
        return out

    drawn_alone = {path for path, _ in files(alone.run_id) if path.startswith("figures/")}
    drawn_helped = {path for path, _ in files(helped.run_id) if path.startswith("figures/")}
    assert drawn_alone == drawn_helped and len(drawn_alone) >= 15


@linux_only
def test_free_heap_pages_are_returned_before_the_fork():
    import ctypes

    libc = ctypes.CDLL(None)
    if not hasattr(libc, "malloc_trim"):
        pytest.skip("not glibc")
    libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]

    def rss_mib() -> float:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024

    blocks = [libc.malloc(16_384) for _ in range(8_000)]  # 125 MiB in heap chunks (below the mmap threshold)
    for block in blocks:
        ctypes.memset(block, 1, 16_384)  # resident
    keep = libc.malloc(16_384)  # holds the top of the heap, so free() alone cannot shrink it
    for block in blocks:
        libc.free(block)
    before = rss_mib()
    drawing.release_free_memory()
    after = rss_mib()
    libc.free(keep)
    assert before - after > 60, (before, after)  # the freed pages left the process


class NoiseFinding(FakeFinding):
    """One large figure of noise: its PNG (~1 MB) is more than a pipe holds, so a helper sending it blocks
    until the run's process reads it."""

    def figures(self, summary, examples, plots_cfg):
        if self.in_helper is not None and os.getpid() != PARENT:
            self.in_helper()
        fig, ax = inch_axes(12.0, 12.0, left=0.1, right=0.1, bottom=0.1, top=0.1)
        ax.imshow(np.random.default_rng(0).random((600, 600)), interpolation="nearest")
        yield f"figures/{self.name}/noise.png", fig


@linux_only
def test_a_dead_helper_does_not_leave_the_run_waiting_for_the_other(two_cpus):
    """With a SIGTERM handler of the run's own inherited by the fork and a figure larger than a pipe holds in
    the other helper, every file is still logged (the command-line case, which used to hang, is
    test_attnsim_run_finishes_when_a_figure_helper_is_killed)."""
    import signal
    import threading

    def die():
        time.sleep(0.5)  # the other helper is drawing its large figure
        os._exit(3)

    previous = signal.signal(signal.SIGTERM, lambda *args: None)
    try:
        done = {}
        worker = threading.Thread(target=lambda: done.update(result=_draw([NoiseFinding("big"), FakeFinding("b", in_helper=die)], 2)), daemon=True)
        worker.start()
        worker.join(120)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not worker.is_alive(), "log_figures still waiting two minutes after a helper died"
    sink, _ = done["result"]
    assert sorted(sink.files) == ["figures/b/figure0.png", "figures/b/figure1.png", "figures/big/noise.png"]
    assert len(sink.files["figures/big/noise.png"]) > 100_000


HELPERS_OF_A_KILLED_RUN = r"""
import os, sys, time
from types import SimpleNamespace
os.sched_getaffinity = lambda pid: {0, 1}
from attnsim.plots.common import has_fixed_layout
from attnsim.workflows import figures as drawing


class Slow:
    figure_cost = 1.0

    def figures(self, summary, examples, plots_cfg):
        open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
        time.sleep(300)
        return iter(())


drawing.log_figures(None, [(Slow(), 0), (Slow(), 1)], None, SimpleNamespace(processes=2, dpi=50, explorer=False), "t", has_fixed_layout)
"""


@linux_only
def test_helpers_die_with_the_run_process(tmp_path):
    import signal
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.Popen([sys.executable, "-c", HELPERS_OF_A_KILLED_RUN, str(tmp_path)], env=env)
    try:
        deadline = time.monotonic() + 90
        while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.1)
        helpers = [int(p.name) for p in tmp_path.iterdir()]
        assert len(helpers) == 2, f"the helpers did not start (exit {run.poll()})"
    finally:
        run.send_signal(signal.SIGKILL)  # e.g. the out-of-memory killer
        run.wait(30)

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/status") as status:
                return next(line.split()[1] for line in status if line.startswith("State:")) != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 20
    while any(alive(pid) for pid in helpers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in helpers if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"helpers {left} outlived the run's process"


def _children(pid: int) -> list:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


@linux_only
def test_attnsim_run_finishes_when_a_figure_helper_is_killed(tmp_path):
    """`attnsim run` on the bundled model: one helper SIGKILLed while the figures are drawn; the run
    draws the rest itself and ends FINISHED instead of waiting for the other helper for ever."""
    import signal
    import subprocess

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    argv = [sys.executable, "-m", "attnsim.cli", "run", "paper", "corpus.limit=8", "trainer.batch_size=8", "trainer.progress_bar=false", "--uri", uri]
    run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while len(_children(run.pid)) < 2 and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        helpers = _children(run.pid)
        assert len(helpers) >= 2, f"no figure helpers seen (exit {run.poll()})"
        time.sleep(0.3)
        os.kill(helpers[0], signal.SIGKILL)
        out, err = run.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        for pid in _children(run.pid):
            os.kill(pid, signal.SIGKILL)
        run.kill()
        run.communicate()
        pytest.fail("attnsim run still waiting two minutes after a figure helper was killed")
    assert run.returncode == 0, err[-3000:]
    assert "A process drawing figures stopped" in err
    client, (logged,) = runs_of(uri)
    assert logged.info.status == "FINISHED"
    figures = {a.path for folder in ("figures/csm", "figures/separators", "figures/noise") for a in client.list_artifacts(logged.info.run_id, folder)}
    assert {"figures/csm/heads.png", "figures/separators/heads.png", "figures/noise/heads.png"} <= figures


def test_a_deep_model_run_draws_the_shown_layers_and_tables_keep_every_layer(tmp_path, monkeypatch):
    """An 8-layer model: the per-layer figures draw the first, middle and last layer and the extreme layers of
    their statistic (plots.common.shown_layers), recomputed here from the logged per-head tables."""
    import pandas as pd

    from attnsim.plots import csm as csm_plots
    from attnsim.plots import regions as region_plots
    from attnsim.workflows.run import run
    from tests.helpers.models import save_tiny_model

    drawn = {}

    def recording(module, key, rows):
        original = module.matrix_grid

        def grid(matrices, titles, *args, **kwargs):
            drawn.setdefault(key, []).append(rows(titles, kwargs))
            return original(matrices, titles, *args, **kwargs)

        monkeypatch.setattr(module, "matrix_grid", grid)

    recording(csm_plots, "csm", lambda titles, kwargs: [int(name[1:]) for name in kwargs["row_names"]])
    recording(region_plots, "regions", lambda titles, kwargs: [int(title.split()[0][1:]) for title in titles])
    model = save_tiny_model(tmp_path / "bert8", "bert", layers=8, heads=2, hidden=16)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = [f"model.path={model}", "corpus.limit=4", "corpus.seq_len=24", "trainer.batch_size=4", "trainer.progress_bar=false"]
    result = run(
        "csm", overrides + ["findings=[csm,attention_regions]", "plots.examples=1", "plots.processes=1", "plots.explorer=false", f"tracking.uri={uri}"]
    )
    client, _ = runs_of(uri)

    def layer_means(table: str, column: str) -> pd.Series:
        heads = pd.read_csv(client.download_artifacts(result.run_id, f"tables/{table}"))
        assert sorted(heads["layer"].unique()) == list(range(8))  # every layer in the tables
        return heads.groupby("layer")[column].mean()

    def expected(means: pd.Series) -> list:
        return sorted({0, 4, 7, int(means.idxmax()), int(means.idxmin())})

    csm_layers = expected(layer_means("csm_heads.csv", "mean"))
    assert 3 <= len(csm_layers) <= 5
    assert drawn["csm"] == [csm_layers, csm_layers]  # the corpus-mean CSMs, then window 0's
    assert drawn["regions"] == [expected(layer_means("attention_regions_heads.csv", "jaccard"))]
    figures = {item.path for item in client.list_artifacts(result.run_id, "figures/csm")}
    assert {"figures/csm/mean_csm.png", "figures/csm/distance_profiles.png", "figures/csm/heads.png"} <= figures
