"""A lean start: the heavy imports run with the garbage collector paused and are frozen after,
the exit skips the final collections, and `attnsim run` logs every stage's seconds so none is unattributed."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading

import pytest

from attnsim.errors import ConfigError
from attnsim.keys import Stage
from attnsim.workflows.startup import OPENMP_SPIN, collector_paused, import_libraries
from tests.helpers.paths import ROOT


@pytest.fixture
def collections():
    """Generations of the garbage collections that start in this test's thread while it runs (a thread another
    test left behind, e.g. a server's, may call gc.collect() itself; that is no automatic collection of this import)."""
    seen = []
    mine = threading.get_ident()

    def callback(phase, info):
        if phase == "start" and threading.get_ident() == mine:
            seen.append(info["generation"])

    gc.callbacks.append(callback)
    yield seen
    gc.callbacks.remove(callback)


def test_collector_paused_restores_its_state_and_freezes_what_is_alive():
    frozen = gc.get_freeze_count()
    kept = [[i] for i in range(1000)]
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(kept)
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a collector that was off stays off
    finally:
        gc.enable()
        gc.unfreeze()  # give the test process's objects back to the collector


def test_a_module_making_many_cycles_imports_without_a_collection(tmp_path, monkeypatch, collections):
    # 50,000 self-referencing lists would start about 70 young-generation collections (threshold 700)
    (tmp_path / "cyclic_module_i18.py").write_text("CYCLES = []\nfor _ in range(50_000):\n    item = []\n    item.append(item)\n    CYCLES.append(item)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        collections.clear()  # only what starts during the import counts (writing the module may start one, with the collector on)
        seconds = import_libraries(["cyclic_module_i18"])
        assert collections == [] and seconds > 0 and "cyclic_module_i18" in sys.modules
        frozen = gc.get_freeze_count()
        import_libraries(["cyclic_module_i18"])  # imported already: nothing more is frozen
        assert gc.get_freeze_count() <= frozen  # (a frozen object that another thread frees meanwhile lowers the count)
    finally:
        sys.modules.pop("cyclic_module_i18", None)
        gc.unfreeze()


def test_only_a_command_line_process_freezes_after_predict(monkeypatch):
    from attnsim.workflows import startup

    kept = [[i] for i in range(1000)]
    frozen = gc.get_freeze_count()
    monkeypatch.setattr(startup, "_exit_hook", False)  # attnsim.run in a user's process
    startup.freeze_if_exiting_soon()
    assert gc.get_freeze_count() == frozen
    monkeypatch.setattr(startup, "_exit_hook", True)  # `attnsim run`: freeze_at_exit() was called
    try:
        startup.freeze_if_exiting_soon()
        assert gc.get_freeze_count() >= frozen + len(kept)
    finally:
        gc.unfreeze()


def test_attnsim_run_logs_every_stage_and_exits_frozen(tiny_bert, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = (
        "import gc, json, sys\nfrom attnsim.cli import main\n"
        f"rc = main(['run', 'csm', 'model.path={tiny_bert}', 'corpus.limit=2', 'corpus.seq_len=24', 'trainer.batch_size=2', "
        f"'trainer.progress_bar=false', 'tracking.figures=false', '--uri', '{uri}'])\n"
        "import os\n"
        "print(json.dumps({'rc': rc, 'frozen': gc.get_freeze_count(), 'enabled': gc.isenabled(), 'spin': os.environ.get('GOMP_SPINCOUNT')}))"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), HF_HUB_OFFLINE="1")
    env.pop("GOMP_SPINCOUNT", None)
    env.pop("OMP_WAIT_POLICY", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads(proc.stdout.splitlines()[-1])
    assert state["rc"] == 0 and state["enabled"] and state["frozen"] > 100_000  # torch, Lightning, MLflow and transformers' objects
    assert state["spin"] == OPENMP_SPIN  # set before torch was imported (short_openmp_spin refuses after)
    from tests.helpers.runs import runs_of

    _, (logged,) = runs_of(uri)
    times = {key.rpartition("/time_")[2]: value for key, value in logged.data.metrics.items() if "/time_" in key}
    assert set(times) == set(Stage) - {Stage.REDUCE}  # the command line times its imports too
    stages = sum(value for name, value in times.items() if name not in (Stage.TOTAL, Stage.UNATTRIBUTED))
    assert times[Stage.TOTAL] == pytest.approx(stages + times[Stage.UNATTRIBUTED])
    assert times[Stage.IMPORTS] > 0 and times[Stage.UNATTRIBUTED] < 0.5 * times[Stage.TOTAL]


FAULTS = r"""
import ctypes, json, resource, sys
from attnsim.workflows.startup import keep_freed_memory
tuned = keep_freed_memory() if sys.argv[1] == "tuned" else False
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
SIZE = 72 * 128 * 128 * 4  # a window's float32 CSM at T = 128: 4.5 MiB


def batch():  # 8 windows' products alive together, written, then freed
    blocks = [libc.malloc(SIZE) for _ in range(8)]
    for block in blocks:
        ctypes.memset(block, 1, SIZE)
    for block in blocks:
        libc.free(block)


batch()  # first use: these pages are faulted in either way
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    batch()
print(json.dumps({"tuned": tuned, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_tensors_are_reused_without_page_faults():
    def faults(mode: str) -> dict:
        env = dict(os.environ, PYTHONPATH=str(ROOT), ATTNSIM_MALLOC="")
        out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.splitlines()[-1])

    plain, tuned = faults("plain"), faults("tuned")
    if not tuned["tuned"]:
        pytest.skip("not glibc")
    # glibc's defaults give the freed 36 MiB back each time: 160 outputs of 1,152 pages faulted in again;
    # kept for reuse, almost none
    assert plain["faults"] > 80 * 1152 and tuned["faults"] < 8 * 1152, (plain, tuned)


def test_the_allocator_is_left_alone_when_asked(monkeypatch):
    from attnsim.workflows.startup import keep_freed_memory

    monkeypatch.setenv("ATTNSIM_MALLOC", "default")
    assert keep_freed_memory() is False
    monkeypatch.setenv("ATTNSIM_MALLOC", "off")  # e.g. by analogy with ATTNSIM_COMPILED: refused, not ignored
    with pytest.raises(ConfigError, match="ATTNSIM_MALLOC is 'off'; give 'reuse' .* or 'default'"):
        keep_freed_memory()
    monkeypatch.setenv("ATTNSIM_MALLOC", "Reuse")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert keep_freed_memory() is False


def test_openmp_spin_is_shortened_only_before_torch_and_never_over_the_users_choice(monkeypatch):
    from attnsim.workflows.startup import short_openmp_spin

    monkeypatch.setenv("GOMP_SPINCOUNT", "")  # recorded, so that the test leaves the environment as it found it
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert short_openmp_spin() is False and "GOMP_SPINCOUNT" not in os.environ  # torch is loaded here: too late
    monkeypatch.delitem(sys.modules, "torch")  # as in the command line's process before its imports
    assert short_openmp_spin() is True and os.environ["GOMP_SPINCOUNT"] == OPENMP_SPIN == "10000"
    monkeypatch.setenv("GOMP_SPINCOUNT", "300000")  # the user's choice (here libgomp's default) is kept
    assert short_openmp_spin() is False and os.environ["GOMP_SPINCOUNT"] == "300000"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # a wait policy chooses libgomp's spin counts: left to it
    assert short_openmp_spin() is False and "GOMP_SPINCOUNT" not in os.environ
