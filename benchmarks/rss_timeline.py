"""Where the peak resident memory of one ``attnsim run`` comes from: RSS sampled every few milliseconds, tagged with the stage.

Runs ``attnsim run EXPERIMENT [overrides]`` in this process, started as the command line starts it
(:func:`~attnsim.workflows.startup.process_settings`, :func:`~attnsim.workflows.startup.import_libraries`),
with a thread that reads this process's resident memory (``/proc/self/statm``) and that of its child
processes (the figure helpers, ``/proc/self/task/*/children``) every ``--every`` milliseconds. Each sample is
tagged with what the main thread is doing: imports, prepare, load, open run, and per batch the forward pass
(``forward``), the view (``view``), each finding's update (``update:NAME``), after the release (``between``);
then summarise, figures and logging (``log``).

Prints the peak of each stage (the highest sample and the batch it came in), the process's own high-water mark
(``VmHWM``), the children's highest (``VmHWM`` of each, read while they live) and ``ru_maxrss`` of this process
and of its waited-for children (what ``os.wait4`` hands a parent such as ``end_to_end.py``: the larger of the two).

Usage:
    python benchmarks/rss_timeline.py paper corpus.limit=512 trainer.batch_size=32 trainer.threads=2 trainer.progress_bar=false
    python benchmarks/rss_timeline.py csm corpus.limit=128 --every 5 --csv /tmp/rss.csv
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import sys
import threading
import time

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MIB = 2**20

_stage = ["start"]


def rss_mib(pid: str = "self") -> float:
    """Resident memory of a process in MiB (``/proc/PID/statm``), 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE / MIB
    except (OSError, IndexError, ValueError):
        return 0.0


def anon_file_mib() -> tuple:
    """This process's anonymous and file-backed resident memory in MiB (``RssAnon``, ``RssFile`` + ``RssShmem``)."""
    anon = file = 0.0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) / 1024
                elif line.startswith(("RssFile:", "RssShmem:")):
                    file += int(line.split()[1]) / 1024
    except OSError:
        pass
    return anon, file


def hwm_mib(pid: str = "self") -> float:
    """A process's high-water mark of resident memory in MiB (``VmHWM``), 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children() -> list:
    """Process ids of this process's children (of any of its threads)."""
    found = []
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/children") as f:
                    found += f.read().split()
            except OSError:
                pass
    except OSError:
        pass
    return found


class Sampler(threading.Thread):
    """Samples (seconds, stage, own RSS MiB, children's RSS MiB, own anonymous and file-backed MiB) every ``every`` seconds until stopped."""

    def __init__(self, every: float):
        super().__init__(daemon=True)
        self.every, self.samples, self.child_hwm, self.stopped = every, [], {}, threading.Event()
        self.start_time = time.perf_counter()

    def run(self) -> None:
        while not self.stopped.is_set():
            kids = children()
            child = 0.0
            for pid in kids:
                child += rss_mib(pid)
                self.child_hwm[pid] = max(self.child_hwm.get(pid, 0.0), hwm_mib(pid))
            anon, file = anon_file_mib()
            self.samples.append((time.perf_counter() - self.start_time, _stage[0], anon + file, child, anon, file))
            time.sleep(self.every)


def tag(stage: str, fn):
    """``fn`` with the sampler's stage set to ``stage`` while it runs (restored after)."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        before, _stage[0] = _stage[0], stage
        try:
            return fn(*args, **kwargs)
        finally:
            _stage[0] = before

    return wrapped


def instrument() -> None:
    """Tag the stages of :func:`attnsim.workflows.run.execute` and of each batch."""
    from attnsim.capture import module
    from attnsim.findings import base
    from attnsim.workflows import figures, run

    run.prepare = tag("prepare", run.prepare)
    run.build_module = tag("load_model", run.build_module)
    run.log_results = tag("summarise", run.log_results)
    figures.log_figures = tag("figures+log", figures.log_figures)
    run.log_figures = figures.log_figures

    batch = [0]
    forward, predict_step = module.CaptureModule.forward, module.CaptureModule.predict_step

    def forward_tagged(self, b, stream=None):
        _stage[0] = f"b{batch[0]}:forward"  # the streamed path's attention walk runs inside it
        return forward(self, b, stream)

    def predict_tagged(self, b, batch_idx, dataloader_idx=0):
        batch[0] = batch_idx
        out = predict_step(self, b, batch_idx, dataloader_idx)
        _stage[0] = f"b{batch_idx}:view"
        return out

    module.CaptureModule.forward, module.CaptureModule.predict_step = forward_tagged, predict_tagged
    update = base.Finding.update

    def update_tagged(self, view):
        _stage[0] = f"b{batch[0]}:update:{self.name}"
        return update(self, view)

    base.Finding.update = update_tagged
    release = module.release_view

    def release_tagged(outputs):
        release(outputs)
        _stage[0] = f"b{batch[0]}:between"

    module.release_view = release_tagged
    original = run.predict_loop

    def predict(*args, **kwargs):
        _stage[0] = "predict"
        try:
            return original(*args, **kwargs)
        finally:
            _stage[0] = "after predict"

    run.predict_loop = predict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--every", type=float, default=10.0, help="milliseconds between samples (default 10)")
    parser.add_argument("--csv", default=None, help="write every sample (seconds, stage, own MiB, children MiB, anonymous MiB, file-backed MiB) to this file")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sampler = Sampler(args.every / 1000)
    sampler.start()
    _stage[0] = "imports"
    from attnsim.workflows.startup import freeze_at_exit, import_libraries, process_settings

    settings = process_settings()
    import_libraries()
    freeze_at_exit()
    instrument()
    from attnsim.workflows.run import run

    _stage[0] = "config"
    result = run(args.experiment, args.overrides)
    _stage[0] = "end"
    time.sleep(0.05)
    sampler.stopped.set()
    sampler.join()
    own_hwm = hwm_mib()
    self_max = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids_max = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"{settings}; run {result.run_id}, {result.windows} windows; load average {os.getloadavg()[0]:.2f}")
    by_stage: dict = {}
    for t, stage, own, child, anon, file in sampler.samples:
        key = stage.split(":", 1)[1] if stage.startswith("b") and ":" in stage else stage
        best = by_stage.get(key)
        if best is None or own > best[1]:
            by_stage[key] = (t, own, stage, child, anon, file)
    print("| stage | peak own RSS MiB | anonymous | file-backed | at s | where | children MiB then |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for key, (t, own, stage, child, anon, file) in sorted(by_stage.items(), key=lambda kv: kv[1][0]):
        print(f"| {key} | {own:,.0f} | {anon:,.0f} | {file:,.0f} | {t:.2f} | {stage} | {child:,.0f} |")
    print(
        f"own VmHWM {own_hwm:,.0f} MiB; ru_maxrss self {self_max:,.0f} MiB, children {kids_max:,.0f} MiB "
        f"(helpers' VmHWM while alive: {', '.join(f'{v:,.0f}' for v in sampler.child_hwm.values()) or 'none'}); "
        f"what wait4 hands the parent: {max(self_max, kids_max):,.0f} MiB"
    )
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("seconds,stage,own_mib,children_mib,anon_mib,file_mib\n")
            for t, stage, own, child, anon, file in sampler.samples:
                f.write(f"{t:.3f},{stage},{own:.1f},{child:.1f},{anon:.1f},{file:.1f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
