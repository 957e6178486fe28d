"""The second metric of an ablation on an encoder: the change an ablation makes to later layers' CSMs (``csm_change``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mlflow import MlflowClient

import attnsim
from attnsim.stats.interventions import METRICS, csm_change_sums

SMALL = ["corpus.seq_len=32", "corpus.limit=4", "trainer.batch_size=4", "trainer.progress_bar=false", "interventions.random_draws=2", "tracking.figures=false"]


def _z(*heads):
    """One layer's Z of one window: (batch 1, head, pos, d_head 1) from each head's per-position scalars."""
    return torch.tensor([[[[v] for v in h] for h in heads]], dtype=torch.float32)


# clean and ablated Z of 2 layers x 2 heads, 3 positions, d_head 1 (CSM(i, j) = z_i z_j)
CLEAN = [_z([1, 2, 3], [1, 1, 1]), _z([2, 0, 1], [1, -1, 1])]
ABLATED = [_z([0, 0, 0], [1, 1, 1]), _z([2, 1, 1], [1, -1, 1])]  # (0, 0) zeroed; layer 1 head 0 changed by it


def test_csm_change_by_hand():
    index = METRICS.index("csm_change")
    # all three tokens real: pairs (0,1), (0,2), (1,2)
    # clean |CSM|: L0H0 2+3+6, L0H1 1+1+1, L1H0 0+2+0, L1H1 1+1+1 = 19
    # changed, the ablated head (0, 0) left out: L1H0 |2-0| + |2-2| + |1-0| = 3
    sums, counts = csm_change_sums(ABLATED, CLEAN, torch.ones(1, 3), [(0, 0)])
    assert float(sums[index]) == pytest.approx(3.0) and float(counts[index]) == pytest.approx(19.0)
    assert float(sums.abs().sum()) == pytest.approx(3.0)  # nothing written outside the metric
    # the ablated head counted too (no set named): + L0H0 |0-2| + |0-3| + |0-6| = 11
    sums, _ = csm_change_sums(ABLATED, CLEAN, torch.ones(1, 3), [])
    assert float(sums[index]) == pytest.approx(14.0)
    # the third token is padding: only pair (0, 1); clean |CSM| 2 + 1 + 0 + 1 = 4, changed L1H0 |2 - 0| = 2
    sums, counts = csm_change_sums(ABLATED, CLEAN, torch.tensor([[1, 1, 0]]), [(0, 0)])
    assert (float(sums[index]), float(counts[index])) == pytest.approx((2.0, 4.0))
    # the clean pass against itself changes nothing
    sums, counts = csm_change_sums(CLEAN, CLEAN, torch.ones(1, 3))
    assert float(sums[index]) == 0.0 and float(counts[index]) == pytest.approx(19.0)
    # stats.normalise=cosine: CSM of unit rows; L1H0 clean rows 1, 0 (norm clamped), 1 -> pairs 0, 1, 0; ablated 1, 1, 1
    sums, _ = csm_change_sums(ABLATED, CLEAN, torch.ones(1, 3), [(0, 0)], normalise="cosine")
    assert float(sums[index]) == pytest.approx(2.0)


def test_ablating_a_first_layer_head_changes_later_csms_and_a_last_layer_head_changes_nothing(tiny_bert, tracking_uri):
    result = attnsim.run("ablation", [f"model.path={tiny_bert}", "interventions.heads=each"] + SMALL)
    summary = result.summaries["ablation"]
    assert summary.metrics["clean_csm_change"] == 0.0
    effect = summary.scalars["csm_change_effect"]  # (layer 2, head 4)
    assert effect.shape == (2, 4)
    assert bool((effect[0] > 0).all()) and bool((effect[0] < 1).all())  # a layer-0 head changes layer 1's CSMs
    assert bool((effect[1] == 0).all())  # nothing comes after the last layer: exactly 0
    assert bool(summary.scalars["csm_change_random_mean"].isfinite().all())
    metrics = MlflowClient(tracking_uri).get_run(result.run_id).data.metrics
    assert metrics["ablation/csm_change_effect/L01/H02"] == 0.0 and metrics["ablation/csm_change_effect/L00/H02"] > 0


def test_csm_change_of_a_listed_set_matches_a_direct_computation(tiny_bert, tracking_uri):
    """The run's value equals CSMs computed here from Z captured in a clean and an ablated forward pass."""
    from attnsim.capture.hooks import capture_heads
    from attnsim.capture.interventions import load_task_model, replace_heads
    from attnsim.config import load_config
    from attnsim.findings.registry import FINDINGS
    from attnsim.workflows.run import prepare

    overrides = [f"model.path={tiny_bert}", "interventions.heads=[[0, 1], [1, 3]]", "interventions.random_draws=0"] + SMALL
    result = attnsim.run("ablation", overrides)
    value = result.summaries["ablation"].metrics["listed_csm_change"]

    prepared = prepare(load_config("ablation", overrides, known_findings=FINDINGS))
    windows = prepared.corpus.windows
    info = prepared.info
    model, kind, _ = load_task_model(info)
    assert kind == "encoder"
    ids = torch.from_numpy(np.stack([w.input_ids for w in windows])).long()
    mask = torch.from_numpy(np.stack([w.attention_mask for w in windows])).long()
    with capture_heads(model, info.arch, info.n_heads) as clean:
        model(input_ids=ids, attention_mask=mask)
    with (
        capture_heads(model, info.arch, info.n_heads) as ablated,
        replace_heads(model, info.arch, info.n_heads, {(0, 1): torch.zeros(()), (1, 3): torch.zeros(())}),
    ):
        model(input_ids=ids, attention_mask=mask)
    pairs = (mask.bool()[:, :, None] & mask.bool()[:, None, :]).triu(1)[:, None]  # (B, 1, T, T)
    changed = total = 0.0
    for layer in range(2):
        csm_c = torch.einsum("bhid,bhjd->bhij", clean[layer].double(), clean[layer].double()) * pairs
        csm_a = torch.einsum("bhid,bhjd->bhij", ablated[layer].double(), ablated[layer].double()) * pairs
        total += float(csm_c.abs().sum())
        others = [h for h in range(4) if (layer, h) not in {(0, 1), (1, 3)}]
        changed += float((csm_a - csm_c)[:, others].abs().sum())
    assert value == pytest.approx(changed / total, rel=1e-5) and value > 0
