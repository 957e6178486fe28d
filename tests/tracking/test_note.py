"""A run's description: the way to its mosaics, tables and explorer, its headline numbers rounded (hand-worked
2 x 2 values), then what it held before; model short names for run names; experiments get their description and
MLflow's empty Default experiment is hidden."""

from __future__ import annotations

import math

import torch
from mlflow import MlflowClient

from attnsim.capture.load import display_name
from attnsim.tracking.note import headline_statistics, reading_note, rounded
from attnsim.tracking.store import NOTE_TAG, Tracker

RUN = "0123abcd"
ROUTE = "#/experiments/7/runs/0123abcd/artifacts/{}?workflowType=machine_learning"


def test_numbers_are_rounded_to_four_significant_digits():
    assert [rounded(v) for v in (0.4643815062475383, 1.077583389947148, 1234567.0, -0.000123456, math.nan, math.inf)] == [
        "0.4644",
        "1.078",
        "1.235e+06",
        "-0.0001235",
        "–",
        "–",
    ]


def test_the_description_links_the_mosaics_tables_and_explorer_then_gives_the_numbers():
    scalars = {"csm/mean": torch.tensor([[0.1, 0.3], [1.0, math.nan]]), "csm/std": torch.tensor([[2.0, 2.0], [4.0, 6.0]])}
    artifacts = ["config.yaml", "explorer.html", "figures/csm/heads.png", "figures/csm/mean_csm.png", "tables/csm_heads.csv"]
    note = reading_note("7", RUN, scalars, artifacts, per_head=["csm/mean"], per_layer=["*"], before="Experiment.\n\nCommand line: `attnsim run csm`")
    parts = note.split("\n\n")
    assert parts[0] == (
        f"**Read this run:** [csm heads]({ROUTE.format('figures/csm/heads.png')}) · [tables]({ROUTE.format('tables')}) · "
        f"[explorer]({ROUTE.format('explorer.html')}) · live explorer: `attnsim explore --run {RUN}`. Model metrics: `0_heads` charts put a "
        "layer's heads on one axis (x: head), `0_layers` the layers (x: layer)."
    )
    assert parts[1] == f"![figures/csm/heads.png](get-artifact?path=figures/csm/heads.png&run_uuid={RUN})"
    # the headline statistic only (stats.per_head): model mean nanmean(0.1, 0.3, 1.0) = 0.4667, layers 0.2 and 1.0
    assert parts[3] == "| statistic | model mean | L0 | L1 |\n|---|---|---|---|\n| `csm/mean` | 0.4667 | 0.2 | 1 |"
    assert parts[5] == "| layer | H0 | H1 |\n|---|---|---|\n| L0 | 0.1 | 0.3 |\n| L1 | 1 | – |"
    assert parts[-2:] == ["Experiment.", "Command line: `attnsim run csm`"]


def test_a_run_without_per_head_statistics_lists_its_layer_means_only():
    scalars = {"csm/mean": torch.tensor([[0.1, 0.3], [1.0, 3.0]]), "csm/std": torch.tensor([[2.0, 2.0], [4.0, 6.0]])}
    parts = reading_note("7", RUN, scalars, ["tables/csm_heads.csv"], per_head=[], per_layer=["csm/std"]).split("\n\n")
    assert parts[0].endswith("Model metrics: `0_layers` charts put the layers on one axis (x: layer).")
    assert parts[2] == "| statistic | model mean | L0 | L1 |\n|---|---|---|---|\n| `csm/std` | 3.5 | 2 | 5 |" and len(parts) == 3


def test_headlines_are_the_per_head_statistics_else_a_listed_per_layer_set():
    names = ["csm/mean", "csm/std", "distance/short_range_share"]
    assert headline_statistics(names, ["csm/std"], ["*"]) == ["csm/std"]
    assert headline_statistics(names, [], ["distance/*"]) == ["distance/short_range_share"]
    assert headline_statistics(names, [], ["*"]) == []  # every statistic is no headline: the tables hold them


def test_a_model_is_named_by_its_folder_and_a_checkpoint_by_its_folder_too(tmp_path):
    (tmp_path / "gpt2-small").mkdir()
    (tmp_path / "run7" / "step-000050").mkdir(parents=True)
    (tmp_path / "tiny.gguf").write_bytes(b"")
    assert display_name(str(tmp_path / "gpt2-small")) == "gpt2-small"
    assert display_name(str(tmp_path / "run7" / "step-000050")) == "run7/step-000050"
    assert display_name(str(tmp_path / "tiny.gguf")) == "tiny"
    assert display_name("bundled") == "all-MiniLM-L6-v2" and display_name("smollm2") == "SmolLM2-135M-Instruct"
    assert display_name("openai-community/gpt2") == "openai-community/gpt2"  # a hub id, as given


def test_experiments_get_their_description_and_the_empty_default_experiment_is_hidden(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}")
    eid = tracker.experiment_id("csm", "Context similarity.")
    assert tracker.client.get_experiment(eid).tags[NOTE_TAG] == "Context similarity."
    assert [e.name for e in tracker.client.search_experiments()] == ["csm"]
    assert tracker.client.get_experiment("0").lifecycle_stage == "deleted"  # kept in the store: restorable
    # an experiment created without one gets it later; one that has a description keeps it
    bare = tracker.experiment_id("bare")
    assert NOTE_TAG not in tracker.client.get_experiment(bare).tags
    tracker.experiment_id("bare", "Now described.")
    tracker.experiment_id("csm", "Another text.")
    assert [tracker.client.get_experiment(e).tags[NOTE_TAG] for e in (bare, eid)] == ["Now described.", "Context similarity."]
    # a Default experiment holding a run is left alone
    uri = f"sqlite:///{tmp_path / 'b' / 'mlflow.db'}"
    other = Tracker(uri)
    MlflowClient(uri).create_run("0")
    other.experiment_id("csm")
    assert other.client.get_experiment("0").lifecycle_stage == "active"
