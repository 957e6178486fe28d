"""Head ablation and activation patching end to end: fine-tune a tiny classifier a few steps, then ablation (each head, the top heads of a
csm run) and activation patching on its checkpoint, logged to MLflow; and the report's verdict."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from mlflow import MlflowClient

import attnsim
from attnsim.errors import ConfigError
from attnsim.workflows.finetune import finetune
from tests.helpers.runs import tiny_fit

SMALL = ["corpus.seq_len=32", "corpus.limit=8", "trainer.batch_size=4", "trainer.progress_bar=false", "interventions.random_draws=2"]


@pytest.fixture(scope="module")
def checkpoint(tiny_bert, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    result = finetune("finetune_bbc", tiny_fit(tiny_bert, folder / "checkpoints", steps=2, every=2) + [f"tracking.uri={uri}"])
    return result.checkpoints[-1][1], uri


def test_ablation_of_each_head_on_a_finetuned_checkpoint(checkpoint):
    path, uri = checkpoint
    statistic = attnsim.run(
        "csm", [f"model.path={path}", f"tracking.uri={uri}", "corpus.seq_len=32", "corpus.limit=8", "trainer.progress_bar=false", "tracking.figures=false"]
    )
    overrides = [
        f"model.path={path}",
        f"tracking.uri={uri}",
        "interventions.split=validation",
        "interventions.heads=each",
        f"interventions.select={{run: {statistic.run_id}, metric: csm/mean, top: 2}}",
    ] + SMALL
    result = attnsim.run("ablation", overrides)
    summary = result.summaries["ablation"]
    for metric in ("accuracy", "logit_diff"):
        effects = summary.scalars[f"{metric}_effect"]
        assert effects.shape == (2, 4) and bool(effects.isfinite().all())  # every head ablated alone
        assert bool(summary.scalars[f"{metric}_random_std"].isfinite().all())
    metrics = MlflowClient(uri).get_run(result.run_id).data.metrics
    assert 0.0 <= metrics["ablation/clean_accuracy"] <= 1.0
    assert math.isfinite(metrics["ablation/top_logit_diff_effect"]) and math.isfinite(metrics["ablation/top_logit_diff_random_mean"])
    assert "ablation/accuracy_effect/L01/H03" in metrics  # per head (stats.per_head of the experiment)
    assert math.isfinite(metrics["ablation/logit_diff_effect_statistic_spearman"])
    client = MlflowClient(uri)
    table = pd.read_csv(client.download_artifacts(result.run_id, "tables/ablation_sets.csv"))
    assert len(table) == (8 + 1) * 2 and set(table["set"]) >= {"top", "L00H00", "L01H03"}
    top = table[(table["set"] == "top") & (table["metric"] == "accuracy")].iloc[0]
    assert top["size"] == 2 and top["effect"] == pytest.approx(top["clean"] - top["ablated"])
    figures = {a.path for a in client.list_artifacts(result.run_id, "figures/ablation")}
    assert {"figures/ablation/accuracy_effect.png", "figures/ablation/logit_diff_effect_vs_statistic.png"} <= figures
    tags = client.get_run(result.run_id).data.tags
    assert tags["attnsim.intervention_head"] == "classifier" and tags["attnsim.intervention_mode"] == "zero"

    # attnsim report: the intervention run gets its verdict line
    from attnsim.analysis.report import load_runs, render

    _, runs = load_runs([result.run_id], uri)
    text = render(runs)
    assert "## Interventions" in text and "the heads the statistic singles out matter more than random heads" in text
    assert f"top 2 heads by `csm/mean` of run `{statistic.run_id[:8]}`" in text  # read from the run's params
    assert ("holds" in text.split("## Interventions")[1]) or ("does not hold" in text.split("## Interventions")[1])


def test_activation_patching_on_a_finetuned_checkpoint(checkpoint):
    path, uri = checkpoint
    result = attnsim.run("patching", [f"model.path={path}", f"tracking.uri={uri}", "trainer.progress_bar=false"])
    summary = result.summaries["patching"]
    assert summary.scalars["restored_share"].shape == (2, 4) and bool(summary.scalars["restored_share"].isfinite().all())
    assert summary.metrics["pairs"] == 6.0
    client = MlflowClient(uri)
    assert "figures/patching/restored_share.png" in {a.path for a in client.list_artifacts(result.run_id, "figures/patching")}
    assert client.get_run(result.run_id).data.tags["attnsim.corpus"].startswith("pairs:")


def test_an_intervention_cannot_share_a_run_and_a_bare_encoder_cannot_be_patched(tiny_bert, tracking_uri):
    with pytest.raises(ConfigError, match="cannot share a run with other findings"):
        attnsim.run("ablation", [f"model.path={tiny_bert}", "findings=[ablation, csm]"] + SMALL)
    from attnsim.errors import CorpusError

    with pytest.raises(CorpusError, match="has no head"):
        attnsim.run("patching", [f"model.path={tiny_bert}", "trainer.progress_bar=false"])


@pytest.mark.parametrize("mode", ["mean", "resample"])
def test_mean_and_resample_ablation_of_a_listed_set_on_a_bare_encoder(tiny_bert, tracking_uri, mode):
    result = attnsim.run(
        "ablation", [f"model.path={tiny_bert}", "interventions.heads=[[0, 1], [1, 2]]", f"interventions.mode={mode}", "tracking.figures=false"] + SMALL
    )
    metrics = result.summaries["ablation"].metrics
    assert metrics["clean_cosine"] == pytest.approx(1.0)
    assert 0.0 < metrics["listed_cosine_effect"] < 1.0 and math.isfinite(metrics["listed_cosine_random_mean"])
    assert result.summaries["ablation"].scalars == {}  # no single heads: no (layer, head) statistics
    assert MlflowClient(tracking_uri).get_run(result.run_id).data.tags["attnsim.intervention_mode"] == mode


def test_bad_intervention_input_is_refused_before_the_model_loads(checkpoint, tiny_bert, text_dir):
    from attnsim.config import load_config
    from attnsim.errors import CorpusError, TrackingError
    from attnsim.findings.registry import FINDINGS
    from attnsim.workflows.run import prepare

    path, uri = checkpoint
    base = [f"tracking.uri={uri}", "corpus.seq_len=32", "corpus.limit=4"]
    with pytest.raises(TrackingError, match="'interventions.select.run' is '0123456789abcdef', which is not a run"):
        prepare(
            load_config("ablation", base + [f"model.path={path}", "interventions.select={run: 0123456789abcdef, metric: csm/mean}"], known_findings=FINDINGS)
        )
    with pytest.raises(ConfigError, match="run in one process"):
        prepare(load_config("ablation", base + [f"model.path={path}", "trainer.devices=2"], known_findings=FINDINGS))
    with pytest.raises(CorpusError, match="its accuracy needs each window's class"):
        prepare(load_config("ablation", base + [f"model.path={path}", "corpus=text", f"corpus.path={text_dir}"], known_findings=FINDINGS))
    with pytest.raises(ConfigError, match=r"lists \[\(5, 0\)\], outside the model's 2 layers x 4 heads"):
        prepare(load_config("ablation", base + [f"model.path={tiny_bert}", "interventions.heads=[[5, 0]]"], known_findings=FINDINGS))
    with pytest.raises(ConfigError, match="Missing value for config key 'interventions.pairs'"):
        prepare(load_config("patching", base + [f"model.path={path}", "interventions.pairs=null"], known_findings=FINDINGS))


def test_select_and_resample_inputs_that_cannot_work_are_refused_before_the_model_loads(tiny_bert, tmp_path):
    """A top set of every head (random sets of its size are that set), a select run that did not finish or measured
    another model family, and resample ablation of a single window: each a ConfigError from prepare (no weights)."""
    from mlflow import MlflowClient

    from attnsim.config import load_config
    from attnsim.findings.registry import FINDINGS
    from attnsim.keys import Tag
    from attnsim.workflows.run import prepare

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("earlier")
    failed = client.create_run(experiment, tags={Tag.MODEL_TYPE.value: "bert"}).info.run_id
    client.set_terminated(failed, "FAILED")
    other = client.create_run(experiment, tags={Tag.MODEL_TYPE.value: "gpt2", Tag.MODEL.value: "tiny-gpt2"}).info.run_id
    client.set_terminated(other, "FINISHED")
    base = [f"tracking.uri={uri}", "corpus.seq_len=32", "corpus.limit=4", f"model.path={tiny_bert}"]

    def prepared(*overrides):
        return prepare(load_config("ablation", base + list(overrides), known_findings=FINDINGS))

    with pytest.raises(ConfigError, match=r"'interventions.select.top' is 8, but the model has 2 x 4 = 8 heads"):
        prepared(f"interventions.select={{run: {other}, metric: csm/mean, top: 8}}")
    with pytest.raises(ConfigError, match=f"'{failed}', a run that is FAILED, not FINISHED"):
        prepared(f"interventions.select={{run: {failed}, metric: csm/mean}}")
    with pytest.raises(ConfigError, match=r"a run of a gpt2 model \(tiny-gpt2\), but this run ablates a bert model"):
        prepared(f"interventions.select={{run: {other}, metric: csm/mean}}")
    with pytest.raises(ConfigError, match="interventions.mode=resample takes each window's Z from another window, but the corpus has 1 window"):
        prepared("interventions.mode=resample", "corpus.limit=1", "interventions.heads=[[0, 0]]")
