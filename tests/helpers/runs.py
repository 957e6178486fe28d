"""Runs: reading a store, overrides of short runs, runs in child processes, runs logged by hand."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
from mlflow import MlflowClient

import attnsim
from attnsim.analysis.runs import LoggedRun
from attnsim.tracking.store import Tracker
from tests.helpers.paths import ROOT

SWEEP = ["corpus.seq_len=32", "corpus.limit=8", "trainer.progress_bar=false", "tracking.figures=false", "plots.examples=0"]  # overrides of a short sweep

HEAVY = ("torch", "matplotlib", "transformers", "mlflow", "pytorch_lightning", "pandas")


def runs_of(uri: str):
    """All runs in every experiment of a store."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return client, (client.search_runs(ids) if ids else [])


def tiny_fit(model, checkpoint_dir, steps=4, every=2):
    """Overrides for a fit of a few seconds: tiny model, 24 windows of 32 tokens, batches of 4."""
    return [
        f"model.path={model}",
        "corpus.seq_len=32",
        "corpus.limit=24",
        "trainer.batch_size=4",
        f"trainer.max_steps={steps}",
        f"checkpoint.every_n_steps={every}",
        f"trainer.val_every_n_steps={every}",
        "trainer.val_limit=8",
        "trainer.warmup_steps=1",
        "trainer.progress_bar=false",
        f"checkpoint.dir={checkpoint_dir}",
    ]


def slow_run(tracking_uri: str, tiny_bert: Path, text_dir: Path, tmp_path: Path) -> subprocess.Popen:
    """`attnsim run csm` in a child process whose finding prints "batch" and sleeps 0.3 s per batch (time to signal it)."""
    script = tmp_path / "slow_run.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, time
        from attnsim.findings import registry
        from attnsim.findings.csm import CSMFinding

        class Slow(CSMFinding):
            name = "slow"
            def update(self, view):
                print("batch", flush=True)
                time.sleep(0.3)
                super().update(view)

        registry.FINDINGS["slow"] = Slow
        from attnsim.cli import main
        sys.exit(main(["run", "csm", "model.path={tiny_bert}", "corpus=text", "corpus.path={text_dir}", "corpus.seq_len=16",
                       "trainer.batch_size=1", "tracking.figures=false", "plots.examples=0", "findings=[slow]", "trainer.progress_bar=false"]))
    """)
    )
    env = dict(os.environ, MLFLOW_TRACKING_URI=tracking_uri, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)


def fresh(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter that imports this checkout of attnsim."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


def heavy_after(call: str) -> tuple:
    """(stdout lines of ``call`` in a fresh interpreter, heavy modules it imported, its stderr)."""
    code = f"import sys, json\n{call}\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    proc = fresh(code)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    return lines[:-1], json.loads(lines[-1]), proc.stderr


def fake_compare_run(
    tracker: Tracker,
    name: str,
    values: dict,
    seq_len: int = 128,
    top_fraction: float = 0.02,
    status: str = "FINISHED",
    kind: str | None = None,
    experiment: str | None = None,
    parent: str | None = None,
    step: int | None = None,
    corpus: str = "bbc",
) -> str:
    """A run with csm layer/model means ``values = {stat: [layer values]}`` and attnsim's comparability tags."""
    tags = {
        "attnsim.seq_len": str(seq_len),
        "attnsim.stats_definition": attnsim.STATS_VERSION,
        "attnsim.model": f"model-{name}",
        "attnsim.corpus": corpus,
        "attnsim.windows": "8",
        "attnsim.capture_path": "dense",
        "attnsim.statistics_path": "compiled",
    }
    if kind:
        tags["attnsim.kind"] = kind
    if step is not None:
        tags["attnsim.global_step"] = str(step)
    run = tracker.client.create_run(
        tracker.experiment_id(experiment or tracker.test_experiment), run_name=name, tags={**tags, **({"mlflow.parentRunId": parent} if parent else {})}
    )
    run_id = run.info.run_id
    params = {
        "findings": "csm",
        "stats.high_rule": "top_fraction",
        "stats.top_fraction": str(top_fraction),
        "stats.include_special": "True",
        "stats.normalise": "none",
        "stats.short_range": "4",
    }
    for key, value in params.items():
        tracker.client.log_param(run_id, key, value)
    for stat, layers in values.items():
        for layer, value in enumerate(layers):
            tracker.client.log_metric(run_id, f"csm/{stat}/L{layer:02d}", value)
            tracker.client.log_metric(run_id, f"csm/{stat}/L{layer:02d}/H00", value)  # per-head: not in the table
        tracker.client.log_metric(run_id, f"csm/{stat}", sum(layers) / len(layers))
    tracker.client.log_metric(run_id, "zz_run/windows", 8.0)
    tracker.client.set_terminated(run_id, status)
    return run_id


def fake_report_run(control: bool = False) -> LoggedRun:
    """Three layers, values chosen so that each claim's verdict is known."""
    m = {}

    def layer(stat, values):
        for index, value in enumerate(values):
            m[f"{stat}/L{index:02d}"] = value

    layer("distance/long_range_share", [0.5, 0.2, 0.3])  # early 0.5 >= chance 0.25 and > middle 0.2: holds
    layer("distance/long_range_share_chance", [0.25] * 3)
    layer("distance/short_range_share", [0.1, 0.3, 0.2])  # middle 0.3 > chance 0.05, > 0.1 and 0.2: holds
    layer("distance/short_range_share_chance", [0.05] * 3)
    layer("sentences/same_sentence_share", [0.3, 0.4, 0.1])  # final 0.1 < chance 0.2 (a no)
    layer("sentences/same_sentence_share_chance", [0.2] * 3)
    layer("sentences/boundary_contrast", [1.0, 1.1, 1.2])  # (b) yes
    layer("sentences/within_sentence_spread", [0.9, 0.7, 0.8])  # (c) final 0.8 > middle 0.7: yes -> mixed
    layer("sentences/same_sentence_ratio", [1.5, 2.0, 0.5])  # +50%, +100%, -50%: mixed
    layer("sentences/same_sentence_preference", [0.1, 0.2, -0.1])
    layer("separators/attention_separators", [0.3, 0.2, 0.1])  # final 0.1 < 2 * 0.1 and < early: does not hold
    layer("separators/attention_separators_chance", [0.1] * 3)
    layer("anchors/distinct_anchors", [4, 3, 2])  # of 4 heads: layer 2 has 2 >= 2: (a) yes
    layer("anchors/anchor_consistency", [0.3, 0.3, 0.3])  # (b) yes -> holds
    tags = {
        "attnsim.control": "random" if control else "none",
        "attnsim.model": "fake",
        "attnsim.windows": "10",
        "attnsim.corpus_hash": "ab" * 32,
        "attnsim.experiment": "paper",
    }
    run = LoggedRun("f" * 32 if control else "e" * 32, "paper", "FINISHED", "0", tags=tags, metrics=m)
    heads = pd.DataFrame({"layer": [0, 0, 1, 1, 2, 2, 2, 2], "head": [0, 1, 0, 1, 0, 1, 2, 3]})
    run._tables["anchors"] = heads
    repetition = heads.assign(
        repetition_score=[1.0, 2.0, 12.0, 3.0, 1.0, math.nan, 40.0, 1.0], long_identical_high_share=[0.0, 0.1, 0.2, 0.1, 0.0, math.nan, 0.7, 0.0]
    )
    run._tables["repetition"] = repetition  # L2H2 scores 40 with 70% of long identical pairs high: holds
    return run


def children_of(client: MlflowClient, parent) -> list:
    """The child runs of a sweep's parent run."""
    return client.search_runs([parent.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
