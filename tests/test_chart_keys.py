"""Which metric keys a run logs: the model mean of every statistic, layer means of the statistics of
``stats.per_layer`` (default all; ``paper`` its headline statistics) and ``stats.per_head``, per-head keys
only for the experiment's headline statistics (``stats.per_head``), bookkeeping in one group that sorts
last in MLflow's chart view."""

from __future__ import annotations

import math
from fnmatch import fnmatchcase

import pytest
import torch
from mlflow import MlflowClient

from attnsim.config import load_config
from attnsim.errors import ConfigError
from attnsim.findings.base import Summary
from attnsim.findings.registry import FINDINGS
from attnsim.keys import Stage
from attnsim.tracking.sink import RUN_GROUP, run_key
from attnsim.tracking.summaries import (
    check_per_head,
    check_per_layer,
    comparison_series,
    per_head_selected,
    per_layer_selected,
    summary_metrics,
)
from tests.helpers.runs import runs_of

MEASURE = [
    "anchors",
    "attention_maps",
    "attention_regions",
    "csm",
    "distance",
    "gradient_maps",
    "noise",
    "paper",
    "repetition",
    "rollout",
    "sentences",
    "separators",
    "vit_csm",
    "vit_rollout",
]
# zz_run/windows and zz_run/time_<stage> of the stages of attnsim.run (keys.Stage less imports and reduce; total and unattributed included): 14
BOOKKEEPING = 1 + len(set(Stage) - {Stage.IMPORTS, Stage.REDUCE})


def section(key: str) -> str:
    """The chart section MLflow 3.17 puts a metric in: the key up to its last '/' (its
    ``extractChartSectionName``); keys without '/' go to "Model metrics", drawn after every section."""
    return key.rsplit("/", 1)[0] if "/" in key else "Model metrics"


def test_model_and_layer_means_of_every_statistic_per_head_only_for_headlines():
    nan = math.nan
    summary = Summary("f", {"a": torch.tensor([[1.0, 2.0, 3.0], [4.0, nan, 8.0]]), "b": torch.tensor([[0.5, 0.5, 0.5], [1.0, 1.0, 1.0]])})
    metrics = summary_metrics(summary, ["f/a"])
    heads = {f"f/a/L{layer:02d}/H{head:02d}" for layer in range(2) for head in range(3)}
    assert set(metrics) == {"f/a", "f/a/L00", "f/a/L01", "f/b", "f/b/L00", "f/b/L01"} | heads
    assert metrics["f/a/L01"] == pytest.approx(6.0)  # the undefined head does not count
    assert metrics["f/a"] == pytest.approx(18.0 / 5) and metrics["f/b/L01"] == 1.0 and metrics["f/a/L00/H02"] == 3.0
    assert math.isnan(metrics["f/a/L01/H01"])  # left for the sink, which skips and counts it
    assert set(summary_metrics(summary, [])) == {"f/a", "f/a/L00", "f/a/L01", "f/b", "f/b/L00", "f/b/L01"}
    assert len(summary_metrics(summary, ["f/*"])) == 2 * (1 + 2 + 6)


def test_layer_means_only_for_per_layer_patterns_and_per_head_implies_them():
    summary = Summary("f", {"a": torch.tensor([[1.0, 3.0], [4.0, 8.0]]), "b": torch.tensor([[0.5, 1.5], [1.0, 2.0]]), "c": torch.ones(2, 2)})
    assert set(summary_metrics(summary, [], [])) == {"f/a", "f/b", "f/c"}  # model means only
    metrics = summary_metrics(summary, [], ["f/b"])
    assert set(metrics) == {"f/a", "f/b", "f/c", "f/b/L00", "f/b/L01"} and metrics["f/b/L00"] == 1.0 and metrics["f/a"] == 4.0
    implied = summary_metrics(summary, ["f/a"], ["f/b"])  # per-head keys bring their layer means
    assert {k for k in implied if k.count("/") == 2} == {"f/a/L00", "f/a/L01", "f/b/L00", "f/b/L01"} and implied["f/a/L01"] == 6.0
    assert len([k for k in implied if k.count("/") == 3]) == 4
    assert set(summary_metrics(summary, [])) == set(summary_metrics(summary, [], ["*"]))  # the default: every layer mean


def _keys(name: str, layers: int = 6, heads: int = 12) -> set:
    """The statistic keys experiment ``name`` logs for a model of ``layers`` x ``heads`` (the bundled MiniLM: 6 x 12)."""
    cfg = load_config(name)
    keys = set()
    for finding in cfg.findings:
        scalars = {stat: torch.rand(layers, heads) for stat in FINDINGS[finding].statistics}
        keys |= set(summary_metrics(Summary(finding, scalars), cfg.stats.per_head, cfg.stats.per_layer))
    return keys


def key_budget(name: str, layers: int = 6, heads: int = 12) -> int:
    """The statistic keys experiment ``name`` logs at ``layers`` x ``heads``, computed from what its findings declare
    (``Finding.statistics``) and its ``stats.per_head`` / ``stats.per_layer``: a model mean of every statistic, ``layers``
    layer means of each selected for layer means, ``layers x heads`` per-head values of each headline statistic."""
    cfg = load_config(name)
    per_head, per_layer = list(cfg.stats.per_head), list(cfg.stats.per_layer)
    budget = 0
    for finding in cfg.findings:
        for stat in FINDINGS[finding].statistics:
            key = f"{finding}/{stat}"
            budget += 1 + layers * per_layer_selected(key, per_layer, per_head) + layers * heads * per_head_selected(key, per_head)
    return budget


def headlines(name: str) -> set:
    """The declared statistics of experiment ``name`` that its ``stats.per_head`` patterns select."""
    cfg = load_config(name)
    declared = {f"{finding}/{stat}" for finding in cfg.findings for stat in FINDINGS[finding].statistics}
    return {key for key in declared if any(fnmatchcase(key, pattern) for pattern in cfg.stats.per_head)}


@pytest.mark.parametrize("name", [name for name in MEASURE if name != "paper"])
def test_experiment_key_counts_at_six_by_twelve(name):
    assert list(load_config(name).stats.per_layer) == ["*"]  # single-finding experiments keep every layer mean
    keys = _keys(name)
    per_head = {k for k in keys if k.count("/") == 3}
    declared = sum(len(FINDINGS[finding].statistics) for finding in load_config(name).findings)  # rollout declares no (layer, head) statistics
    assert len(keys) - len(per_head) == 7 * declared  # model mean and 6 layer means of every statistic
    assert len(per_head) == 72 * len(headlines(name))
    assert {k.rsplit("/", 2)[0] for k in per_head} == headlines(name) == set(load_config(name).stats.per_head)  # only the headline ones
    assert len(keys) == key_budget(name)  # the budget follows the declarations: a new statistic moves it


# paper's headline statistics (layer means logged) and the chance levels `attnsim report` quotes beside them
PAPER_LAYERED = {
    "distance/short_range_share",
    "distance/short_range_share_chance",
    "distance/long_range_share",
    "distance/long_range_share_chance",
    "sentences/same_sentence_share",
    "sentences/same_sentence_share_chance",
    "sentences/boundary_contrast",
    "anchors/anchor_consistency",
    "repetition/repetition_score",
    "attention_regions/jaccard",
    "separators/attention_separators",
    "separators/attention_separators_chance",
    "separators/attention_entropy",
    "noise/unexplained_share",
    "csm/degenerate",
}


def test_paper_logs_at_most_150_keys_model_means_of_all_layer_means_of_headlines():
    keys = _keys("paper")
    assert not [k for k in keys if k.count("/") == 3]  # no per-head keys
    declared = sum(len(FINDINGS[name].statistics) for name in load_config("paper").findings)
    assert len([k for k in keys if k.count("/") == 1]) == declared  # every statistic's model mean
    assert {k.rsplit("/", 1)[0] for k in keys if k.count("/") == 2} == PAPER_LAYERED
    assert len(keys) == declared + 6 * len(PAPER_LAYERED)  # 56 + 6 x 15 = 146 at 6 x 12
    assert len(keys) == key_budget("paper")  # 146 + 14 bookkeeping today; before: 364 + 6, and 1,132 at first
    assert (
        len({section(k) for k in keys} | {RUN_GROUP}) == len(load_config("paper").findings) + len(PAPER_LAYERED) + 1
    )  # a section per finding, per layered statistic, bookkeeping


def test_a_misspelt_headline_statistic_stops_before_any_run(tmp_path):
    from attnsim.workflows.run import run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(ConfigError, match=r"stats.per_head names 'csm/meen'.*Did you mean 'csm/mean'\?"):
        run("csm", ["stats.per_head=[csm/meen]", f"tracking.uri={uri}"])
    assert not (tmp_path / "mlflow.db").exists()  # refused before the store was opened
    check_per_head(
        ["csm/*", "distance/short_range_share", "rollout/cls_mass"], {"distance": FINDINGS["distance"].statistics, "rollout": ()}
    )  # other findings' patterns pass


def test_a_misspelt_layer_mean_statistic_stops_before_any_run(tmp_path):
    from attnsim.workflows.run import run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(ConfigError, match=r"stats.per_layer names 'distance/short_rang_share'.*no layer-mean key.*Did you mean 'distance/short_range_share'\?"):
        run("paper", ["stats.per_layer=[distance/short_rang_share]", f"tracking.uri={uri}"])
    assert not (tmp_path / "mlflow.db").exists()  # refused before the store was opened
    check_per_layer(["*", "csm/*", "distance/short_range_share"], {"distance": FINDINGS["distance"].statistics, "csm": FINDINGS["csm"].statistics})
    with pytest.raises(ConfigError, match=r"stats.per_layer names 'distance'"):  # a finding without its statistic
        check_per_layer(["distance"], {"distance": FINDINGS["distance"].statistics})
    with pytest.raises(ConfigError, match=r"'stats.per_layer' has an empty entry"):
        load_config("paper", ["stats.per_layer=['']"])


def test_run_keys_follow_the_rule_and_bookkeeping_sorts_last(tiny_bert, tmp_path):
    from attnsim.workflows.run import run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = [
        f"model.path={tiny_bert}",
        "corpus.limit=2",
        "corpus.seq_len=24",
        "trainer.batch_size=2",
        "trainer.progress_bar=false",
        "tracking.figures=false",
        f"tracking.uri={uri}",
    ]
    result = run("repetition", overrides)
    _, (logged,) = runs_of(uri)
    metrics = set(logged.data.metrics)
    stats = FINDINGS["repetition"].statistics
    defined = {k for k, v in summary_metrics(result.summaries["repetition"], load_config("repetition").stats.per_head).items() if math.isfinite(v)}
    assert {k for k in metrics if k.startswith("repetition/")} == defined
    assert {f"repetition/{s}/L{layer:02d}" for s in stats for layer in range(2)} & defined  # layer means of the statistics
    assert {k.rsplit("/", 2)[0] for k in defined if k.count("/") == 3} == {"repetition/repetition_score", "repetition/identical_high_share"}
    # the comparison series (a layer's heads, the layers; attnsim.tracking.summaries.comparison_series): steps are heads or layers
    series = comparison_series(result.summaries["repetition"], load_config("repetition").stats.per_head)
    assert {k for k in metrics if k.startswith(("0_heads/", "0_layers/"))} == {k for k, points in series.items() if any(map(math.isfinite, points.values()))}
    assert sorted(series) == sorted(
        [f"0_layers/repetition/{s}" for s in stats]
        + [f"0_heads/repetition/{s}/layer {layer:02d}" for s in ("repetition_score", "identical_high_share") for layer in range(2)]
    )
    history = MlflowClient(uri).get_metric_history(logged.info.run_id, "0_heads/repetition/repetition_score/layer 01")
    assert {m.step: m.value for m in history} == {h: logged.data.metrics[f"repetition/repetition_score/L01/H{h:02d}"] for h in range(4)}
    history = MlflowClient(uri).get_metric_history(logged.info.run_id, "0_layers/repetition/repetition_score")
    assert {m.step: m.value for m in history} == {layer: logged.data.metrics[f"repetition/repetition_score/L{layer:02d}"] for layer in range(2)}
    bookkeeping = {k for k in metrics if not k.startswith(("repetition/", "0_heads/", "0_layers/"))}
    # every stage of attnsim.run (its imports happened before the call; no DDP reduce), their total and the unattributed rest
    stages = set(Stage) - {Stage.IMPORTS, Stage.REDUCE}
    assert bookkeeping == {run_key("windows")} | {run_key(f"time_{stage}") for stage in stages}
    timings = {stage: logged.data.metrics[run_key(f"time_{stage}")] for stage in stages}
    parts = sum(v for stage, v in timings.items() if stage not in (Stage.TOTAL, Stage.UNATTRIBUTED))
    assert timings[Stage.TOTAL] == pytest.approx(parts + timings[Stage.UNATTRIBUTED]) and timings[Stage.UNATTRIBUTED] < timings[Stage.TOTAL]
    assert result.timings == pytest.approx(timings)
    assert logged.data.metrics[run_key("windows")] == 2
    sections = sorted({section(k) for k in metrics} - {"Model metrics"})  # MLflow: localeCompare, the same order for these names
    assert sections[-1] == RUN_GROUP == "zz_run" and len({section(k) for k in bookkeeping}) == 1
    assert sections[0].startswith("0_heads/") and all(s.startswith(("0_heads/", "0_layers/")) for s in sections[: len({section(k) for k in series})])
    assert all(RUN_GROUP > name for name in list(FINDINGS) + ["sweep", "train", "val", "compare"])
