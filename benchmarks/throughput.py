"""Throughput of attnsim against the plain forward pass of the same model on the same windows.

(a) plain: the model's forward pass with its fastest attention implementation
    (SDPA) and no capture, batch by batch under ``torch.inference_mode``.
(b) attnsim: a Lightning ``predict`` run with capture and every statistic of the
    experiment (its finding callbacks), exactly as ``attnsim run`` does it,
    but without figure rendering or MLflow logging, which are timed separately
    afterwards (against a temporary SQLite store).

(a) and (b) alternate over ``--rounds`` rounds; the medians give samples per
second and the ratio b/a (speed of attnsim relative to the plain pass).

Usage:
    python benchmarks/throughput.py                       # paper and csm, 512 BBC windows, CPU
    python benchmarks/throughput.py --device cuda --windows 4096
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from attnsim.capture.load import load_model  # noqa: E402
from attnsim.capture.module import CaptureModule  # noqa: E402
from attnsim.config import load_config  # noqa: E402
from attnsim.data.module import WindowDataModule, collate_windows  # noqa: E402
from attnsim.runner import build_findings, log_results, make_trainer, prepare  # noqa: E402
from attnsim.tracking.store import Tracker  # noqa: E402

TARGET_RATIO = 0.75
TARGET_OUTPUT_SHARE = 0.10


def plain_pass(model, windows, batch_size: int, device: str) -> float:
    """Seconds for the plain forward pass over every window."""
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(windows), batch_size):
            batch = collate_windows(list(enumerate(windows[i : i + batch_size])))
            model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def attnsim_pass(prepared, model, device: str):
    """Seconds for attnsim's predict run (capture + statistics), and its findings."""
    cfg = prepared.cfg
    findings = build_findings(prepared)
    module = CaptureModule(model, prepared.info, any(f.needs_attention for f in findings), cfg.model.vector, cfg.stats)
    trainer = make_trainer(cfg, list(findings))
    datamodule = WindowDataModule(prepared.corpus.windows, cfg.trainer.batch_size, 0)
    start = time.perf_counter()
    trainer.predict(module, datamodule=datamodule, return_predictions=False)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, findings, module


def bench(experiment: str, args) -> dict:
    accelerator = "gpu" if args.device.startswith("cuda") else "cpu"
    overrides = [f"corpus.limit={args.windows}", f"trainer.batch_size={args.batch_size}", f"trainer.accelerator={accelerator}", "trainer.progress_bar=false"]
    cfg = load_config(experiment, overrides)
    prepared = prepare(cfg)
    windows = prepared.corpus.windows
    findings = build_findings(prepared)
    needs_attention = any(f.needs_attention for f in findings)
    plain, _ = load_model(prepared.info, attn_implementation="sdpa", needs_attention=False)
    captured, tags = load_model(prepared.info, attn_implementation=cfg.model.attn_implementation, needs_attention=needs_attention)
    plain.to(args.device)
    plain_times, attnsim_times = [], []
    plain_pass(plain, windows[: args.batch_size], args.batch_size, args.device)  # warm-up
    for _ in range(args.rounds):
        plain_times.append(plain_pass(plain, windows, args.batch_size, args.device))
        seconds, findings, module = attnsim_pass(prepared, captured, args.device)
        attnsim_times.append(seconds)
    # summaries, logging and figures of the last attnsim round, timed apart
    with tempfile.TemporaryDirectory() as folder:
        tracker = Tracker(f"sqlite:///{folder}/mlflow.db")
        with tracker.run("benchmark") as sink:
            _, spent = log_results(sink, cfg, findings, None)
    a, b = statistics.median(plain_times), statistics.median(attnsim_times)
    n = len(windows)
    return {
        "experiment": experiment,
        "model": prepared.info.name,
        "windows": n,
        "attention": tags.get("attnsim.attn_implementation"),
        "plain_s": a,
        "attnsim_s": b,
        "plain_sps": n / a,
        "attnsim_sps": n / b,
        "ratio": a / b,
        "forward_calls": module.forward_calls,
        "summarise_s": spent["summarise"],
        "log_s": spent["log"],
        "figures_s": spent["figures"],
        "plain_rounds": plain_times,
        "attnsim_rounds": attnsim_times,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    parser.add_argument("--experiments", nargs="+", default=["paper", "csm"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    print(f"device {args.device}, torch threads {torch.get_num_threads()}, {args.windows} windows, batch {args.batch_size}, {args.rounds} rounds")
    results = [bench(name, args) for name in args.experiments]
    print()
    print("| experiment | model | windows | attention | plain samples/s | attnsim samples/s | ratio b/a | summarise s | logging s | figures s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(
            f"| {r['experiment']} | {r['model']} | {r['windows']} | {r['attention']} | {r['plain_sps']:.1f} | {r['attnsim_sps']:.1f} | "
            f"{r['ratio']:.2f} | {r['summarise_s']:.2f} | {r['log_s']:.2f} | {r['figures_s']:.2f} |"
        )
    print()
    ok = True
    for r in results:
        print(f"{r['experiment']}: plain rounds {[round(x, 2) for x in r['plain_rounds']]} s, attnsim rounds {[round(x, 2) for x in r['attnsim_rounds']]} s")
        if r["experiment"] == "paper":
            passed = r["ratio"] >= TARGET_RATIO
            ok &= passed
            print(f"target paper ratio b/a >= {TARGET_RATIO}: {r['ratio']:.2f} -> {'PASS' if passed else 'FAIL'}")
            output = r["log_s"] + r["figures_s"] + r["summarise_s"]
            share = output / (output + r["attnsim_s"])
            passed = share < TARGET_OUTPUT_SHARE
            ok &= passed
            print(f"target logging + figures < {TARGET_OUTPUT_SHARE:.0%} of the run: {share:.1%} -> {'PASS' if passed else 'FAIL'}")
        print(f"{r['experiment']}: one forward pass per batch: {r['forward_calls']} calls for {-(-r['windows'] // args.batch_size)} batches")
    print(f"overall: {'PASS' if ok else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
