"""attnsim.stats.interventions: its functions on hand-worked inputs."""

from __future__ import annotations

import pytest
import torch

from attnsim.stats.interventions import (
    HIGHER_IS_BETTER,
    METRICS,
    TASK_METRICS,
    classification_sums,
    copy_targets,
    effect,
    next_token_targets,
    random_baseline,
    rank_heads,
    restored_share,
    set_effects,
    spearman,
    zscore,
)


def test_csm_change_is_an_encoder_metric_where_a_rise_is_damage():
    assert TASK_METRICS["encoder"] == ("cosine", "csm_change")
    assert HIGHER_IS_BETTER["csm_change"] is False  # effect = ablated - clean, positive = changed


def test_classification_sums_by_hand():
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    sums, counts = classification_sums(logits, torch.tensor([0, 2]))
    # window 0 right (2 - 1 = 1); window 1 wrong (1 - 3 = -2)
    assert sums[METRICS.index("accuracy")] == 1 and sums[METRICS.index("logit_diff")] == -1
    assert counts[METRICS.index("accuracy")] == 2 and counts[METRICS.index("lm_loss")] == 0


def test_effect_baseline_zscore_and_restored_share_by_hand():
    assert float(effect(torch.tensor(0.9), torch.tensor(0.6), True)) == pytest.approx(0.3)
    assert float(effect(torch.tensor(2.0), torch.tensor(2.5), False)) == pytest.approx(0.5)
    mean, std = random_baseline(torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64))
    assert float(mean) == pytest.approx(0.2) and float(std) == pytest.approx(0.1)  # sample std, ddof 1
    assert float(zscore(torch.tensor(0.5), mean, std)) == pytest.approx(3.0)
    assert torch.isnan(zscore(torch.tensor(0.5), torch.tensor(0.2), torch.tensor(0.0)))
    assert float(restored_share(torch.tensor(1.5), torch.tensor(-1.0), torch.tensor(4.0))) == pytest.approx(0.5)
    assert torch.isnan(restored_share(torch.tensor(1.0), torch.tensor(2.0), torch.tensor(2.0)))


def test_set_effects_reads_each_set_against_the_draws_of_its_size():
    means = torch.full((6, len(METRICS)), float("nan"), dtype=torch.float64)
    a = METRICS.index("accuracy")
    # pass 0 clean 0.9; sets: one head 0.5, two heads 0.8; random draws of size 1: 0.8, 0.9, 0.7
    means[:, a] = torch.tensor([0.9, 0.5, 0.8, 0.8, 0.9, 0.7], dtype=torch.float64)
    out = set_effects(means, ["accuracy"], 2, {1: [3, 4, 5]}, [1, 2])["accuracy"]
    assert out["effect"].tolist() == pytest.approx([0.4, 0.1])
    assert float(out["random_mean"][0]) == pytest.approx(0.1) and float(out["random_std"][0]) == pytest.approx(0.1)
    assert float(out["zscore"][0]) == pytest.approx(3.0)
    assert torch.isnan(out["random_mean"][1])  # no draws of size 2


def test_rank_heads_and_spearman():
    values = torch.tensor([[0.1, float("nan")], [0.9, 0.5]])
    assert rank_heads(values, 2) == [(1, 0), (1, 1)]
    assert spearman(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([10.0, 20.0, 30.0, 45.0])) == pytest.approx(1.0)
    assert spearman(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 1.0])) is None


def test_copy_targets_split_by_copy():
    # BOS, copy 0 = [5 6 7], copy 1 = [5 6 7], pad: position t predicts t + 1
    ids = torch.tensor([[1, 5, 6, 7, 5, 6, 7, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0]])
    sentences = torch.tensor([[-1, 0, 0, 0, 1, 1, 1, -1]])
    earlier = torch.tensor([[-1, -1, -1, -1, 1, 2, 3, -1]])
    targets = next_token_targets(ids, mask)
    repeated, first = copy_targets(targets, earlier, sentences)
    assert repeated.tolist() == [[-100, -100, -100, 5, 6, 7, -100, -100]]  # positions 3..5 predict the second copy
    assert first.tolist() == [[5, 6, 7, -100, -100, -100, -100, -100]]  # BOS and copy 0 predict copy 0
