"""One ``attnsim run EXPERIMENT [overrides]`` in this process, as a user starts it, for the benchmarks.

It starts as ``attnsim run`` does: the same allocator and OpenMP settings
(:func:`~attnsim.workflows.startup.process_settings`), the
same imports (:func:`attnsim.workflows.startup.import_libraries`: the garbage collector paused, then frozen; frozen
again at exit).

Prints one line ``RESULT {json}``: seconds spent importing attnsim (``imports``) and in the run
(``run``), the run's own timings (``zz_run/time_*``: windows, tracker, setup, load model, open run,
predict, summarise, log, figures, total, unattributed), the windows
measured, and this process's peak memory: ``peak_mib``, its own high-water mark of resident
memory (``VmHWM``; ``ru_maxrss`` would also count the parent's resident memory at fork, which
Linux carries across exec), and ``gpu_peak_mib`` (``torch.cuda.max_memory_allocated``) when
CUDA was used.

Usage (the benchmark scripts start it in a fresh process):
    python benchmarks/run_child.py paper corpus.limit=256 trainer.progress_bar=false
"""

import json
import resource
import sys
import time


def peak_mib() -> float:
    """This process's peak resident memory in MiB."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def main() -> None:
    start = time.perf_counter()
    from attnsim.workflows.startup import freeze_at_exit, import_libraries, process_settings

    process_settings()  # those of `attnsim run`, before torch loads
    import_libraries()  # as `attnsim run` does: the collector paused while they import, frozen after
    freeze_at_exit()
    import torch

    from attnsim.errors import AttnsimError
    from attnsim.workflows.run import run

    imported = time.perf_counter()
    try:
        result = run(sys.argv[1], sys.argv[2:])
    except AttnsimError as exc:  # bad config, model or corpus: one paragraph, as `attnsim run` prints it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    if result.rank:  # DDP: ranks > 0 (the launcher re-runs this script) measured their shard; rank 0 reports the run
        return
    gpu = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_initialized() else None
    print(
        "RESULT "
        + json.dumps(
            {
                "imports": imported - start,
                "run": time.perf_counter() - imported,
                "timings": result.timings,
                "windows": result.windows,
                "peak_mib": peak_mib(),
                "gpu_peak_mib": gpu,
            }
        )
    )


if __name__ == "__main__":
    main()
