"""Whole processes: `attnsim run EXPERIMENT` against a plain script running the same model's forward pass.

For each experiment (default ``csm`` and ``paper``) it starts, ``--pairs`` times, the command
``attnsim run EXPERIMENT corpus.limit=N`` (the installed command line, as a user runs it) and the
plain script ``benchmarks/plain_forward.py`` (the bundled model with SDPA over N BBC windows, no
capture, nothing logged), alternating which goes first. Both use ``--batch-size`` and
``--threads``. Each is a fresh process; its wall time, CPU time (user + system) and peak resident
memory (``ru_maxrss`` of exactly that child, from ``os.wait4``) are taken. This script imports no
heavy library, so the children's peaks are their own (Linux counts a child's memory at fork).

The attnsim runs log to one temporary SQLite store, created (MLflow's schema) before anything is
timed, as a user's existing ``mlruns/`` is. Each run's own stage timings (``zz_run/time_*``,
README "Performance") are read back and printed as medians, with what no stage holds: interpreter
start-up before the command's first line, ending the run and the process's exit (wall time less
``time_total``).

Prints the table (command | wall | plain script | ratio | peak RSS vs plain), the
stage table, and a PASS/FAIL line per target; exits 0 even when a target fails.

Usage:
    python benchmarks/end_to_end.py                         # csm and paper, 512 windows, 3 pairs (~6 min here)
    python benchmarks/end_to_end.py --pairs 1 --windows 64  # a quick look
    python benchmarks/end_to_end.py --floor                 # also the plain script with attnsim's libraries imported (the memory floor)
    python benchmarks/end_to_end.py --device cuda
    python benchmarks/end_to_end.py --model smollm2 --windows 64 --batch-size 16 --experiments paper
    python benchmarks/end_to_end.py --model smollm2 --seq-len 512 --windows 8 --batch-size 4 --pairs 1
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
from typing import Dict, List

from _options import (  # benchmarks/, the script's folder
    accelerator_override,
    add_model_options,
    device_name,
    load_average,
    model_overrides,
    positive,
    statistics_path,
)

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIN = os.path.join(HERE, "plain_forward.py")
TARGETS = {"csm": 0.80, "paper": 0.78}  # attnsim's speed as a share of the plain script's (plain wall / attnsim wall), MiniLM
RSS_TARGETS = {"csm": 1.5, "paper": 1.8}  # attnsim's peak RSS at most this many times the plain script's, MiniLM
STAGES = ("imports", "config", "windows", "tracker", "setup", "load_model", "open_run", "predict", "reduce", "summarise", "log", "figures", "unattributed")


def timed(argv: List[str], env: Dict[str, str]) -> dict:
    """Run ``argv`` to its end: wall seconds, CPU seconds (user + system), peak RSS in MiB, stdout; exit on failure.

    The child writes to temporary files and is reaped with ``os.wait4``, which returns the resource
    usage of exactly that child (``Popen.wait`` would reap it and lose it).
    """
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)  # reaped here; Popen must not wait again
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} failed (exit {code}):\n{stderr[-4000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "peak_mib": usage.ru_maxrss / 1024, "stdout": stdout}


def run_metrics(uri: str, run_id: str, env: Dict[str, str]) -> Dict[str, float]:
    """The run's ``zz_run/time_*`` metrics (seconds by stage), read in a helper process (MLflow stays out of this one)."""
    code = (
        "import json, sys\nfrom mlflow import MlflowClient\n"
        "m = MlflowClient(sys.argv[1]).get_run(sys.argv[2]).data.metrics\n"
        "print(json.dumps({k.split('/time_', 1)[1]: v for k, v in m.items() if '/time_' in k}))"
    )
    out = subprocess.run([sys.executable, "-c", code, uri, run_id], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"could not read run {run_id}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def attnsim_command(experiment: str, args, uri: str) -> List[str]:
    overrides = [
        f"corpus.limit={args.windows}",
        f"trainer.batch_size={args.batch_size}",
        f"trainer.threads={args.threads}",
        "trainer.progress_bar=false",
        accelerator_override(args.device),
        *model_overrides(args),
    ]
    return [sys.executable, "-m", "attnsim.cli", "run", experiment, *overrides, "--uri", uri]


def plain_command(args, libraries: bool = False) -> List[str]:
    model = ["--model-dir", args.model_dir] if args.model_dir else []
    if libraries:  # the floor: the same script with attnsim's libraries imported first
        model.append("--libraries")
    return [
        sys.executable,
        PLAIN,
        "--windows",
        str(args.windows),
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads),
        "--device",
        args.device,
        "--seq-len",
        str(args.seq_len),
        *model,
    ]


def model_dir(model: str, env: Dict[str, str]) -> str:
    """The folder attnsim loads for ``model.path=MODEL`` (a GGUF model converted into the cache first, untimed), found in a
    helper process; empty for the bundled MiniLM, which the plain script loads by default."""
    if model == "bundled":
        return ""
    code = "import sys\nfrom attnsim.capture.load import resolve_model_path\nprint(resolve_model_path(sys.argv[1]))"
    out = subprocess.run([sys.executable, "-c", code, model], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"model.path={model}: {out.stderr.strip().splitlines()[-1]}")
    return out.stdout.strip().splitlines()[-1]


def bench(experiment: str, args, uri: str, env: Dict[str, str]) -> dict:
    sides: Dict[str, List[dict]] = {"attnsim": [], "plain": [], "floor": []}
    order = ("attnsim", "plain", "floor") if args.floor else ("attnsim", "plain")
    for pair in range(args.pairs):
        for side in order if pair % 2 == 0 else order[::-1]:
            command = attnsim_command(experiment, args, uri) if side == "attnsim" else plain_command(args, libraries=side == "floor")
            result = timed(command, env)
            if side == "attnsim":
                run_id = next(line.split()[2] for line in result["stdout"].splitlines() if line.startswith("run id: "))
                result["stages"] = run_metrics(uri, run_id, env)
            sides[side].append(result)
            print(f"  {experiment} {side}: {result['wall']:.1f} s wall, {result['cpu']:.1f} s CPU, peak RSS {result['peak_mib']:.0f} MiB", flush=True)
    median = lambda side, key: statistics.median(r[key] for r in sides[side])  # noqa: E731
    stages = {s: statistics.median(r["stages"].get(s, 0.0) for r in sides["attnsim"]) for s in STAGES + ("total",)}
    stages["outside"] = statistics.median(r["wall"] - r["stages"]["total"] for r in sides["attnsim"])
    return {
        "experiment": experiment,
        "wall": median("attnsim", "wall"),
        "plain_wall": median("plain", "wall"),
        "cpu": median("attnsim", "cpu"),
        "plain_cpu": median("plain", "cpu"),
        "peak": median("attnsim", "peak_mib"),
        "plain_peak": median("plain", "peak_mib"),
        "floor_peak": median("floor", "peak_mib") if sides["floor"] else None,
        "stages": stages,
        "walls": [r["wall"] for r in sides["attnsim"]],
        "plain_walls": [r["wall"] for r in sides["plain"]],
    }


def print_tables(results: List[dict], args) -> None:
    print()
    print("| command | wall | plain script | ratio | CPU s (user+sys) vs plain | peak RSS vs plain |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(
            f"| `attnsim run {r['experiment']}{'' if args.model == 'bundled' else ' model.path=' + args.model}{'' if args.seq_len == 128 else f' corpus.seq_len={args.seq_len}'} corpus.limit={args.windows}` | {r['wall']:.1f} s | {r['plain_wall']:.1f} s | "
            f"{r['plain_wall'] / r['wall']:.2f}× | {r['cpu']:.1f} vs {r['plain_cpu']:.1f} | {r['peak']:,.0f} vs {r['plain_peak']:,.0f} MiB |"
        )
    print()
    print("Where `attnsim run`'s wall time goes (medians of its own zz_run/time_* metrics, seconds):")
    print("| stage | " + " | ".join(r["experiment"] for r in results) + " |")
    print("| --- |" + " --- |" * len(results))
    for stage in STAGES + ("total", "outside"):
        label = {
            "outside": "outside the run's total: interpreter start, ending the run, process exit",
            "total": "total (command start to the timings logged)",
        }.get(stage, stage)
        print(f"| {label} | " + " | ".join(f"{r['stages'][stage]:.2f}" for r in results) + " |")
    print()
    for r in results:
        print(f"{r['experiment']}: attnsim walls {[round(w, 1) for w in r['walls']]} s, plain walls {[round(w, 1) for w in r['plain_walls']]} s")
        target = TARGETS.get(r["experiment"]) if args.model == "bundled" and args.seq_len == 128 else None
        ratio = r["plain_wall"] / r["wall"]
        if target is not None:
            print(f"target {r['experiment']} whole-process ratio >= {target}: {ratio:.2f} -> {'PASS' if ratio >= target else 'FAIL'}")
        rss, rss_target = r["peak"] / r["plain_peak"], RSS_TARGETS.get(r["experiment"]) if args.model == "bundled" and args.seq_len == 128 else None
        if rss_target is not None:
            print(f"target {r['experiment']} peak RSS <= {rss_target}x the plain script's: {rss:.2f}x -> {'PASS' if rss <= rss_target else 'FAIL'}")
        else:
            print(f"{r['experiment']} peak RSS {rss:.2f}x the plain script's (the targets are for the bundled MiniLM at 128 tokens)")
        if r["floor_peak"] is not None:
            floor = r["floor_peak"]
            print(
                f"{r['experiment']}: the plain script with attnsim's libraries imported (--floor) peaks at {floor:,.0f} MiB, {floor / r['plain_peak']:.2f}x the plain "
                f"script's; attnsim's own memory above that floor: {r['peak'] - floor:+,.0f} MiB"
            )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", nargs="+", default=["csm", "paper"])
    parser.add_argument(
        "--floor", action="store_true", help="also run the plain script with attnsim's libraries imported (plain_forward.py --libraries): the memory floor"
    )
    parser.add_argument("--windows", type=positive, default=512, help="BBC windows of every run (default 512)")
    parser.add_argument("--pairs", type=positive, default=3, help="alternating (attnsim, plain) pairs; medians are reported (default 3)")
    parser.add_argument("--batch-size", type=positive, default=32)
    parser.add_argument("--threads", type=positive, default=2, help="torch threads of both sides (default 2)")
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu or cuda[:N]")
    add_model_options(parser)  # --model (model.path of both sides) and --seq-len (tokens per window of both sides)
    args = parser.parse_args(argv)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    args.model_dir = model_dir(args.model, env)
    with tempfile.TemporaryDirectory() as folder:
        uri = f"sqlite:///{folder}/mlflow.db"
        # every experiment and override is checked, and the store's schema created, before anything is timed
        check = (
            "import sys\nfrom attnsim.config import load_config\nfrom attnsim.tracking.store import Tracker\n"
            + "".join(f"load_config({name!r}, {attnsim_command(name, args, uri)[5:-2]!r})\n" for name in args.experiments)
            + f"Tracker({uri!r})\n"
        )
        out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            parser.error(out.stderr.strip().splitlines()[-1])
        load = load_average()
        print(
            f"model {args.model}, device {args.device}, {args.windows} windows of {args.seq_len} tokens, batch {args.batch_size}, {args.threads} threads, {args.pairs} pair(s); statistics path {statistics_path()}; load average {load:.2f} at start",
            flush=True,
        )
        results = [bench(name, args, uri, env) for name in args.experiments]
    print_tables(results, args)
    load = load_average()
    print(f"load average {load:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
