"""End to end: `attnsim run paper` on a tiny model: one forward pass per batch feeds every finding,
and every finding's statistics are logged for every layer and head."""

from __future__ import annotations

import fnmatch
import io
import re

import pandas as pd
import pytest

import attnsim.capture.module as capture_module
import attnsim.workflows.run as runner
from attnsim.analysis.runs import LoggedRun
from attnsim.capture.module import CaptureModule
from attnsim.config import load_config
from attnsim.findings.registry import FINDINGS
from tests.helpers.runs import runs_of

PAPER = ["csm", "distance", "sentences", "anchors", "repetition", "attention_regions", "separators", "noise"]


class CountingModule(CaptureModule):
    """CaptureModule that also counts the encoder's own forward calls (a forward pre-hook)."""

    created: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.model_calls = 0
        self.model.register_forward_pre_hook(self._count)
        CountingModule.created.append(self)

    def _count(self, *_):
        self.model_calls += 1


def test_paper_lists_every_finding():
    cfg = load_config("paper")
    assert list(cfg.findings) == PAPER
    assert set(PAPER) <= set(FINDINGS)


@pytest.mark.e2e
def test_paper_run_one_forward_pass_per_batch_and_every_metric(tiny_bert, tracking_uri, monkeypatch):
    CountingModule.created = []
    monkeypatch.setattr(capture_module, "CaptureModule", CountingModule)  # built by attnsim.workflows.kinds.base.make_capture_module
    windows, batch_size = 10, 4
    overrides = [
        f"model.path={tiny_bert}",
        f"corpus.limit={windows}",
        "corpus.seq_len=64",
        f"trainer.batch_size={batch_size}",
        "plots.examples=1",
        "trainer.progress_bar=false",
    ]
    result = runner.run("paper", overrides)
    (module,) = CountingModule.created
    batches = -(-windows // batch_size)
    assert module.forward_calls == batches and module.model_calls == batches

    client, runs = runs_of(tracking_uri)
    (run,) = runs
    assert run.info.status == "FINISHED" and run.info.run_id == result.run_id
    metrics = run.data.metrics
    layers, heads = 2, 4
    cfg = load_config("paper", overrides)
    assert [f"{name}/{stat}" for name in PAPER for stat in FINDINGS[name].statistics if f"{name}/{stat}" not in metrics] == []  # every model mean
    layered = {
        f"{name}/{stat}" for name in PAPER for stat in FINDINGS[name].statistics if any(fnmatch.fnmatchcase(f"{name}/{stat}", p) for p in cfg.stats.per_layer)
    }
    assert len(layered) == 15 and {k.rsplit("/", 1)[0] for k in metrics if re.fullmatch(r"\w+/\w+/L\d\d", k)} == layered  # layer means: stats.per_layer only
    logged = LoggedRun.of(run, client)  # the reader gives every layer mean, logged or from the heads table
    missing = [f"{name}/{stat}" for name in PAPER for stat in FINDINGS[name].statistics if logged.layer_values(f"{name}/{stat}") is None]
    assert missing == [] and logged.n_layers == layers
    for name in cfg.stats.per_head:  # headline statistics per head
        assert all(f"{name}/L{layer:02d}/H{head:02d}" in metrics for layer in range(layers) for head in range(heads)), name
    for name in PAPER:  # every statistic of every head in the per-head table
        text = client.download_artifacts(run.info.run_id, f"tables/{name}_heads.csv")
        table = pd.read_csv(text)
        assert len(table) == layers * heads and set(FINDINGS[name].statistics) <= set(table.columns), name
    figures = {a.path for name in PAPER for a in client.list_artifacts(run.info.run_id, f"figures/{name}")}
    for name in PAPER[1:]:
        assert f"figures/{name}/heads.png" in figures
    assert {
        "figures/sentences/same_sentence_by_layer.png",
        "figures/anchors/anchor_tokens.png",
        "figures/repetition/repetition_score.png",
        "figures/attention_regions/window0.png",
    } <= figures
    anchors = pd.read_csv(io.StringIO(open(client.download_artifacts(run.info.run_id, "tables/anchors_top.csv")).read()))
    assert {"layer", "head", "rank", "token", "windows"} <= set(anchors.columns) and len(anchors) >= layers * heads
    assert run.data.tags["attnsim.control"] == "none"
