"""End to end: `attnsim run csm` on the bundled MiniLM and BBC News, and bad input that creates no run."""

from __future__ import annotations

import re

import pytest

from attnsim.cli import main
from tests.helpers.runs import runs_of

HEADLINE = 3  # statistics logged per head in the csm experiment: csm/mean, distance/short_range_share, distance/high_mean_distance


@pytest.mark.e2e
def test_run_csm_on_bundled_model_and_corpus(tracking_uri, capsys):
    assert main(["run", "csm", "corpus.limit=16", "plots.examples=1"]) == 0
    out = capsys.readouterr().out
    client, runs = runs_of(tracking_uri)
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_id in out and "attnsim ui" in out
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    layers, heads = 6, 12
    per_head = [k for k in metrics if re.fullmatch(r"(csm|distance)/\w+/L\d\d/H\d\d", k)]
    assert len(per_head) == layers * heads * HEADLINE
    assert all(f"csm/mean/L{layer:02d}" in metrics for layer in range(layers))
    assert "csm/mean" in metrics and "distance/short_range_share" in metrics
    assert metrics["zz_run/windows"] == 16
    # high pairs are closer than chance in MiniLM (the paper's middle-layer concentration)
    assert metrics["distance/short_range_share"] > metrics["distance/short_range_share_chance"]
    tags = run.data.tags
    assert tags["attnsim.model"] == "all-MiniLM-L6-v2" and len(tags["attnsim.corpus_hash"]) == 64
    assert run.data.params["corpus.limit"] == "16"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "tables", "figures"} <= artifacts
    tables = {a.path for a in client.list_artifacts(run.info.run_id, "tables")}
    assert "tables/csm_heads.csv" in tables and "tables/csm_distance_high_ratio.csv" in tables
    figures = {a.path for a in client.list_artifacts(run.info.run_id, "figures/csm")}
    assert "figures/csm/mean_csm.png" in figures and "figures/csm/distance_profiles.png" in figures
    assert {a.path for a in client.list_artifacts(run.info.run_id, "figures/examples")}


def _fails_without_run(args, tracking_uri, capsys, pattern):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert re.search(pattern, err), err
    assert "error: " in err and "Traceback" not in err
    _, runs = runs_of(tracking_uri)
    assert runs == []


def test_unknown_key_creates_no_run(tracking_uri, capsys):
    _fails_without_run(["run", "csm", "corpus.limt=4"], tracking_uri, capsys, r"'corpus.limt'.*Did you mean 'corpus.limit'")


def test_missing_value_creates_no_run(tracking_uri, capsys):
    _fails_without_run(["run", "csm", "corpus=jsonl"], tracking_uri, capsys, r"Missing value for config key 'corpus.path'")


def test_missing_model_path_creates_no_run(tracking_uri, capsys, tmp_path):
    _fails_without_run(
        ["run", "csm", f"model.path={tmp_path}/no_such_model"], tracking_uri, capsys, r"Model path '.*no_such_model' does not exist\. Give a model folder"
    )


def test_directory_that_is_not_a_model(tracking_uri, capsys, tmp_path):
    _fails_without_run(["run", "csm", f"model.path={tmp_path}"], tracking_uri, capsys, r"is not a Hugging Face model: it has no config.json")


def test_missing_corpus_path_creates_no_run(tracking_uri, capsys, tmp_path):
    _fails_without_run(["run", "csm", "corpus=text", f"corpus.path={tmp_path}/nothing"], tracking_uri, capsys, r"Corpus path .* does not exist")


def test_corpus_without_text_creates_no_run(tracking_uri, capsys, tmp_path):
    (tmp_path / "blank.txt").write_text("   \n\u200b\n")
    _fails_without_run(
        ["run", "csm", "corpus=text", f"corpus.path={tmp_path}"], tracking_uri, capsys, r"no usable window: read 1 document\(s\), used none \(1 empty"
    )


def test_seq_len_beyond_model(tracking_uri, capsys):
    _fails_without_run(["run", "csm", "corpus.seq_len=1024"], tracking_uri, capsys, r"corpus.seq_len=1024 is larger than the 512 tokens")


def test_tiny_model_on_text_directory(tracking_uri, tiny_bert, text_dir):
    assert main(["run", "csm", f"model.path={tiny_bert}", "corpus=text", f"corpus.path={text_dir}", "corpus.seq_len=32", "tracking.figures=false"]) == 0
    _, runs = runs_of(tracking_uri)
    assert runs[0].info.status == "FINISHED"
    per_head = [k for k in runs[0].data.metrics if re.fullmatch(r"(csm|distance)/\w+/L\d\d/H\d\d", k)]
    assert len(per_head) == 2 * 4 * HEADLINE
