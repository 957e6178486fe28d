"""MetricKey formats and parses the one metric-key rule; Tag and RunKind hold every attnsim tag and run kind."""

from __future__ import annotations

import re

import pytest
import torch

from attnsim.analysis.runs import headline, layer_values, n_layers, statistics
from attnsim.keys import MetricKey, RunKind, Tag
from attnsim.results import Summary
from attnsim.tracking.summaries import corpus_metrics, summary_metrics
from tests.helpers.paths import ROOT


@pytest.mark.parametrize(
    "key, text",
    [
        (MetricKey("csm", "mean"), "csm/mean"),
        (MetricKey("csm", "mean", 3), "csm/mean/L03"),
        (MetricKey("csm", "mean", 3, 7), "csm/mean/L03/H07"),
        (MetricKey("distance", "short_range_share_chance", 11, 0), "distance/short_range_share_chance/L11/H00"),
        (MetricKey("csm", "mean", 120, 5), "csm/mean/L120/H05"),
    ],
)
def test_format_and_parse_are_inverse(key, text):
    assert key.format() == text == str(key)
    assert MetricKey.parse(text) == key


def test_parse_reads_the_parts():
    key = MetricKey.parse("rollout/cls_share/L02")
    assert (key.finding, key.stat, key.layer, key.head) == ("rollout", "cls_share", 2, None)
    assert key.name == "rollout/cls_share" and key.is_layer_mean and not key.is_model_mean


@pytest.mark.parametrize("text", ["attnsim/time/predict", "csm", "csm/mean/L3", "csm/mean/H07", "csm/mean/L03/H07/x", "/mean"])
def test_keys_outside_the_rule_are_refused(text):
    assert MetricKey.try_parse(text) is None
    with pytest.raises(ValueError, match="is not a statistic's metric key"):
        MetricKey.parse(text)


def test_a_head_needs_a_layer_and_names_no_slash():
    with pytest.raises(ValueError, match="has a head but no layer"):
        MetricKey("csm", "mean", head=1)
    with pytest.raises(ValueError, match="without '/'"):
        MetricKey("csm/x", "mean")


def test_summary_metrics_are_keys_that_parse_back():
    values = torch.tensor([[0.0, 1.0], [2.0, 4.0]])
    summary = Summary("csm", {"mean": values}, metrics={"pairs": 5.0})
    metrics = summary_metrics(summary, per_head=["csm/mean"])
    assert metrics["csm/mean"] == pytest.approx(1.75)
    assert metrics["csm/mean/L01"] == pytest.approx(3.0)
    assert metrics["csm/mean/L01/H00"] == pytest.approx(2.0)
    parsed = {MetricKey.parse(k): v for k, v in metrics.items()}
    assert parsed[MetricKey("csm", "mean", 0, 1)] == 1.0 and len(parsed) == 1 + 2 + 4
    assert corpus_metrics(summary) == {"csm/pairs": 5.0}


def test_the_run_reader_parses_logged_metrics():
    logged = {
        "csm/mean": 1.0,
        "csm/mean/L00": 0.5,
        "csm/mean/L02": 1.5,
        "csm/mean/L02/H01": 9.0,
        "noise/x": 2.0,
        "attnsim/time/predict": 3.0,
        "sweep/global_step": 10.0,
    }
    assert n_layers(logged) == 3
    assert layer_values(logged, "csm/mean")[0] == 0.5 and layer_values(logged, "csm/mean")[2] == 1.5
    assert layer_values(logged, "csm/nothing") is None
    assert headline(logged, ["csm"]) == {"csm/mean": 1.0, "csm/mean/L00": 0.5, "csm/mean/L02": 1.5}
    assert set(statistics(logged, ["noise"])) == {MetricKey("noise", "x")}


def test_tags_are_their_mlflow_strings():
    assert Tag.KIND == "attnsim.kind" and f"{Tag.CORPUS_HASH}" == "attnsim.corpus_hash"
    assert {"attnsim.partial": "true"}[Tag.PARTIAL] == "true"
    assert all(tag.value.startswith("attnsim.") for tag in Tag)
    assert len({tag.value for tag in Tag}) == len(Tag)


@pytest.mark.parametrize(
    "tags, kind",
    [
        ({"attnsim.kind": "sweep"}, RunKind.SWEEP),
        ({"attnsim.kind": "finetune"}, RunKind.FINETUNE),
        ({"attnsim.kind": "measure"}, RunKind.MEASURE),
        ({}, RunKind.MEASURE),  # logged before runs carried their kind
        ({"attnsim.sweep_step": "50"}, RunKind.SWEEP_CHILD),
    ],
)
def test_run_kind_of_tags(tags, kind):
    assert RunKind.of(tags) is kind
    assert kind.is_measurement == (kind in (RunKind.MEASURE, RunKind.SWEEP_CHILD))


# no module writes a tag literal or a metric key by hand: tags are keys.Tag, keys keys.MetricKey
# (module paths like "attnsim.report" are not tags; keys.py defines them)
SCOPE = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "attnsim").rglob("*.py") if p.name != "keys.py")


def test_no_tag_literal_or_hand_built_key_outside_the_contracts():
    tag = re.compile(r"[\"']attnsim\.(?!report\b|errors\b|workflows\b|analysis\b|findings\b|explore\b)[a-z_]+[\"']")
    key = re.compile(r"/L\{|/L\"|\"/L|rsplit\(\"/L")
    offenders = []
    for entry in SCOPE:
        path = ROOT / entry
        for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
            for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
                if tag.search(line) or key.search(line):
                    offenders.append(f"{file.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_collated_batches_hold_the_batch_contract():
    """collate_windows' keys are Batch's keys (every required one), with the documented shapes and dtypes."""
    import numpy as np

    from attnsim.data.module import Batch, collate_windows
    from attnsim.data.windows import Window

    ids = np.array([101, 7, 8, 102, 0, 0], np.int32)
    window = Window(
        "d", ids, (ids != 0).astype(np.int8), np.isin(ids, [101, 102]), np.array([-1, 0, 0, -1, -1, -1], np.int32), np.zeros((6, 2), np.int32), text="a b"
    )
    batch = collate_windows([(0, window), (4, window)], unk_token_id=100)
    assert Batch.__required_keys__ <= set(batch) <= Batch.__required_keys__ | Batch.__optional_keys__
    assert batch["input_ids"].shape == batch["sentence_ids"].shape == batch["unknown_mask"].shape == (2, 6)
    assert batch["offsets"].shape == (2, 6, 2) and batch["index"].tolist() == [0, 4]
    assert batch["input_ids"].dtype == torch.long and batch["special_mask"].dtype == torch.bool
    assert batch["doc_ids"] == ["d", "d"] and batch["texts"] == ["a b", "a b"]
