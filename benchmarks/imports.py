"""What `attnsim run`'s libraries cost before any window is measured: import seconds and resident memory.

The targets: imports before the model loads under 3 s (a command that starts measuring within seconds), and a whole
run's peak RSS at most 1.5 times that of a plain script running the same model (capture and statistics add at most
half the model's own footprint) (`benchmarks/plain_forward.py`, which
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
3 s target, and the memory the libraries add against the 1.5x allowance.

Last, the commands that read runs, from the command line as a user types them (targets: they import
no torch and no Lightning, and a report of two runs takes under 3 s, as reading runs loads no model): two ``csm`` runs of the bundled
model (``--cli-windows`` windows each, untimed) are logged to a temporary store, then ``attnsim report``
of both (writing its files and logging them to the runs), ``attnsim compare`` of both (logging the
comparison run and its figures), ``attnsim list`` and ``attnsim show csm`` run ``--repeats`` times each,
alternating; prints each command's median wall time, its range and whether it imported torch or
Lightning (read in the same process at its exit). With ``--baseline CHECKOUT`` each of those commands
also runs from that checkout (its attnsim first on ``PYTHONPATH``), right after this one's, on the
same runs, and a second table gives both medians and the median and range of the per-round ratios
(this checkout / baseline), which a busy machine disturbs less than the seconds. Exits 0 either way.

Usage:
    python benchmarks/imports.py                 # 5 processes per step, one plain script, the commands (~4 min)
    python benchmarks/imports.py --repeats 3 --windows 64
    python benchmarks/imports.py --cli-only      # only the commands that read runs (--no-cli: all but them)
    python benchmarks/imports.py --cli-only --baseline ../main   # and each command from another checkout, alternating: ratios
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

from _options import load_average, positive  # benchmarks/, the script's folder

HERE = os.path.dirname(os.path.abspath(__file__))
IMPORT_TARGET = 3.0  # seconds: imports before the model loads
RSS_TARGET = 1.5  # a run's peak RSS at most this many times the plain script's
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


READ_TARGET = 3.0  # seconds: `attnsim report` of two runs from the command line
HEAVY = ("torch", "pytorch_lightning", "lightning", "lightning_fabric")
# the command line, as `attnsim` runs it, that says at its exit which of HEAVY it imported (stderr's last line)
COMMAND = (
    "import atexit, sys\n"
    f"atexit.register(lambda: print('heavy:', ','.join(m for m in {HEAVY!r} if m in sys.modules) or 'none', file=sys.stderr))\n"
    "from attnsim.cli import main\nsys.exit(main(sys.argv[1:]))"
)


def attnsim(arguments: List[str], env: Dict[str, str], cwd: str) -> Tuple[float, str, str]:
    """(wall seconds, stdout, heavy modules imported) of ``attnsim ARGUMENTS`` in a fresh process."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", COMMAND, *arguments], capture_output=True, text=True, env=env, cwd=cwd)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"attnsim {' '.join(arguments)} failed:\n{out.stderr[-3000:]}")
    return seconds, out.stdout, out.stderr.strip().splitlines()[-1].split("heavy: ", 1)[-1]


def reading_commands(args, env: Dict[str, str]) -> None:
    """Time report, compare, list and show from the command line (module docstring) and print their table."""
    with tempfile.TemporaryDirectory() as folder:
        uri = f"sqlite:///{folder}/mlflow.db"
        overrides = [f"corpus.limit={args.cli_windows}", "trainer.progress_bar=false", "plots.examples=1", "--uri", uri]
        ids = []
        for _ in range(2):
            _, out, _ = attnsim(["run", "csm", *overrides], env, folder)
            ids.append(next(line.split()[2] for line in out.splitlines() if line.startswith("run id: ")))
        commands = {
            "attnsim report RUN RUN": ["report", *ids, "--uri", uri, "--out", os.path.join(folder, "report.md")],
            "attnsim compare RUN RUN": ["compare", *ids, "--uri", uri, "--csv", os.path.join(folder, "comparison.csv")],
            "attnsim list": ["list"],
            "attnsim show csm": ["show", "csm"],
        }
        seconds: Dict[str, List[float]] = {name: [] for name in commands}
        heavy: Dict[str, set] = {name: set() for name in commands}
        before: Dict[str, List[float]] = {name: [] for name in commands}  # --baseline: the same command from the other checkout
        baseline_env = dict(env, PYTHONPATH=os.path.abspath(args.baseline)) if args.baseline else None
        for repeat in range(args.repeats):
            for name in commands if repeat % 2 == 0 else list(commands)[::-1]:
                wall, _, imported = attnsim(commands[name], env, folder)
                seconds[name].append(wall)
                heavy[name].add(imported)
                if baseline_env is not None:
                    before[name].append(attnsim(commands[name], baseline_env, folder)[0])
    load = load_average()
    print(f"\ncommands that read runs ({args.repeats} processes each, two csm runs of {args.cli_windows} windows); load average {load:.2f}")
    print("\n| command | wall s (median) | range | torch or Lightning imported |")
    print("| --- | --- | --- | --- |")
    for name, values in seconds.items():
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f}-{max(values):.2f} | {', '.join(sorted(heavy[name]))} |")
    if baseline_env is not None:
        print(f"\nagainst {args.baseline} (each of its processes right after this checkout's; ratio: median and range of the rounds' ratios)")
        print("\n| command | this checkout s | baseline s | ratio |")
        print("| --- | --- | --- | --- |")
        for name, values in seconds.items():
            ratios = [a / b for a, b in zip(values, before[name])]
            print(
                f"| {name} | {statistics.median(values):.2f} | {statistics.median(before[name]):.2f} | "
                f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |"
            )
    report = statistics.median(seconds["attnsim report RUN RUN"])
    print(f"\nreport of two runs: {report:.2f} s; target < {READ_TARGET:.0f} s -> {'PASS' if report < READ_TARGET else 'FAIL'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=positive, default=5, help="processes per step and per command; medians are reported (default 5)")
    parser.add_argument("--windows", type=positive, default=512, help="BBC windows of the plain script's run (default 512)")
    parser.add_argument("--cli-windows", type=positive, default=16, help="BBC windows of each run the reading commands read (default 16)")
    parser.add_argument("--cli-only", action="store_true", help="only the commands that read runs")
    parser.add_argument("--no-cli", action="store_true", help="leave out the commands that read runs")
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="CHECKOUT",
        help="also run each reading command from this checkout (PYTHONPATH), right after this one's, and print the ratios",
    )
    args = parser.parse_args(argv)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="2", TOKENIZERS_PARALLELISM="false")
    load = load_average()
    print(f"python {sys.version.split()[0]}, {args.repeats} processes per step; load average {load:.2f} at start", flush=True)
    if args.cli_only:
        reading_commands(args, env)
        return 0
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
    if not args.no_cli:
        reading_commands(args, env)
    load = load_average()
    print(f"load average {load:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
