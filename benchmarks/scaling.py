"""Scaling out: one run in 1 against 2 processes, and logging to SQLite against a server.

(a) ``attnsim run EXPERIMENT`` on the same ``--windows`` windows in one process
    (``trainer.devices=1``) and in two (``trainer.devices=2 trainer.strategy=ddp``,
    CPU/gloo, or one GPU each with ``--device cuda``), each in a fresh process
    logging to its own experiment of a temporary SQLite store (no figures). Reported:
    wall time, the predict time, the overhead of the 2-process run against the
    1-process one (wall time minus wall time: process start-up, process group set-up
    and the reduction of the accumulators; the reduction alone when the run logs a
    timing named ``*reduce*`` or ``*sync*``), the number of runs the 2-process run
    created (must be 1) and the largest relative difference of its metrics from the
    1-process run's (must be <= 1e-6). On 2 CPU cores no speed-up is expected; the
    point is exactness and cost. When this checkout has no ``trainer.strategy`` (no
    DDP support), the row says "not available: needs the DDP change".
(b) a default ``attnsim run paper`` on ``--windows`` windows, logged to a temporary
    SQLite store and, with ``--server-uri http://host:port``, to that MLflow server:
    the run's logging and figure (draw + upload) seconds and its wall time. Without
    ``--server-uri`` that row is printed as skipped, with why.

Usage:
    python benchmarks/scaling.py                                   # 512 windows, CPU
    python benchmarks/scaling.py --windows 64 --server-uri http://127.0.0.1:5000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional
from urllib.parse import urlparse

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _options import accelerator_override, device_name, load_average, positive  # noqa: E402  (benchmarks/, the script's folder)

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_child.py")  # one `attnsim run`, its timings
TOLERANCE = 1e-6
NO_DDP = "not available: needs the DDP change (trainer.strategy)"


def server_uri(text: str) -> str:
    """argparse type: an MLflow tracking server's ``http(s)://host:port``."""
    parsed = urlparse(text)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a tracking server URI; give http://host:port (e.g. http://127.0.0.1:5000, started by `mlflow server`)"
        )
    return text


def child_run(experiment: str, overrides: List[str], uri: str, cwd: str) -> Dict:
    """``attnsim run EXPERIMENT OVERRIDES`` in a fresh process logging to ``uri``: its RESULT line and wall seconds."""
    env = dict(os.environ, MLFLOW_TRACKING_URI=uri)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, CHILD, experiment, *overrides], capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"attnsim run {experiment} {' '.join(overrides)} failed ({out.returncode}):\n{out.stderr[-4000:]}")
    result = json.loads(lines[0][len("RESULT ") :])  # rank 0's line comes first; other ranks may print theirs too
    result["wall"] = wall
    return result


def logged_runs(uri: str, experiment: str) -> list:
    """The runs of MLflow experiment ``experiment`` in the store ``uri``."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id]) if found is not None else []


def statistics_of(run) -> Dict[str, float]:
    """A run's metrics but attnsim's own bookkeeping (``zz_run/...``: timings, windows)."""
    from attnsim.tracking.sink import run_key

    return {k: v for k, v in run.data.metrics.items() if not k.startswith(run_key(""))}


def max_relative_difference(a: Dict[str, float], b: Dict[str, float]) -> float:
    """Largest |a - b| / max(|a|, 1e-12) over the keys of both (inf when the key sets differ; NaN == NaN)."""
    import math

    if a.keys() != b.keys():
        return math.inf
    worst = 0.0
    for key, x in a.items():
        y = b[key]
        if math.isnan(x) and math.isnan(y):
            continue
        worst = max(worst, abs(x - y) / max(abs(x), 1e-12))
    return worst


def ddp_available(experiment: str) -> bool:
    """Whether this checkout's config knows ``trainer.strategy`` (Lightning DDP, ``trainer.strategy=ddp``)."""
    from attnsim.config import load_config
    from attnsim.errors import ConfigError

    try:
        load_config(experiment, ["trainer.strategy=ddp"])
    except ConfigError:
        return False
    return True


def processes_rows(args: argparse.Namespace, folder: str) -> List[str]:
    """Rows of table (a): 1 process, then 2 processes (or why not)."""
    uri = f"sqlite:///{folder}/mlflow.db"
    common = [
        f"corpus.limit={args.windows}",
        f"trainer.batch_size={args.batch_size}",
        "trainer.progress_bar=false",
        "tracking.figures=false",
        "plots.examples=0",
        accelerator_override(args.device),
    ]
    one = child_run(args.experiment, [*common, "trainer.devices=1", "tracking.experiment=scaling-1"], uri, folder)
    (run1,) = logged_runs(uri, "scaling-1")
    rows = [f"| {args.experiment} | {one['windows']} | 1 | {one['wall']:.1f} | {one['timings']['predict']:.1f} | - | - | 1 | - |"]
    if not ddp_available(args.experiment):
        rows.append(f"| {args.experiment} | {args.windows} | 2 | {NO_DDP} | | | | | |")
        return rows
    two = child_run(args.experiment, [*common, "trainer.devices=2", "trainer.strategy=ddp", "tracking.experiment=scaling-2"], uri, folder)
    runs2 = logged_runs(uri, "scaling-2")
    reduce = [v for k, v in two["timings"].items() if "reduce" in k or "sync" in k]
    reduce_text = f"{sum(reduce):.2f}" if reduce else "not logged"
    difference = max_relative_difference(statistics_of(run1), statistics_of(runs2[0])) if len(runs2) == 1 else float("nan")
    rows.append(
        f"| {args.experiment} | {two['windows']} | 2 | {two['wall']:.1f} | {two['timings']['predict']:.1f} | {two['wall'] - one['wall']:+.1f} | "
        f"{reduce_text} | {len(runs2)} | {difference:.1e} |"
    )
    return rows


def logging_rows(args: argparse.Namespace, folder: str) -> List[str]:
    """Rows of table (b): a default ``paper`` run logged to SQLite, then to the server (or why not)."""
    overrides = [f"corpus.limit={args.windows}", "trainer.progress_bar=false", accelerator_override(args.device)]
    stores = [("SQLite (file)", f"sqlite:///{folder}/paper.db", "scaling-paper")]
    rows = []
    if args.server_uri:
        stores.append((f"server {args.server_uri}", args.server_uri, f"scaling-paper-{os.getpid()}"))
    for label, uri, experiment in stores:
        r = child_run("paper", [*overrides, f"tracking.experiment={experiment}"], uri, folder)
        t = r["timings"]
        rows.append(f"| {label} | {r['windows']} | {t['log']:.2f} | {t['figures']:.2f} | {t['log'] + t['figures']:.2f} | {r['wall']:.1f} |")
    if not args.server_uri:
        rows.append("| server | skipped: no --server-uri given (start `mlflow server` on PostgreSQL, then pass --server-uri http://host:port) | | | | |")
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=positive, default=512, help="windows of every run (corpus.limit; default 512)")
    parser.add_argument("--batch-size", type=positive, default=16, help="trainer.batch_size of the 1- and 2-process runs (default 16)")
    parser.add_argument("--experiment", default="csm", help="experiment of the 1- and 2-process runs (default csm)")
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu or cuda (2 processes: one GPU each)")
    parser.add_argument(
        "--server-uri",
        type=server_uri,
        default=None,
        metavar="URI",
        help="an MLflow tracking server (http://host:port) to time the paper run's logging against",
    )
    parser.add_argument("--no-logging", dest="logging", action="store_false", help="skip the paper run's logging rows")
    args = parser.parse_args(argv)
    from attnsim.config import load_config
    from attnsim.errors import AttnsimError

    for name, overrides in (
        (args.experiment, [f"corpus.limit={args.windows}", f"trainer.batch_size={args.batch_size}"]),
        ("paper", [f"corpus.limit={args.windows}"]),
    ):
        try:  # checked before anything is measured
            load_config(name, overrides)
        except AttnsimError as exc:
            parser.error(f"{name}: {exc}")
    load = load_average()
    print(f"device {args.device}, {os.cpu_count()} CPU cores, {args.windows} windows; load average {load:.2f} at start")
    with tempfile.TemporaryDirectory() as folder:
        print("\n(a) one run in 1 against 2 processes (no figures)\n")
        print("| experiment | windows | processes | wall s | predict s | overhead vs 1 process s | reduction s | MLflow runs | max rel. diff of metrics |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for row in processes_rows(args, folder):
            print(row)
        if args.logging:
            print("\n(b) logging of a default `paper` run (metrics, tables; figures drawn and uploaded)\n")
            print("| tracking store | windows | logging s | figures s | logging + figures s | wall s |")
            print("| --- | --- | --- | --- | --- | --- |")
            for row in logging_rows(args, folder):
                print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
