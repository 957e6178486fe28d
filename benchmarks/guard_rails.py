"""Numbers that a refactoring must not move: every metric and table of fixed runs, saved and compared.

Runs, in one temporary tracking store, on fixed windows (no shuffling, seeded models):

- ``paper`` and ``csm`` on the bundled MiniLM, a tiny GPT-2 and a tiny grouped-query Llama (2 key/value heads),
  each on the dense, the streamed and the blockwise capture path (``csm`` reads no attention: its streamed run is
  its dense one under another name);
- ``induction`` on the tiny GPT-2 and the tiny Llama (dense: it has no blockwise form);
- ``alignment`` on a tiny T5 (its cross-attention is captured dense).

The tiny models are the tests' seeded models (``tests/tiny_models.py``), built here in a temporary folder.
Every run's final metrics and every CSV/JSON table it logged are written to one JSON snapshot.

Usage:
    python benchmarks/guard_rails.py --save before.json          # on the code before the change
    python benchmarks/guard_rails.py --compare before.json       # after it: prints every difference

``--compare`` exits 1 when a metric or table cell differs by more than ``--rtol`` (default 1e-7) relative,
when a key or table is missing on either side, or when a non-numeric cell (a token, a pair's positions)
differs at all; it prints the largest relative difference found.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TIMINGS = ("zz_run/",)  # the run's own timings and memory: they move from run to run
# the comparison series repeat logged values at MLflow steps = heads or layers (attnsim.tracking.summaries.comparison_series);
# a run's final metrics hold only their last step, and their values are compared under their own keys
VIEWS = ("0_heads/", "0_layers/")

TEXT_RUNS = [("paper", "bbc"), ("csm", "bbc")]


def plan(models):
    """(name, experiment, overrides) of every run; ``models`` maps a short name to its ``model.path``."""
    runs = []
    for model in ("minilm", "gpt2", "llama"):
        for experiment, _corpus in TEXT_RUNS:
            for path in ("dense", "streamed", "blockwise"):
                runs.append(
                    (
                        f"{experiment}-{model}-{path}",
                        experiment,
                        [f"model.path={models[model]}", "corpus.limit=6", "corpus.seq_len=96", f"capture.path={path}", "trainer.batch_size=3"],
                    )
                )
    for model in ("gpt2", "llama"):  # induction has no blockwise form
        runs.append((f"induction-{model}", "induction", [f"model.path={models[model]}", "corpus.limit=6", "trainer.batch_size=3"]))
    runs.append(("alignment-t5", "alignment", [f"model.path={models['t5']}", "corpus.limit=6", "trainer.batch_size=3"]))
    return runs


def _tables(client, run_id):
    """Every CSV and JSON artifact of a run: {path: rows (CSV, as lists of strings) or parsed JSON}."""
    out = {}

    def walk(folder):
        for item in client.list_artifacts(run_id, folder):
            if item.is_dir:
                walk(item.path)
            elif item.path.endswith((".csv", ".json")):
                local = client.download_artifacts(run_id, item.path)
                text = Path(local).read_text(encoding="utf-8")
                out[item.path] = list(csv.reader(io.StringIO(text))) if item.path.endswith(".csv") else json.loads(text)

    walk(None)
    return out


def snapshot(models):
    """Run every planned run; return {run name: {"metrics": {...}, "tables": {...}}}."""
    from mlflow.tracking import MlflowClient

    import attnsim

    out = {}
    with tempfile.TemporaryDirectory() as folder:
        uri = f"sqlite:///{folder}/mlflow.db"
        quiet = ["trainer.progress_bar=false", "tracking.figures=false", "plots.explorer=false", f"tracking.uri={uri}", "tracking.experiment=guard_rails"]
        client = MlflowClient(uri)
        for name, experiment, overrides in plan(models):
            started = time.perf_counter()
            result = attnsim.run(experiment, overrides + quiet)
            run = client.get_run(result.run_id)
            metrics = {key: value for key, value in run.data.metrics.items() if not key.startswith(TIMINGS + VIEWS)}
            out[name] = {"metrics": metrics, "tables": _tables(client, result.run_id)}
            print(f"{name:32s} {len(run.data.metrics):5d} metrics {len(out[name]['tables']):3d} tables {time.perf_counter() - started:6.1f} s", flush=True)
    return out


def build_models(folder: Path):
    """The seeded tiny models (GPT-2, grouped-query Llama, T5) and the bundled MiniLM: {name: model.path}."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers.tiny_models import save_tiny

    return {
        "minilm": "bundled",
        "gpt2": str(save_tiny(folder / "gpt2", "gpt2")),
        "llama": str(save_tiny(folder / "llama", "llama")),
        "t5": str(save_tiny(folder / "t5", "t5")),
    }


def _number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _relative(a: float, b: float) -> float:
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    if math.isinf(a) or math.isinf(b) or math.isnan(a) or math.isnan(b):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def differences(before, after, rtol):
    """Every difference between two snapshots beyond ``rtol``: (where, before, after, relative); and the
    largest relative difference among numbers."""
    found, largest = [], 0.0

    def compare(where, a, b):
        nonlocal largest
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                if key not in a or key not in b:
                    found.append(
                        (f"{where}/{key}", a.get(key, "<missing>") if key in a else "<missing>", b.get(key, "<missing>") if key in b else "<missing>", math.inf)
                    )
                else:
                    compare(f"{where}/{key}", a[key], b[key])
            return
        if isinstance(a, list) and isinstance(b, list):
            if len(a) != len(b):
                found.append((f"{where} (length)", len(a), len(b), math.inf))
                return
            for i, (x, y) in enumerate(zip(a, b)):
                compare(f"{where}[{i}]", x, y)
            return
        x, y = (a if isinstance(a, (int, float)) else _number(a)), (b if isinstance(b, (int, float)) else _number(b))
        if x is not None and y is not None and not isinstance(a, bool):
            rel = _relative(float(x), float(y))
            largest = max(largest, rel) if rel != math.inf else largest
            if rel > rtol:
                found.append((where, a, b, rel))
        elif a != b:
            found.append((where, a, b, math.inf))

    compare("", before, after)
    return found, largest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path, help="write the snapshot to this JSON file")
    group.add_argument("--compare", type=Path, help="compare with this saved snapshot")
    parser.add_argument("--rtol", type=float, default=1e-7, help="largest relative difference allowed (default 1e-7)")
    args = parser.parse_args(argv)
    if args.compare is not None and not args.compare.is_file():
        parser.error(f"{args.compare}: no such snapshot; write one first with --save")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        now = snapshot(build_models(Path(folder)))
    print(f"{len(now)} runs in {time.perf_counter() - started:.0f} s")
    if args.save is not None:
        args.save.write_text(json.dumps(now, indent=1, sort_keys=True), encoding="utf-8")
        print(f"saved {args.save}")
        return 0
    before = json.loads(args.compare.read_text(encoding="utf-8"))
    found, largest = differences(before, now, args.rtol)
    metrics = sum(len(run["metrics"]) for run in now.values())
    cells = sum(
        len(row) if isinstance(row, list) else 1
        for run in now.values()
        for table in run["tables"].values()
        for row in (table if isinstance(table, list) else [table])
    )
    print(f"compared {metrics} metrics and {cells} table cells of {len(now)} runs; largest relative difference {largest:.3g}")
    for where, a, b, rel in found[:50]:
        print(f"  DIFFERS {where}: {a!r} -> {b!r} (relative {rel:.3g})")
    if len(found) > 50:
        print(f"  ... and {len(found) - 50} more")
    print("PASS" if not found else f"FAIL: {len(found)} differences beyond {args.rtol:g}")
    return 0 if not found else 1


if __name__ == "__main__":
    sys.exit(main())
