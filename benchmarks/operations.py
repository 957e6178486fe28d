"""The cost of each operation a batch of `paper` or `csm` statistics needs, timed one at a time.

On one batch of BBC windows (default 32 windows of 128 tokens, the bundled MiniLM), each
operation runs ``--repeats`` times and its fastest time is reported (the least it costs on
this machine, with the data in memory as the statistics pass finds it). Then the ceilings:
the plain SDPA forward pass against the plain forward plus the operations each experiment
cannot do without, i.e. the ratio b/a of `benchmarks/throughput.py` that a pass doing only
those operations, each at its fastest, would reach. A target above the ceiling is out of
reach with these operations on this machine: the figure that shows whether a target can be met at all.

The statistics path (compiled kernel or fallback) is printed; the kernel rows need numba.

Usage:
    python benchmarks/operations.py
    python benchmarks/operations.py --windows 32 --repeats 7 --threads 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Dict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from attnsim.workflows.startup import process_settings  # noqa: E402

PROCESS_SETTINGS = process_settings()  # those of `attnsim run`, made before torch loads

from _options import add_model_options, load_average, model_overrides, positive  # noqa: E402  (benchmarks/, the script's folder)


def parse_options(argv=None) -> argparse.Namespace:
    """The command line, checked before torch loads: a bad option is refused at once, not after the imports."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=positive, default=32, help="windows in the batch (default 32)")
    parser.add_argument("--repeats", type=positive, default=7, help="runs of each operation; the fastest is reported (default 7)")
    parser.add_argument("--threads", type=positive, default=None, help="torch threads (default: all cores)")
    add_model_options(parser)
    return parser.parse_args(argv)


if __name__ == "__main__":
    OPTIONS = parse_options()

import torch  # noqa: E402

from attnsim.capture.hooks import forward_with_capture  # noqa: E402
from attnsim.capture.load import load_model  # noqa: E402
from attnsim.config import load_config  # noqa: E402
from attnsim.data.module import collate_windows  # noqa: E402
from attnsim.stats.pairs import kernels, pair_indices  # noqa: E402
from attnsim.stats.pairs.selection import partition_top  # noqa: E402
from attnsim.workflows.run import prepare  # noqa: E402

# the CSM product and the high pairs as the statistics pass runs them (a second ceiling below)
WALK = "CSM walk's kernel pass: float32 products into pair space, high pairs, class sums and squares, window after window (the walk)"

# the operations each experiment cannot do without (the rest of its statistics come on top)
NEEDED = {
    "csm": ("capture of the per-head outputs", "CSM product, float32", "high pairs: top k of the CSM (kernel)"),
    "paper": (
        "capture of the per-head outputs",
        "attention probabilities (eager forward less SDPA forward)",  # or recomputed, if cheaper (below)
        "CSM product, float32",
        "high pairs: top k of the CSM (kernel)",
        "high-attention pairs: top k of max(A, Aᵀ) (kernel, square maps)",
        "attention entropy: p log p, window by window",
        "attention key mass and distance: sum over i of A[i, j], and of A[i, j] * abs(i - j), window by window",
    ),
}


def fastest(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up, untimed: first-call allocations, the kernel's compilation or cache load
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> int:
    """Run the benchmark; ``argv``: the command line's arguments (a list), or options :func:`parse_options` already parsed."""
    args = argv if isinstance(argv, argparse.Namespace) else parse_options(argv)
    from attnsim.quiet import quiet_libraries

    quiet_libraries()
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    cfg = load_config("paper", [f"corpus.limit={args.windows}", f"trainer.batch_size={args.windows}", *model_overrides(args)])
    prepared = prepare(cfg)
    info = prepared.info
    batch = collate_windows(list(enumerate(prepared.corpus.windows)), prepared.corpus.unk_token_id)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    plain, _ = load_model(info, attn_implementation="sdpa", needs_attention=False)
    eager, _ = load_model(info, attn_implementation="eager", needs_attention=True)
    arch = info.arch
    load = load_average()
    print(
        f"{info.name}: {args.windows} windows of {prepared.corpus.seq_len} tokens, {torch.get_num_threads()} threads, "
        f"fastest of {args.repeats}; statistics path {kernels.path_name()}; {PROCESS_SETTINGS}; load average {load:.2f} at start",
        flush=True,
    )

    times: Dict[str, float] = {}
    with torch.inference_mode():
        times["plain forward, SDPA (a)"] = fastest(lambda: plain(**inputs), args.repeats)
        eager_forward = fastest(lambda: eager(**inputs, output_attentions=True), args.repeats)
        times["attention probabilities (eager forward less SDPA forward)"] = max(0.0, eager_forward - times["plain forward, SDPA (a)"])
        captured = fastest(lambda: forward_with_capture(plain, arch, info.n_heads, inputs, False), args.repeats)
        times["capture of the per-head outputs"] = max(0.0, captured - times["plain forward, SDPA (a)"])
        raw = forward_with_capture(eager, arch, info.n_heads, inputs, True)[1]
    z = torch.stack(list(raw.z_layers), 1)  # (B, L, H, T, d)
    attention = list(raw.attention_layers)  # L x (B, H, T, T)
    batch_size, n_layers, n_heads, seq_len, _ = z.shape
    windows = [z[b].reshape(-1, seq_len, z.shape[-1]).contiguous() for b in range(batch_size)]  # per window (L*H, T, d)
    rows, cols = pair_indices(seq_len)
    flat = rows * seq_len + cols
    tokens = batch["attention_mask"].bool()
    k = max(1, int(cfg.stats.top_fraction * len(flat) + 0.5))  # the top-fraction rule's k of a full window
    csm = [w @ w.transpose(-1, -2) for w in windows]
    values = [c.reshape(-1, seq_len * seq_len).index_select(1, flat) for c in csm]
    times["CSM product, float32"] = fastest(lambda: [w @ w.transpose(-1, -2) for w in windows], args.repeats)
    # the same products written into one (L*H, T, T) buffer, window after window: no fresh output pages to fault in
    buffer = torch.empty(windows[0].shape[0], seq_len, seq_len)
    times["CSM product, float32, into one reused buffer"] = fastest(lambda: [torch.matmul(w, w.transpose(-1, -2), out=buffer) for w in windows], args.repeats)
    times["CSM product, float64 rounded to float32 (the fallback)"] = fastest(
        lambda: [(w.double() @ w.double().transpose(-1, -2)).float() for w in windows], args.repeats
    )
    times["CSM pair values gathered (i < j)"] = fastest(lambda: [c.reshape(-1, seq_len * seq_len).index_select(1, flat) for c in csm], args.repeats)
    if kernels.compiled_available():
        times["high pairs: top k of the CSM (kernel)"] = fastest(lambda: [kernels.compiled_top(v, k) for v in values], args.repeats)
        counts = [k] * batch_size
        # as the CSM walk runs them: one kernel pass per window computes its products straight into pair space, chooses
        # its high pairs and makes the sums of the pair classes and of the squares, adding each pair's value to the totals
        walk_tokens = [tokens[b : b + 1] for b in range(batch_size)]
        weights = torch.ones(1, 5, len(flat))  # the pair-class masks' shape (the cost does not depend on their values)
        totals = torch.zeros(z.shape[1], z.shape[2], len(flat))
        times[WALK] = fastest(lambda: [kernels.compiled_csm_walk(z[b : b + 1], walk_tokens[b], [k], weights, totals) for b in range(batch_size)], args.repeats)
        times["high-attention pairs: top k of max(A, Aᵀ) (kernel, square maps)"] = fastest(
            lambda: [kernels.compiled_pair_top(a, tokens, counts, True) for a in attention], args.repeats
        )
    times["high pairs: top k of the CSM (NumPy partition, the fallback)"] = fastest(lambda: [partition_top(v, k) for v in values], args.repeats)
    # probabilities recomputed window by window from queries and keys (capture.path=recomputed); the per-head
    # outputs stand in for the queries and keys, which have their shape (the cost depends on the shape only)
    scale = z.shape[-1] ** -0.5
    times["attention probabilities recomputed, window by window (Q Kᵀ, softmax)"] = fastest(
        lambda: [torch.softmax(torch.matmul(w, w.transpose(-1, -2)) * scale, -1) for w in windows], args.repeats
    )
    # the attention's passes window by window, as the statistics pass makes them (each window's maps in cache)
    maps = [[a[b] for a in attention] for b in range(batch_size)]  # per window, L x (H, T, T)
    times["attention entropy: p log p, window by window"] = fastest(
        lambda: [[m.clamp_min(1e-30).log_().mul_(m).sum(-1) for m in window] for window in maps], args.repeats
    )
    # the separators' other two sums (attnsim/stats/separators.py SeparatorSums): the attention each key receives from
    # the statistic queries, and the attention-weighted distance |i - j| over statistic queries and real keys
    position = torch.arange(seq_len, dtype=torch.float32)
    gap = (position[:, None] - position[None, :]).abs()
    query_rows = [tokens[b].float() for b in range(batch_size)]
    distance_weights = [query_rows[b][:, None] * batch["attention_mask"][b].float()[None, :] * gap for b in range(batch_size)]
    times["attention key mass and distance: sum over i of A[i, j], and of A[i, j] * abs(i - j), window by window"] = fastest(
        lambda: [[(query_rows[b] @ m, (m * distance_weights[b]).sum((-1, -2))) for m in window] for b, window in enumerate(maps)], args.repeats
    )
    times["one masked sum over the T x T maps, window by window"] = fastest(
        lambda: [[(m * tokens[b, None, :, None]).sum((-1, -2)) for m in window] for b, window in enumerate(maps)], args.repeats
    )

    a = times["plain forward, SDPA (a)"]
    print(f"\nper batch of {batch_size} windows ({n_layers} layers x {n_heads} heads, T = {seq_len}, k = {k} of {len(flat)} pairs)")
    print("| operation | s per batch |")
    print("| --- | --- |")
    for name, seconds in times.items():
        print(f"| {name} | {seconds:.4f} |")
    print("\n| experiment | plain (a) | + what it cannot do without | ceiling of b/a |")
    print("| --- | --- | --- | --- |")
    for experiment, needed in NEEDED.items():
        missing = [name for name in needed if name not in times]
        if missing:
            print(f"| {experiment} | {a:.3f} | (needs the compiled kernel: {', '.join(missing)}) | |")
            continue
        extra = sum(times[name] for name in needed)
        extra += min(0.0, times["CSM product, float32, into one reused buffer"] - times["CSM product, float32"])  # whichever is cheaper
        if experiment == "paper":  # the probabilities from whichever way is cheaper: eager, or recomputed
            recomputed = "attention probabilities recomputed, window by window (Q Kᵀ, softmax)"
            extra += min(0.0, times[recomputed] - times["attention probabilities (eager forward less SDPA forward)"])
        print(f"| {experiment} | {a:.3f} | {extra:.3f} | {a / (a + extra):.2f} |")
        if WALK in times:  # the product and the high pairs as the walk runs them, instead of each at its fastest alone
            walked = (
                extra
                - times["high pairs: top k of the CSM (kernel)"]
                - min(times["CSM product, float32, into one reused buffer"], times["CSM product, float32"])
                + times[WALK]
            )
            print(f"| {experiment}, as the CSM walk runs them | {a:.3f} | {walked:.3f} | {a / (a + walked):.2f} |")
    load = load_average()
    print(f"load average {load:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main(OPTIONS))
