"""Sweep children at their checkpoint's global step, named by checkpoint; the parent's statistics beside their chance."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

import attnsim
from attnsim.config import load_config
from attnsim.plots.sweep import statistics_with_chance, sweep_curves
from attnsim.tracking.store import NOTE_TAG
from tests.helpers.models import save_tiny_model
from tests.helpers.runs import SWEEP

STEPS = (50, 100)


@pytest.fixture
def checkpoints(tiny_bert, tmp_path) -> Path:
    """Checkpoints at global steps 50 and 100 of the tiny model's architecture and tokenizer, base = the tiny model."""
    root = tmp_path / "ckpts"
    for step in STEPS:
        path = save_tiny_model(root / f"step-{step:06d}", seed=step)
        (path / "attnsim_checkpoint.json").write_text(json.dumps({"global_step": step, "base_model": str(tiny_bert)}))
    return root


def test_children_at_their_global_step_and_parent_chance_beside_each_statistic(checkpoints, tiny_bert, tracking_uri):
    overrides = [o for o in SWEEP if o != "tracking.figures=false"] + ["plots.explorer=false"]  # the parent's figure too
    result = attnsim.sweep("csm", str(checkpoints), overrides)
    client = MlflowClient(tracking_uri)
    children = client.search_runs([result.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{result.parent_run_id}'")
    by_name = {child.info.run_name: child for child in children}
    assert sorted(by_name) == ["step-000000", "step-000050", "step-000100"]
    description = load_config("csm").description
    for name, child in by_name.items():
        step = int(name.split("-")[1])
        assert child.data.tags["attnsim.global_step"] == str(step)
        # every metric at the checkpoint's global step (MLflow's chart view puts the child at x = step)
        for key in ("csm/mean", "distance/short_range_share/L01", "csm/mean/L00/H00", "zz_run/windows", "sweep/global_step"):
            assert [m.step for m in client.get_metric_history(child.info.run_id, key)] == [step], key
        # the step as a number on the compare page: the first param (its scatter plot's default x axis) and a metric
        assert child.data.params["attnsim.global_step"] == str(step) and sorted(child.data.params)[0] == "attnsim.global_step"
        assert child.data.metrics["sweep/global_step"] == step
        assert "trainer.max_steps" not in child.data.params and not [k for k in child.data.params if k.startswith("checkpoint.")]
        note = child.data.tags[NOTE_TAG]
        checkpoint = str(tiny_bert) if step == 0 else f"{checkpoints.resolve()}/step-{step:06d}"
        assert note.startswith("**Read this run:** ")  # the way to its tables first (attnsim.tracking.note)
        assert f"\n\n{description}\n\nStarted from the Python API: `attnsim.sweep('csm', {str(checkpoints)!r}, {overrides!r}, base=None, jobs=1)`" in note
        # no path as a compare axis (MLflow cuts it to 10 characters): the checkpoint is a tag, the model a name
        assert "model.path" not in child.data.params and child.data.tags["attnsim.checkpoint"] == checkpoint
        assert child.data.tags["attnsim.model"] == (tiny_bert.name if step == 0 else f"{tiny_bert.name} step {step}")
        assert note.endswith(f"\n\nCheckpoint `{checkpoint}` (global step {step}) of sweep run {result.parent_run_id}.")

    parent = client.get_run(result.parent_run_id)
    assert parent.data.tags[NOTE_TAG].startswith(f"{description}\n\nStarted from the Python API: `attnsim.sweep(")
    assert "trainer.max_steps" not in parent.data.params and "checkpoint.dir" not in parent.data.params
    metrics = parent.data.metrics
    chances = [key for key in metrics if key.endswith("_chance")]
    assert set(chances) == {"distance/high_mean_distance_chance", "distance/long_range_share_chance", "distance/short_range_share_chance"}
    for chance in chances:
        statistic = chance[: -len("_chance")]
        # the same chart section (MLflow groups charts by the key's first segment) and the same steps
        assert statistic.split("/")[0] == chance.split("/")[0] == "distance"
        for key in (statistic, chance):
            history = sorted(client.get_metric_history(parent.info.run_id, key), key=lambda m: m.step)
            assert [m.step for m in history] == [0, 50, 100]
            assert [m.value for m in history] == pytest.approx([by_name[f"step-{m.step:06d}"].data.metrics[key] for m in history])
    figures = {a.path for a in client.list_artifacts(parent.info.run_id, "figures/sweep")}
    assert figures == {"figures/sweep/csm.png", "figures/sweep/distance.png"}  # one per finding of the csm experiment


def test_sweep_figure_draws_each_statistic_with_its_chance_dashed_on_the_same_axes():
    steps = [0, 50, 100]
    curves = pd.DataFrame(
        {
            "csm/short_range_share": [0.20, 0.25, 0.30],
            "csm/short_range_share/L00": [0.10, 0.15, 0.20],
            "csm/short_range_share/L01": [0.30, 0.35, 0.40],
            "csm/short_range_share_chance": [0.065, 0.065, 0.065],
            "csm/mean": [1.0, 2.0, 3.0],
            "distance/spread": [0.9, 0.8, 0.7],
        },
        index=pd.Index(steps, name="step"),
    )
    assert statistics_with_chance(curves.columns, "csm") == {"csm/short_range_share": "csm/short_range_share_chance", "csm/mean": None}
    fig = sweep_curves(curves, "csm", "sweep csm: csm")
    try:
        panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
        assert sorted(panels) == ["mean", "short_range_share"]  # no panel of its own for the chance
        lines = {line.get_label(): line for line in panels["short_range_share"].get_lines()}
        assert sorted(lines) == ["L00", "L01", "chance (model mean)", "model mean"]
        assert lines["chance (model mean)"].get_linestyle() == "--" and lines["model mean"].get_linestyle() == "-"
        assert np.allclose(lines["chance (model mean)"].get_xdata(), steps) and np.allclose(lines["chance (model mean)"].get_ydata(), 0.065)
        assert np.allclose(lines["model mean"].get_ydata(), [0.20, 0.25, 0.30]) and np.allclose(lines["L01"].get_ydata(), [0.30, 0.35, 0.40])
        assert [line.get_label() for line in panels["mean"].get_lines()] == ["model mean"]
    finally:
        plt.close(fig)
    assert sweep_curves(curves, "anchors", "nothing") is None
