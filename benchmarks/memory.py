"""Peak resident memory of `attnsim run EXPERIMENT` at two corpus sizes, and their ratio.

Each run is a fresh Python process (so peaks do not mix) logging to a
temporary SQLite store; the peak is that process's own high-water mark of resident memory (``VmHWM``). With
``--full`` it also runs the experiment over every window of the BBC corpus
and reports its time and peak memory.

Usage:
    python benchmarks/memory.py                    # paper at 256 and 2,048 windows
    python benchmarks/memory.py --full             # ... and over the whole BBC corpus (corpus.limit=null)
    python benchmarks/memory.py --device cuda      # on a GPU (trainer.accelerator=gpu)
    python benchmarks/memory.py trainer.batch_size=64     # overrides are passed to every run
    python benchmarks/memory.py --model smollm2 --seq-len 256 --small 8 --large 64 trainer.batch_size=8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _options import (  # benchmarks/, the script's folder
    accelerator_override,
    add_model_options,
    device_name,
    load_average,
    model_overrides,
    positive,
    statistics_path,
)

TARGET_RATIO = 1.15

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_child.py")  # one `attnsim run`, its timings and peak memory


def measure(experiment: str, limit: str, extra) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", MLFLOW_TRACKING_URI=f"sqlite:///{folder}/mlflow.db")
        args = [sys.executable, CHILD, experiment, f"corpus.limit={limit}", "trainer.progress_bar=false", *extra]
        out = subprocess.run(args, capture_output=True, text=True, env=env)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"attnsim run {experiment} corpus.limit={limit} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="paper")
    parser.add_argument("--small", type=positive, default=256, help="windows of the smaller run (default 256)")
    parser.add_argument("--large", type=positive, default=2048, help="windows of the larger run (default 2048)")
    parser.add_argument("--full", action="store_true", help="also run over every window of the corpus")
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu or cuda[:N] (sets trainer.accelerator)")
    add_model_options(parser)  # --model (model.path) and --seq-len (corpus.seq_len) of every run
    parser.add_argument("overrides", nargs="*", help="extra overrides passed to every run, e.g. trainer.batch_size=64")
    args = parser.parse_args(argv)
    if args.small >= args.large:
        parser.error(f"--small {args.small} must be fewer windows than --large {args.large}")
    args.overrides = [accelerator_override(args.device), *model_overrides(args), *args.overrides]
    from attnsim.config import load_config
    from attnsim.errors import AttnsimError

    try:  # the experiment and overrides are checked before any run starts
        load_config(args.experiment, [f"corpus.limit={args.large}", *args.overrides])
    except AttnsimError as exc:
        parser.error(str(exc))
    load = load_average()
    print(
        f"{args.experiment}, model {args.model}, windows of {args.seq_len} tokens, on {args.device}: peak RSS at {args.small} and {args.large} windows{' and the whole corpus' if args.full else ''}, each run in a fresh process; statistics path {statistics_path()}; load average {load:.2f} at start",
        flush=True,
    )
    rows = []
    for limit in [str(args.small), str(args.large)] + (["null"] if args.full else []):
        start = time.perf_counter()
        result = measure(args.experiment, limit, args.overrides)
        result["limit"] = limit
        rows.append(result)
        print(
            f"{args.experiment} corpus.limit={limit}: {result['windows']} windows, {result['run']:.1f} s in the run "
            f"({time.perf_counter() - start:.1f} s with start-up), peak RSS {result['peak_mib']:.0f} MiB"
            f"{'' if result.get('gpu_peak_mib') is None else ', peak GPU memory {:.0f} MiB'.format(result['gpu_peak_mib'])}, "
            f"{result['windows'] / result['timings'].get('predict', float('nan')):.1f} windows/s in predict",
            flush=True,
        )
    ratio = rows[1]["peak_mib"] / rows[0]["peak_mib"]
    passed = ratio <= TARGET_RATIO
    print()
    print("| experiment | windows | peak RSS MiB | run s | predict s | windows/s in predict | summarise s | logging s | figures s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        t = r["timings"]
        rate = r["windows"] / t["predict"] if t.get("predict") else float("nan")
        print(
            f"| {args.experiment}{'' if args.model == 'bundled' and args.seq_len == 128 else f' ({args.model}, T = {args.seq_len})'} | {r['windows']} | {r['peak_mib']:.0f} | {r['run']:.1f} | {t.get('predict', 0):.1f} | {rate:.1f} | {t.get('summarise', 0):.2f} | {t.get('log', 0):.2f} | {t.get('figures', 0):.2f} |"
        )
    print()
    print(f"target peak-memory ratio {rows[1]['windows']}/{rows[0]['windows']} windows <= {TARGET_RATIO}: {ratio:.3f} -> {'PASS' if passed else 'FAIL'}")
    if all(r.get("gpu_peak_mib") for r in rows[:2]):
        print(f"peak GPU memory ratio {rows[1]['windows']}/{rows[0]['windows']} windows: {rows[1]['gpu_peak_mib'] / rows[0]['gpu_peak_mib']:.3f} (no target)")
    if args.full:
        full_ratio = rows[2]["peak_mib"] / rows[0]["peak_mib"]
        print(
            f"full corpus ({rows[2]['windows']} windows): {rows[2]['run']:.0f} s, peak ratio to {rows[0]['windows']} windows {full_ratio:.3f} -> {'PASS' if full_ratio <= TARGET_RATIO else 'FAIL'}"
        )
    load = load_average()
    print(f"load average {load:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
