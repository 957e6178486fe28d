"""CPU seconds of an experiment's statistics pass per batch, stage by stage, on one thread.

On a machine other processes share, wall-clock timings of the statistics move with their load (with two
torch threads each operation waits for both threads, so on a busy machine the same code may take several
times longer than on an idle one). This script runs everything on one thread (torch and the compiled
kernels) and reads that thread's CPU time (``time.thread_time``), which the other processes barely move:
a figure for comparing two versions of the statistics on a shared machine (run it in each checkout, one
after the other, a few times). It is not the run's speed: ``throughput.py`` measures that, with every
thread, on an idle machine.

Per batch, on the run's capture path (``capture.path=auto`` by default, or the one given as an override): the
forward pass with its capture, the attention walk, the CSM walk, then each finding's update on the walked view;
medians (and the least) over ``--repeats`` passes over the batches. "forward and capture" differs between the paths
(eager maps returned together, eager maps folded layer by layer on the ``streamed`` path, whose attention walk is
therefore inside it, or SDPA with queries and keys recorded), so compare the paths by "forward and statistics".

Usage:
    python benchmarks/statistics_cpu.py                          # paper, 64 BBC windows, MiniLM
    python benchmarks/statistics_cpu.py --experiment csm --repeats 5
    python benchmarks/statistics_cpu.py capture.path=dense          # any attnsim override
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Dict, List

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from attnsim.workflows.startup import process_settings  # noqa: E402

PROCESS_SETTINGS = process_settings()  # those of `attnsim run`, made before torch loads

import torch  # noqa: E402
from _options import add_model_options, load_average, model_overrides, positive  # noqa: E402  (benchmarks/, the script's folder)

from attnsim.config import load_config  # noqa: E402
from attnsim.data.module import collate_windows  # noqa: E402
from attnsim.stats.pairs.kernels import path_name  # noqa: E402
from attnsim.stats.pairs.shared import SHARED  # noqa: E402
from attnsim.workflows.kinds.base import plain_module  # noqa: E402
from attnsim.workflows.run import build_findings, prepare  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", default="paper")
    parser.add_argument("--windows", type=positive, default=64, help="BBC windows (default 64)")
    parser.add_argument("--batch-size", type=positive, default=32)
    parser.add_argument("--repeats", type=positive, default=3, help="passes over the batches (default 3)")
    parser.add_argument("overrides", nargs="*", help="attnsim overrides, e.g. capture.path=dense")
    add_model_options(parser)
    args = parser.parse_args(argv)
    from attnsim.quiet import quiet_libraries

    quiet_libraries()
    torch.set_num_threads(1)  # the compiled kernels follow torch's thread count: everything on this thread
    cfg = load_config(args.experiment, [f"corpus.limit={args.windows}", f"trainer.batch_size={args.batch_size}", *model_overrides(args), *args.overrides])
    prepared = prepare(cfg)
    findings = build_findings(prepared)
    module, tags, _ = plain_module(prepared, findings)  # the run's capture path and view
    kinds = {source: list(SHARED[source]) for source in SHARED}
    for finding in findings:
        for kind in finding.reducers():
            kinds[kind.source].append(kind)
    windows = prepared.corpus.windows
    batches = [collate_windows(list(enumerate(windows[i : i + args.batch_size]))) for i in range(0, len(windows), args.batch_size)]
    load = load_average()
    print(
        f"{prepared.info.name}, {args.experiment}: {len(windows)} windows, batch {args.batch_size}, {args.repeats} pass{'es' if args.repeats != 1 else ''}, 1 thread "
        f"(CPU time of this thread); capture path {tags['attnsim.capture_path']}, statistics path {path_name()}; {PROCESS_SETTINGS}; load average {load:.2f} at start"
    )
    times: Dict[str, List[float]] = {}

    def timed(name: str, fn) -> None:
        start = time.thread_time()
        fn()
        times.setdefault(name, []).append(time.thread_time() - start)

    with torch.inference_mode():
        view = module.predict_step(batches[0], 0)  # warm-up: the kernel's first call loads it
        for finding in findings:
            finding.update(view)
        times.clear()
        for _ in range(args.repeats):
            for batch in batches:
                start = time.thread_time()
                view = module.predict_step(batch, 0)
                forward = time.thread_time() - start
                times.setdefault("forward and capture", []).append(forward)
                start = time.thread_time()
                for source in ("attention", "csm"):  # attention first: a CSM reducer may read the high-attention pairs
                    if kinds[source] and (source == "csm" or view.has_attention) and source not in view._walked:  # streamed: walked in the forward pass
                        timed(f"{source} walk", lambda: view.reduced(kinds[source][0]))  # noqa: B023 - called at once
                for finding in findings:
                    timed(type(finding).__name__, lambda: finding.update(view))  # noqa: B023 - called at once
                statistics_s = time.thread_time() - start
                times.setdefault("statistics, in all", []).append(statistics_s)
                times.setdefault("forward and statistics", []).append(forward + statistics_s)
    print("\n| stage | CPU s per batch (median) | least |")
    print("| --- | --- | --- |")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.4f} | {min(values):.4f} |")
    load = load_average()
    print(f"load average {load:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
