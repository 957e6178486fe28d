"""The figures stage of the same experiment on a deep model (SmolLM2, 30 layers x 9 heads) and on MiniLM (6 x 12).

A run's figures should cost about the same whatever the model's depth: per-layer figures are drawn for
the layers :func:`attnsim.plots.layers.shown_layers` selects, and every-head figures are one image. The
target: the figures of the SmolLM2 run take at most twice those of the MiniLM run, for ``csm`` and ``paper``.

For each experiment (default ``csm`` and ``paper``), ``--rounds`` rounds each run ``attnsim run EXPERIMENT``
(the command line, as a user runs it) on both models over the same ``--windows`` BBC windows of
``--seq-len`` tokens, alternating which model goes first. The figures stage is read back from the run
(``zz_run/time_figures``: drawing, PNG encoding, MLflow upload and explorer.html, less the metrics and
tables logged while the figures were drawn). Prints each run, then one table row per experiment: the
medians of both models, their ratio (median of the rounds' ratios, with its range) and PASS/FAIL
against the target; exits 0 either way.

Usage:
    python benchmarks/figures.py                          # csm and paper, 64 windows of 128 tokens, 3 rounds
    python benchmarks/figures.py --experiments csm --rounds 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List

from _options import load_average, positive  # benchmarks/, the script's folder
from end_to_end import run_metrics, timed  # benchmarks/, the script's folder

TARGET = 2.0  # SmolLM2's figures stage at most this many times MiniLM's
MODELS = (("MiniLM", "bundled"), ("SmolLM2", "smollm2"))


def command(experiment: str, model: str, args, uri: str) -> List[str]:
    overrides = [
        f"model.path={model}",
        f"corpus.limit={args.windows}",
        f"corpus.seq_len={args.seq_len}",
        f"trainer.batch_size={args.batch_size}",
        "trainer.threads=2",
        "trainer.progress_bar=false",
    ]
    return [sys.executable, "-m", "attnsim.cli", "run", experiment, *overrides, "--uri", uri]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiments", nargs="+", default=["csm", "paper"])
    parser.add_argument("--windows", type=positive, default=64, help="BBC windows of every run (default 64)")
    parser.add_argument("--seq-len", type=positive, default=128, help="tokens per window (default 128)")
    parser.add_argument("--batch-size", type=positive, default=16)
    parser.add_argument("--rounds", type=positive, default=3, help="rounds of one run per model, alternating which goes first (default 3)")
    args = parser.parse_args(argv)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        uri = f"sqlite:///{folder}/mlflow.db"
        # the store's schema and SmolLM2's conversion (cached) before anything is timed
        warm = "import sys\nfrom attnsim.tracking.store import Tracker\nfrom attnsim.capture.load import resolve_model_path\n"
        warm += f"Tracker({uri!r})\nresolve_model_path('smollm2')\n"
        out = subprocess.run([sys.executable, "-c", warm], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            raise SystemExit(out.stderr[-3000:])
        print(f"{args.windows} BBC windows of {args.seq_len} tokens, {args.rounds} round(s); load average {load_average():.2f} at start", flush=True)
        for experiment in args.experiments:
            seconds: Dict[str, List[float]] = {name: [] for name, _ in MODELS}
            for round_ in range(args.rounds):
                for name, model in MODELS if round_ % 2 == 0 else MODELS[::-1]:
                    result = timed(command(experiment, model, args, uri), env)
                    run_id = next(line.split()[2] for line in result["stdout"].splitlines() if line.startswith("run id: "))
                    figures = run_metrics(uri, run_id, env)["figures"]
                    seconds[name].append(figures)
                    print(f"  {experiment} {name}: figures {figures:.2f} s (run {result['wall']:.1f} s wall); load {load_average():.2f}", flush=True)
            ratios = [deep / shallow for shallow, deep in zip(seconds["MiniLM"], seconds["SmolLM2"])]
            rows.append((experiment, seconds, ratios))
    print("\n| experiment | MiniLM figures s (median, range) | SmolLM2 figures s (median, range) | ratio (median, range) | target |")
    print("| --- | --- | --- | --- | --- |")
    for experiment, seconds, ratios in rows:
        cells = [f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for v in (seconds["MiniLM"], seconds["SmolLM2"])]
        ratio = statistics.median(ratios)
        verdict = "PASS" if ratio <= TARGET else "FAIL"
        print(f"| {experiment} | {cells[0]} | {cells[1]} | {ratio:.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | <= {TARGET:.0f}: {verdict} |")
    print(f"load average {load_average():.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
