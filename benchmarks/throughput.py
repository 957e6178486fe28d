"""Throughput of attnsim against the plain forward pass of the same model on the same windows.

(a) plain: the model's forward pass with its fastest attention implementation
    (SDPA) and no capture, batch by batch under ``torch.inference_mode``.
(b) attnsim: a Lightning ``predict`` run with capture and every statistic of the
    experiment (its finding callbacks and the example recorder), exactly as
    ``attnsim run`` does it, but without figure rendering or MLflow logging,
    which are timed separately afterwards (against a temporary SQLite store).

(a) and (b) alternate over ``--rounds`` rounds (the order flips every round);
the medians give samples per second and the ratio b/a (attnsim's samples per
second over the plain pass's). Then, on the same windows, one pass times each
stage per batch (plain forward, attnsim's forward with attention probabilities,
capture, statistics; the rest of (b) is the Lightning loop, data loading and what the
stages cost more inside the loop, one after the other, than each timed alone).

For ``paper`` it finally runs ``attnsim run paper`` with its defaults (512 BBC
windows) in a fresh process and reports its seconds by stage and the share of figure
rendering and MLflow logging in its wall time (a figure, not a target: the figures' cost has its
own target, SmolLM2's figures at most 2x MiniLM's, in ``benchmarks/figures.py``).

Usage:
    python benchmarks/throughput.py                       # paper and csm, 512 BBC windows, CPU
    python benchmarks/throughput.py --device cuda --windows 4096
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from attnsim.workflows.startup import process_settings  # noqa: E402

PROCESS_SETTINGS = process_settings()  # those of `attnsim run`, made before torch loads

from _options import accelerator_override, add_model_options, device_name, load_average, model_overrides, positive, with_options  # noqa: E402  (benchmarks/, the script's folder)


def parse_options(argv=None) -> argparse.Namespace:
    """The command line and every experiment's config, checked before torch loads: a bad option is refused at once."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--windows", type=positive, default=512, help="BBC windows of the throughput rounds (default 512; the default paper run always has 512)"
    )
    parser.add_argument("--batch-size", type=positive, default=32, help="windows per batch (trainer.batch_size, default 32)")
    parser.add_argument("--rounds", type=positive, default=3, help="alternating rounds of (a) and (b); medians are reported")
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--threads", type=positive, default=None, help="torch threads (default: all cores)")
    parser.add_argument("--experiments", nargs="+", default=["paper", "csm"], help="experiments to time, in this order (default: paper csm)")
    add_model_options(parser)
    parser.add_argument("--no-profile", dest="profile", action="store_false", help="skip the per-stage profile")
    parser.add_argument("--no-full-run", dest="full_run", action="store_false", help="skip the complete default paper run")
    args = parser.parse_args(argv)
    from attnsim.config import load_config
    from attnsim.errors import AttnsimError

    for name in args.experiments:  # every experiment's config is checked before anything is measured
        try:
            cfg = load_config(name, [f"corpus.limit={args.windows}", f"trainer.batch_size={args.batch_size}", *model_overrides(args)])
        except AttnsimError as exc:
            parser.error(f"--experiments {name}: {exc}")
        if str(cfg.task) != "measure":
            parser.error(f"--experiments {name}: a fine-tuning experiment (task: {cfg.task}); this benchmark times measurement runs, e.g. paper or csm")
    return args


if __name__ == "__main__":
    OPTIONS = parse_options()

import torch  # noqa: E402

from attnsim.capture.hooks import forward_with_capture  # noqa: E402
from attnsim.capture.load import load_model  # noqa: E402
from attnsim.config import load_config  # noqa: E402
from attnsim.data.module import WindowDataModule, collate_windows  # noqa: E402
from attnsim.findings.examples import ExampleRecorder  # noqa: E402
from attnsim.stats.pairs.kernels import path_name as statistics_path  # noqa: E402
from attnsim.tracking.store import Tracker  # noqa: E402
from attnsim.workflows.kinds.base import make_capture_module, plain_module  # noqa: E402
from attnsim.workflows.loop import make_trainer  # noqa: E402
from attnsim.workflows.run import build_findings, log_results, prepare  # noqa: E402

# b/a targets on the AMD EPYC machine, by model: MiniLM at 512 windows, SmolLM2 at 128 tokens. csm at 0.92 is MiniLM's
# ceiling there (benchmarks/operations.py: the plain forward plus capture, the CSM product and the high pairs, each at
# its fastest); paper lower, as its statistics cost more (the attention entropy takes a logarithm per cell). On another
# CPU the target is 0.92 of the ceiling benchmarks/operations.py measures there in the same session.
TARGET_RATIOS = {"bundled": {"paper": 0.75, "csm": 0.92}, "smollm2": {"paper": 0.85, "csm": 0.92}}

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_child.py")  # one `attnsim run`, its timings and peak memory


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def batches(windows, batch_size: int) -> List[Dict]:
    return [collate_windows(list(enumerate(windows[i : i + batch_size]))) for i in range(0, len(windows), batch_size)]


def model_inputs(batch: Dict, device: str) -> Dict[str, torch.Tensor]:
    return {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device)}


def plain_pass(model, windows, batch_size: int, device: str) -> float:
    """Seconds for the plain forward pass over every window (batches collated as attnsim's loader does)."""
    sync(device)
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(windows), batch_size):
            model(**model_inputs(collate_windows(list(enumerate(windows[i : i + batch_size]))), device))
    sync(device)
    return time.perf_counter() - start


def attnsim_pass(prepared, model, path: str, device: str, windows=None):
    """Seconds for attnsim's predict run (capture + statistics) over ``windows`` (default: all), and its callbacks;
    ``model`` loaded for capture ``path`` (the run's, ``plain_module``)."""
    cfg = prepared.cfg
    findings = build_findings(prepared)
    recorder = ExampleRecorder(cfg.plots.examples, prepared.tokenizer) if cfg.plots.examples else None
    module = make_capture_module(model, prepared.info, any(f.needs_attention for f in findings), cfg, findings, path)
    trainer = make_trainer(cfg, list(findings) + ([recorder] if recorder else []))
    datamodule = WindowDataModule(windows if windows is not None else prepared.corpus.windows, cfg.trainer.batch_size, 0, prepared.corpus.unk_token_id)
    sync(device)
    start = time.perf_counter()
    trainer.predict(module, datamodule=datamodule, return_predictions=False)
    sync(device)
    return time.perf_counter() - start, findings, recorder, module


def stage_profile(prepared, plain, captured, path: str, device: str, batch_size: int) -> Dict[str, float]:
    """Median seconds per batch of each stage, measured batch by batch on the same windows."""
    cfg = prepared.cfg
    findings = build_findings(prepared)
    needs_attention = any(f.needs_attention for f in findings)
    module = make_capture_module(captured, prepared.info, needs_attention, cfg, findings, path).to(device)
    times: Dict[str, List[float]] = {"plain": [], "forward": [], "capture": [], "view": [], "updates": []}

    def timed(name: str, fn):
        sync(device)
        start = time.perf_counter()
        out = fn()
        sync(device)
        times[name].append(time.perf_counter() - start)
        return out

    with torch.inference_mode():
        for batch in batches(prepared.corpus.windows, batch_size):
            inputs = model_inputs(batch, device)
            on_device = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
            timed("plain", lambda: plain(**inputs))  # noqa: B023 - called at once, inside this iteration
            # attnsim's forward pass without hooks: eager attention when probabilities are needed
            timed("forward", lambda: captured(**inputs, output_attentions=needs_attention))  # noqa: B023 - called at once, inside this iteration
            arch, heads = prepared.info.arch, prepared.info.n_heads
            timed("capture", lambda: forward_with_capture(captured, arch, heads, inputs, needs_attention))  # noqa: B023 - called at once, inside this iteration
            # forward + capture again, and on the streamed path the attention walk folded into that forward pass
            view = timed("view", lambda: module.predict_step(on_device, 0))  # noqa: B023 - called at once, inside this iteration
            timed("updates", lambda: [finding.update(view) for finding in findings])  # noqa: B023 - called at once, inside this iteration
    medians = {name: statistics.median(values) for name, values in times.items()}
    # statistics: the findings' updates, and what the view's forward pass costs beyond the capture's (the streamed
    # attention walk; about 0 on the dense path, whose view is lazy)
    medians["statistics"] = medians.pop("updates") + max(0.0, medians.pop("view") - medians["capture"])
    medians["capture"] = max(0.0, medians["capture"] - medians["forward"])  # hooks and per-layer tensors only
    return medians


def full_default_run(experiment: str, device: str) -> dict:
    """``attnsim run EXPERIMENT`` with its defaults in a fresh process, logging to a temporary store."""
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{folder}/mlflow.db")
        Tracker(env["MLFLOW_TRACKING_URI"])  # the store's schema is created untimed, as a user's mlruns/ exists already
        args = [sys.executable, CHILD, experiment, "trainer.progress_bar=false", accelerator_override(device)]
        start = time.perf_counter()
        out = subprocess.run(args, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"attnsim run {experiment} failed ({out.returncode}):\n{out.stderr[-4000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    result["wall"] = wall
    return result


def bench(experiment: str, args) -> dict:
    overrides = [
        f"corpus.limit={args.windows}",
        f"trainer.batch_size={args.batch_size}",
        accelerator_override(args.device),
        "trainer.progress_bar=false",
        *model_overrides(args),
    ]
    cfg = load_config(experiment, overrides)
    prepared = prepare(cfg)
    windows = prepared.corpus.windows
    plain, _ = load_model(prepared.info, attn_implementation="sdpa", needs_attention=False)
    _, tags, captured = plain_module(prepared, build_findings(prepared))  # the model on the run's capture path
    plain.to(args.device)
    # warm-up of both sides on one batch (first-call allocations, Lightning's first setup)
    plain_pass(plain, windows[: args.batch_size], args.batch_size, args.device)
    path = tags["attnsim.capture_path"]
    attnsim_pass(prepared, captured, path, args.device, windows[: args.batch_size])
    plain_times, attnsim_times = [], []
    for round_index in range(args.rounds):
        order = ("plain", "attnsim") if round_index % 2 == 0 else ("attnsim", "plain")
        for side in order:
            if side == "plain":
                plain_times.append(plain_pass(plain, windows, args.batch_size, args.device))
            else:
                seconds, findings, recorder, module = attnsim_pass(prepared, captured, path, args.device)
                attnsim_times.append(seconds)
                forward_calls = module.forward_calls
    # summaries, logging and figures of the last attnsim round, timed apart
    with tempfile.TemporaryDirectory() as folder:
        tracker = Tracker(f"sqlite:///{folder}/mlflow.db")
        with tracker.run("benchmark") as sink:
            _, spent = log_results(sink, cfg, findings, recorder)
    profile = stage_profile(prepared, plain, captured.to(args.device), path, args.device, args.batch_size) if args.profile else {}
    a, b = statistics.median(plain_times), statistics.median(attnsim_times)
    n = len(windows)
    batch_count = -(-n // args.batch_size)
    if profile:
        profile["lightning"] = max(0.0, b / batch_count - profile["forward"] - profile["capture"] - profile["statistics"])
    return {
        "experiment": experiment,
        "model": prepared.info.name,
        "windows": n,
        "batches": batch_count,
        "attention": tags.get("attnsim.attn_implementation"),
        "capture_path": tags.get("attnsim.capture_path"),
        "plain_s": a,
        "attnsim_s": b,
        "plain_sps": n / a,
        "attnsim_sps": n / b,
        "ratio": a / b,
        "forward_calls": forward_calls,
        "summarise_s": spent["summarise"],
        "log_s": spent["log"],
        "figures_s": spent["figures"],
        "plain_rounds": plain_times,
        "attnsim_rounds": attnsim_times,
        "profile": profile,
    }


def print_profile(r: dict) -> None:
    p = r["profile"]
    per_batch = r["attnsim_s"] / r["batches"]
    print(f"\n{r['experiment']}: time per batch of {r['windows'] // r['batches'] if r['batches'] else 0} windows (medians; shares of (b))")
    print("| stage | s per batch | share of (b) |")
    print("| --- | --- | --- |")
    print(f"| (a) plain forward, SDPA | {p['plain']:.3f} | |")
    rows = [
        (f"forward pass ({r['attention']} attention)", p["forward"]),
        ("capture (hooks, per-layer tensors)", p["capture"]),
        ("statistics (window passes, accumulators)", p["statistics"]),
        ("the rest of (b): Lightning loop, data loading, and what the stages cost more in the loop than timed alone", p["lightning"]),
    ]
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} | {seconds / per_batch:.0%} |")
    print(f"| (b) total | {per_batch:.3f} | 100% |")
    print(f"| summarise, per run | {r['summarise_s']:.2f} | |")
    print(f"| MLflow logging, per run | {r['log_s']:.2f} | |")
    print(f"| figures, per run | {r['figures_s']:.2f} | |")


def main(argv=None) -> int:
    """Run the benchmark; ``argv``: the command line's arguments (a list), or options :func:`parse_options` already parsed."""
    args = argv if isinstance(argv, argparse.Namespace) else parse_options(argv)
    from attnsim.errors import AttnsimError
    from attnsim.quiet import quiet_libraries

    quiet_libraries()
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    load = load_average()
    rounds = f"{args.rounds} round{'s' if args.rounds != 1 else ''}"
    print(
        f"device {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}, {args.windows} windows, batch {args.batch_size}, {rounds}; statistics path {statistics_path()}; {PROCESS_SETTINGS}; load average {load:.2f} at start"
    )
    try:
        results = [bench(name, args) for name in args.experiments]
    except AttnsimError as exc:  # found once the model's config is read, e.g. a --seq-len longer than the model takes
        print(f"error: {with_options(str(exc))}", file=sys.stderr)
        return 2
    print()
    print(
        "| model | experiment | windows | attention (b) | plain samples/s (a) | attnsim samples/s (b) | ratio b/a | summarise s | logging s | figures s | ratio per round | T | capture path |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")  # new columns last: gpu_check.sh reads the first ones
    for r in results:
        per_round = [a / b for a, b in zip(r["plain_rounds"], r["attnsim_rounds"])]  # each round's pair, side by side in time
        print(
            f"| {r['model']} | {r['experiment']} | {r['windows']} | {r['attention']} | {r['plain_sps']:.1f} | {r['attnsim_sps']:.1f} | "
            f"{r['ratio']:.2f} | {r['summarise_s']:.2f} | {r['log_s']:.2f} | {r['figures_s']:.2f} | {min(per_round):.2f}–{max(per_round):.2f} | {args.seq_len} | {r['capture_path']} |"
        )
    for r in results:
        if r["profile"]:
            print_profile(r)
    print()
    for r in results:
        print(f"{r['experiment']}: plain rounds {[round(x, 2) for x in r['plain_rounds']]} s, attnsim rounds {[round(x, 2) for x in r['attnsim_rounds']]} s")
        print(f"{r['experiment']}: one forward pass per batch: {r['forward_calls']} calls for {r['batches']} batches")
        target = TARGET_RATIOS.get(args.model, {}).get(r["experiment"]) if args.seq_len == 128 else None
        if target is not None:
            print(f"target {r['experiment']} ratio b/a >= {target}: {r['ratio']:.2f} -> {'PASS' if r['ratio'] >= target else 'FAIL'}")
    if args.full_run and "paper" in args.experiments and args.model == "bundled" and args.seq_len == 128:  # the default run is MiniLM at 128
        full = full_default_run("paper", args.device)
        t = full["timings"]
        output = t.get("log", 0.0) + t.get("figures", 0.0)
        share = output / full["wall"]
        stages = {"imports": full["imports"], **{k: v for k, v in t.items() if k not in ("total", "unattributed")}}
        outside = full["wall"] - full["imports"] - t.get("total", 0.0)
        print(
            f"\ndefault `attnsim run paper` ({full['windows']} windows), fresh process: {full['wall']:.1f} s wall, "
            f"peak RSS {full['peak_mib']:.0f} MiB; seconds by stage (zz_run/time_*):\n  "
            + ", ".join(f"{name} {seconds:.2f}" for name, seconds in stages.items())
            + f",\n  unattributed within the run {t.get('unattributed', 0):.2f}, outside it (interpreter start, ending the run, exit) {outside:.2f}"
        )
        print(
            f"MLflow logging + figures in a default paper run: {output:.2f} s = {share:.1%} of its wall time (no target: benchmarks/figures.py judges the figures)"
        )
        print(f"  (the same share of the run without interpreter start-up and imports: {output / full['run']:.1%})")
    load = load_average()
    print(f"load average {load:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main(OPTIONS))
