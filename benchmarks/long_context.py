"""Long contexts: one window of T tokens through a seeded random decoder, on the blockwise and the dense path.

The model: a Llama-architecture decoder built here with seeded random weights (4 layers, 8 heads,
d_model 256, rotary positions up to 8,192), the bundled MiniLM tokenizer's vocabulary. The window: BBC
News articles joined into one long document, cut to T tokens. For each T and path, a fresh process runs
the forward pass and every statistic of the `paper` experiment (csm, distance, sentences, anchors,
repetition, attention_regions, separators, noise) on that one window, then summarises them; no figures
and no MLflow. It prints, per T and path:

- peak RSS of the process (``VmHWM``) and the memory above the loaded model (peak minus the resident
  memory after the model and the window were made);
- the time of the window (forward + statistics + summaries) and the top-k selection's share of it
  (the high-CSM and high-attention pairs: the streaming top-k on the blockwise path, ``select_top``
  on the dense path).

The dense path (eager attention, T x T maps and pair-space tensors) runs where it fits (``--dense-max``,
default 1,024: at 2,048 tokens its pair-space distance table alone is 17 GB).

Children run with ``MALLOC_MMAP_THRESHOLD_=65536`` (glibc) unless ``--default-malloc``: the blockwise walks
free and allocate blocks of a few MB thousands of times, and glibc's adaptive threshold otherwise keeps the
freed blocks in the heap (about 40% more memory above the model at T = 4,096).

Targets: blockwise T = 8,192 under 2 GiB peak RSS (one long document measured on a laptop's memory); memory above
the model grows at most 4.5x from 4,096 to 8,192 (the T x T attention itself grows 4x, and the walks hold blocks of
it, never all of it); the 8,192-token window's statistics in under 5 minutes (a long document measured while one waits). The script exits 0 even
when a target fails; read the PASS/FAIL lines.

With ``--model`` (``bundled``, ``smollm2`` or a model folder / .gguf file) it measures whole processes of that model
instead: per T and experiment (``--experiments``, default ``csm`` and ``paper``), ``attnsim run EXPERIMENT
model.path=MODEL corpus.limit=1 corpus.seq_len=T trainer.batch_size=1`` (the first BBC window, padded to T as the
corpus cuts it) against the plain SDPA forward of the same model over the same window (``plain_forward.py``), alternating
which goes first; peak RSS is each child's own ``ru_maxrss`` (``os.wait4``; this parent imports nothing heavy).
Target: each run's peak at most 2x the plain forward's (capture, statistics and libraries together add at most
what the model's own forward pass takes).

Usage:
    python benchmarks/long_context.py                      # T = 512 .. 8,192 (~15-30 min on 2 cores)
    python benchmarks/long_context.py --lengths 512 1024   # a quick look
    python benchmarks/long_context.py --model smollm2 --lengths 512 1024 2048   # SmolLM2 runs vs its plain forward
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _options import model_name, positive  # noqa: E402

LENGTHS = (512, 1024, 2048, 4096, 8192)
MODEL_RSS_TARGET = 2.0  # attnsim run's peak RSS at most this many times the plain forward's (--model)
HERE = Path(__file__).resolve().parent


def _status(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(seq_len: int, path: str, threads: int, block_rows: int) -> dict:
    """One window of ``seq_len`` tokens on ``path`` in this process; returns the measurements."""
    import torch

    torch.set_num_threads(threads)
    from omegaconf import OmegaConf
    from transformers import AutoModel, AutoTokenizer, LlamaConfig

    from attnsim.capture.architectures import architecture_for
    from attnsim.capture.hooks import BatchCapture, forward_with_capture
    from attnsim.capture.load import resolve_model_path
    from attnsim.capture.queries import register
    from attnsim.config import StatsConfig
    from attnsim.data.module import collate_windows
    from attnsim.data.sources import Document, read_documents
    from attnsim.data.windows import build_corpus
    from attnsim.findings.base import FindingContext, view_factory
    from attnsim.findings.registry import FINDINGS
    from attnsim.stats.pairs import blocks, shared

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("bundled"))
    tokenizer.model_max_length = max(seq_len, tokenizer.model_max_length)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=8,
        intermediate_size=512,
        max_position_embeddings=8192,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = AutoModel.from_config(config, attn_implementation=register() if path == "blockwise" else "eager").eval()
    documents = read_documents("bbc")
    text = " ".join(d.text for d in documents[:200])  # one long document: the window is full
    corpus = build_corpus([Document("bbc/joined", text)], tokenizer, seq_len, limit=1, shuffle=False)
    batch = collate_windows(list(enumerate(corpus.windows)), corpus.unk_token_id)
    stats = OmegaConf.structured(StatsConfig)
    context = FindingContext(tokenizer=tokenizer, vocab_size=len(tokenizer))
    names = ["csm", "distance", "sentences", "anchors", "repetition", "attention_regions", "separators", "noise"]
    findings = [FINDINGS[n](4, 8, seq_len, stats, context) for n in names]
    arch = architecture_for("llama")
    loaded = _status("VmRSS")

    selection = [0.0]  # seconds in the top-k selection

    def timed(function):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                selection[0] += time.perf_counter() - start

        return wrapper

    blocks.StreamingTop.push = timed(blocks.StreamingTop.push)
    shared.select_top = timed(shared.select_top)  # the dense walk's selections (attnsim.stats.pairs.shared imports it by name)

    start = time.perf_counter()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.inference_mode():
        _, capture = forward_with_capture(model, arch, 8, inputs, attention=path == "dense", queries=path == "blockwise")
        forward = time.perf_counter() - start
        raw = BatchCapture(capture.z_layers, capture.attention_layers, "z", capture.query_keys)
        made = view_factory(findings, stats, path, block_rows)(raw, batch)
        for finding in findings:
            finding.update(made)
            if finding.error is not None:
                raise finding.error
        made.release()
        summaries = {f.name: f.summarise() for f in findings}
    total = time.perf_counter() - start
    return {
        "seq_len": seq_len,
        "path": path,
        "tokens": int(batch["attention_mask"].sum()),
        "seconds": total,
        "forward": forward,
        "selection": selection[0],
        "peak_mib": _status("VmHWM"),
        "loaded_mib": loaded,
        "csm_mean": float(summaries["csm"].scalars["mean"].mean()),
    }


def run_child(seq_len: int, path: str, threads: int, block_rows: int, default_malloc: bool = False) -> dict:
    args = [sys.executable, __file__, "--child", str(seq_len), path, "--threads", str(threads), "--block-rows", str(block_rows)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if not default_malloc:  # glibc: blocks over 64 KiB are mapped and go back to the OS when freed (README, "Long contexts")
        env.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    out = subprocess.run(args, capture_output=True, text=True, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"seq_len": seq_len, "path": path, "error": (out.stderr.strip().splitlines() or ["no output"])[-1]}


def model_runs(args) -> int:
    """``--model``: whole ``attnsim run`` processes against the plain forward, per T; prints the table rows."""
    import tempfile

    from end_to_end import model_dir, timed  # benchmarks/, the script's folder

    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    folder = model_dir(args.model, env)
    plain_model = ["--model-dir", folder] if folder else []
    load = os.getloadavg()[0]
    print(f"model {args.model}, one window per run, {args.threads} threads; load average {load:.2f} at start", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as store:
        uri = f"sqlite:///{store}/mlflow.db"
        for seq_len in args.lengths:
            plain_cmd = [
                sys.executable,
                str(HERE / "plain_forward.py"),
                "--windows",
                "1",
                "--batch-size",
                "1",
                "--threads",
                str(args.threads),
                "--seq-len",
                str(seq_len),
                *plain_model,
            ]
            for index, experiment in enumerate(args.experiments):
                overrides = [
                    f"model.path={args.model}",
                    "corpus.limit=1",
                    f"corpus.seq_len={seq_len}",
                    "trainer.batch_size=1",
                    f"trainer.threads={args.threads}",
                    "trainer.progress_bar=false",
                ]
                attnsim_cmd = [sys.executable, "-m", "attnsim.cli", "run", experiment, *overrides, "--uri", uri]
                order = (attnsim_cmd, plain_cmd) if index % 2 == 0 else (plain_cmd, attnsim_cmd)
                done = {id(cmd): timed(cmd, env) for cmd in order}
                run, plain = done[id(attnsim_cmd)], done[id(plain_cmd)]
                ratio = run["peak_mib"] / plain["peak_mib"]
                rows.append((seq_len, experiment, run, plain, ratio))
                print(
                    f"  T={seq_len} {experiment}: peak RSS {run['peak_mib']:,.0f} MiB ({run['wall']:.0f} s) vs plain {plain['peak_mib']:,.0f} MiB ({plain['wall']:.0f} s): {ratio:.2f}x",
                    flush=True,
                )
    print()
    print("| model | T | command | peak RSS | plain forward's peak RSS | ratio | wall (plain) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for seq_len, experiment, run, plain, ratio in rows:
        print(
            f"| {args.model} | {seq_len:,} | `attnsim run {experiment}` | {run['peak_mib']:,.0f} MiB | {plain['peak_mib']:,.0f} MiB | {ratio:.2f}× | {run['wall']:.0f} s ({plain['wall']:.0f} s) |"
        )
    print()
    for seq_len, experiment, _, _, ratio in rows:
        print(
            f"{'PASS' if ratio <= MODEL_RSS_TARGET else 'FAIL'}: {args.model} T={seq_len} {experiment} peak RSS {ratio:.2f}x the plain forward's (target <= {MODEL_RSS_TARGET}x)"
        )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=positive, nargs="+", default=list(LENGTHS), help="window lengths T (default: 512 1024 2048 4096 8192)")
    parser.add_argument("--dense-max", type=positive, default=1024, help="longest T run on the dense path too (default 1024)")
    parser.add_argument("--threads", type=positive, default=2)
    parser.add_argument("--block-rows", type=positive, default=256, help="query rows per block of the blockwise path (capture.block_rows)")
    parser.add_argument("--default-malloc", action="store_true", help="keep glibc's adaptive mmap threshold (freed blocks stay in the heap: higher peak RSS)")
    parser.add_argument(
        "--model",
        type=model_name,
        default=None,
        help="bundled, smollm2 or a model folder / .gguf file: whole attnsim runs against the plain forward (module docstring)",
    )
    parser.add_argument("--experiments", nargs="+", default=["csm", "paper"], help="with --model: the experiments run (default csm paper)")
    parser.add_argument("--child", nargs=2, metavar=("T", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.model is not None:
        return model_runs(args)
    if args.child:
        result = child(int(args.child[0]), args.child[1], args.threads, args.block_rows)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    if any(t > 8192 for t in args.lengths):
        parser.error("the benchmark's decoder has 8,192 positions: give --lengths of at most 8192")
    rows = []
    print(f"{'T':>6} {'path':>9} {'peak RSS MiB':>13} {'above model MiB':>16} {'s/window':>9} {'forward s':>10} {'top-k share':>12}")
    for seq_len in args.lengths:
        for path in ("blockwise", "dense"):
            if path == "dense" and seq_len > args.dense_max:
                print(f"{seq_len:>6} {path:>9} {'(does not fit)':>13}")
                continue
            r = run_child(seq_len, path, args.threads, args.block_rows, args.default_malloc)
            rows.append(r)
            if "error" in r:
                print(f"{seq_len:>6} {path:>9} error: {r['error']}")
                continue
            above = r["peak_mib"] - r["loaded_mib"]
            r["above_mib"] = above
            print(
                f"{seq_len:>6} {path:>9} {r['peak_mib']:>13,.0f} {above:>16,.0f} {r['seconds']:>9.1f} {r['forward']:>10.1f} {r['selection'] / r['seconds']:>11.0%}",
                flush=True,
            )
    block = {r["seq_len"]: r for r in rows if r.get("path") == "blockwise" and "error" not in r}
    if 8192 in block:
        peak = block[8192]["peak_mib"]
        print(f"{'PASS' if peak < 2048 else 'FAIL'}: blockwise T=8192 peak RSS {peak:,.0f} MiB (target < 2,048 MiB)")
        seconds = block[8192]["seconds"]
        print(f"{'PASS' if seconds < 300 else 'FAIL'}: blockwise T=8192 one window's paper statistics in {seconds:.0f} s (target < 300 s)")
    if 8192 in block and 4096 in block:
        growth = block[8192]["above_mib"] / max(block[4096]["above_mib"], 1e-9)
        print(f"{'PASS' if growth <= 4.5 else 'FAIL'}: memory above the model grows {growth:.2f}x from T=4096 to 8192 (target <= 4.5x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
