"""What `attnsim run`'s libraries cost before any window is measured: import seconds and resident memory.

Issue 18 asks for imports before the model loads under 3 s, and for a whole run's peak RSS at most
1.5 times that of a plain script running the same model (`benchmarks/plain_forward.py`, which
imports only torch and transformers). This script measures how much of both the libraries alone
take, so that a miss can be told apart from attnsim's own cost.

Each step below is measured in fresh processes that import every library of the steps up to it
(in this order, with the garbage collector paused as `attnsim run` does) and then report the
import seconds and their resident memory (VmRSS); each step's cost is the difference of the
medians of ``--repeats`` processes:

1. the interpreter alone;
2. torch; 3. transformers (the plain script imports these two);
4. ``torch._dynamo`` and 5. torchmetrics (which imports SciPy's signal package): Lightning imports
   both whether or not they are used;
6. the rest of ``pytorch_lightning``; 7. MLflow with its SQL tracking store;
8. the rest of ``attnsim.workflows.run`` (pandas, OmegaConf, attnsim itself);
9. numba and the compiled top-k kernel loaded from numba's cache, as the first batch does (not
   before the model loads).

Then the plain script runs once (``--windows`` BBC windows, batch 32, 2 threads) for its peak RSS
(``ru_maxrss`` from ``os.wait4``). Prints the table, the imports before the model loads against the
3 s target, and the memory the libraries add against the 1.5x allowance; exits 0 either way.

Usage:
    python benchmarks/imports.py                 # 5 processes per step and one plain script (~2 min)
    python benchmarks/imports.py --repeats 3 --windows 64
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Dict, List, Tuple

from _options import positive  # benchmarks/, the script's folder

HERE = os.path.dirname(os.path.abspath(__file__))
IMPORT_TARGET = 3.0  # seconds: imports before the model loads (issue 18)
RSS_TARGET = 1.5  # a run's peak RSS at most this many times the plain script's (issue 18)
KERNEL = "attnsim.stats.pairs.kernels"

# (label, modules added); the first 8 are what `attnsim run` imports before its model loads
STEPS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("interpreter", ()),
    ("torch", ("torch",)),
    ("transformers", ("transformers",)),
    ("torch._dynamo (Lightning imports it)", ("torch._dynamo",)),
    ("torchmetrics, with SciPy's signal (Lightning imports it)", ("torchmetrics",)),
    ("the rest of pytorch_lightning", ("pytorch_lightning",)),
    ("mlflow and its SQL tracking store", ("mlflow", "mlflow.store.tracking.sqlalchemy_store")),
    ("the rest of attnsim.workflows.run", ("attnsim.workflows.run",)),
    ("numba and the compiled kernel (first batch)", ("numba", KERNEL)),
)
BEFORE_MODEL = 8  # steps 1..8
PLAIN_LIBRARIES = 3  # steps 1..3: what the plain script imports

CHILD = r"""
import gc, importlib, json, sys, time
modules = json.loads(sys.argv[1])
gc.disable()
start = time.perf_counter()
for name in modules:
    importlib.import_module(name)
if "attnsim.stats.pairs.kernels" in modules:  # load the kernel as the first batch does (numba's cache)
    import torch
    from attnsim.stats.pairs import kernels
    if not kernels.compiled_available():
        raise SystemExit("the compiled kernel is not available here (numba missing or disabled)")
    kernels.compiled_top(torch.rand(4, 1024), 16)
seconds = time.perf_counter() - start
gc.enable()
with open("/proc/self/status") as status:
    rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024
print(json.dumps({"seconds": seconds, "rss_mib": rss}))
"""


def measure(modules: List[str], env: Dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(modules)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"importing {modules} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def plain_peak(windows: int, env: Dict[str, str]) -> float:
    """Peak RSS (MiB) of the plain script over ``windows`` windows (batch 32, 2 threads)."""
    from end_to_end import timed  # benchmarks/, the script's folder

    argv = [sys.executable, os.path.join(HERE, "plain_forward.py"), "--windows", str(windows), "--batch-size", "32", "--threads", "2"]
    return timed(argv, env)["peak_mib"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=positive, default=5, help="processes per step; medians are reported (default 5)")
    parser.add_argument("--windows", type=positive, default=512, help="BBC windows of the plain script's run (default 512)")
    args = parser.parse_args(argv)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="2")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"python {sys.version.split()[0]}, {args.repeats} processes per step; load average {load:.2f} at start", flush=True)
    modules: List[str] = []
    rows = []
    for label, added in STEPS:
        modules += added
        runs = [measure(modules, env) for _ in range(args.repeats)]
        rows.append((label, statistics.median(r["seconds"] for r in runs), statistics.median(r["rss_mib"] for r in runs)))
        print(f"  {label}: {rows[-1][1]:.2f} s, {rows[-1][2]:.0f} MiB (cumulative)", flush=True)
    plain = plain_peak(args.windows, env)

    # each step's own cost: the difference of its cumulative medians from the previous step's
    seconds = [s - p for (_, s, _), (_, p, _) in zip(rows, [("", 0.0, 0.0)] + rows[:-1])]
    mib = [r - p for (_, _, r), (_, _, p) in zip(rows, [("", 0.0, 0.0)] + rows[:-1])]
    print("\n| step | import s added | cumulative s | RSS MiB added | cumulative MiB |")
    print("| --- | --- | --- | --- | --- |")
    for (label, total_s, total_mib), step_s, step_mib in zip(rows, seconds, mib):
        print(f"| {label} | {step_s:.2f} | {total_s:.2f} | {step_mib:.0f} | {total_mib:.0f} |")
    before = rows[BEFORE_MODEL - 1][1]
    lightning = sum(seconds[3:6])
    print(
        f"\nimports before the model loads (steps 1-{BEFORE_MODEL}): {before:.2f} s; target < {IMPORT_TARGET:.0f} s -> {'PASS' if before < IMPORT_TARGET else 'FAIL'}"
    )
    print(
        f"  of which Lightning (steps 4-6) {lightning:.2f} s: torch._dynamo {seconds[3]:.2f} s and torchmetrics {seconds[4]:.2f} s, imported whether or not they are used"
    )
    floor = rows[PLAIN_LIBRARIES - 1][1] + lightning + seconds[6]
    print(f"  torch, transformers, Lightning and MLflow alone: {floor:.2f} s")
    added = sum(mib[3:7]) + mib[8]
    allowance = (RSS_TARGET - 1.0) * plain
    print(
        f"\nplain script ({args.windows} windows): peak RSS {plain:.0f} MiB; a run may use {RSS_TARGET}x = {RSS_TARGET * plain:.0f} MiB, {allowance:.0f} MiB more"
    )
    print(
        f"  Lightning ({sum(mib[3:6]):.0f} MiB), MLflow ({mib[6]:.0f} MiB) and numba with the kernel "
        f"({mib[8]:.0f} MiB) add {added:.0f} MiB resident before any window: "
        + (
            "more than the allowance, so the target is out of reach while the run's process imports them"
            if added > allowance
            else f"{allowance - added:.0f} MiB of the allowance left for the run itself"
        )
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
