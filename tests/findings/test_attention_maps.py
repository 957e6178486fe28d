"""Attention-delineated regions and separator focus, worked by hand."""

from __future__ import annotations

import math

import torch

from attnsim.stats.separators import SeparatorAccumulator
from tests.helpers.findings import CATEGORIES, CLS, PERIOD, SEP, batch_of, view_from_csm

# [CLS] a . [SEP]; rows are queries, columns keys
ATTENTION = torch.tensor(
    [
        [0.5, 0.5, 0.0, 0.0],
        [0.25, 0.25, 0.25, 0.25],
        [0.0, 0.0, 0.0, 1.0],
        [1.0, 0.0, 0.0, 0.0],
    ]
)
IDS = torch.tensor([[CLS, 5, PERIOD, SEP]])


def separator_stats(include_special: bool) -> dict:
    view = view_from_csm(torch.zeros(1, 1, 1, 4, 4), batch_of(IDS), ATTENTION[None, None, None], include_special=include_special)
    acc = SeparatorAccumulator(1, 1, CATEGORIES)
    acc.update(view)
    return {k: float(v) for k, v in acc.compute().items()}


def test_separator_statistics_by_hand():
    out = separator_stats(True)
    assert math.isclose(out["attention_cls"], (0.5 + 0.25 + 0 + 1) / 4, rel_tol=1e-6)
    assert math.isclose(out["attention_sep"], (0 + 0.25 + 1 + 0) / 4, rel_tol=1e-6)
    assert math.isclose(out["attention_period"], 0.25 / 4, rel_tol=1e-6)
    assert out["attention_comma"] == 0.0
    assert math.isclose(out["attention_separators"], (0.5 + 0.75 + 1 + 1) / 4, rel_tol=1e-6)
    assert math.isclose(out["attention_separators_chance"], 3 / 4, rel_tol=1e-6)  # three of four keys
    assert math.isclose(out["attention_entropy"], (math.log(2) + math.log(4) + 0 + 0) / 4, rel_tol=1e-6)  # 0 log 0 = 0
    assert math.isclose(out["attention_entropy_chance"], math.log(4), rel_tol=1e-6)
    assert math.isclose(out["attention_distance"], (0.5 + 1 + 1 + 3) / 4, rel_tol=1e-6)
    assert math.isclose(out["attention_distance_chance"], (1.5 + 1 + 1 + 1.5) / 4, rel_tol=1e-6)


def test_separator_queries_follow_include_special():
    out = separator_stats(False)  # queries: tokens 1 and 2; keys: every real token
    assert math.isclose(out["attention_cls"], 0.25 / 2, rel_tol=1e-6)
    assert math.isclose(out["attention_sep"], 1.25 / 2, rel_tol=1e-6)
    assert math.isclose(out["attention_separators"], 1.75 / 2, rel_tol=1e-6)
    assert math.isclose(out["attention_entropy"], math.log(4) / 2, rel_tol=1e-6)
    assert math.isclose(out["attention_distance"], 1.0, rel_tol=1e-6)


def test_region_finding_keeps_the_example_windows_high_attention_pairs():
    from attnsim.config import StatsConfig
    from attnsim.findings.attention_regions import AttentionRegionsFinding
    from attnsim.findings.base import FindingContext
    from attnsim.stats.pairs import pair_indices
    from tests.helpers.findings import random_windows, stack_view
    from tests.helpers.reference import attention_pair_values, top_fraction_pairs

    windows = random_windows([12, 7, 12, 9], 12, 2, 3, seed=11)
    finding = AttentionRegionsFinding(2, 3, 12, StatsConfig(top_fraction=0.1), FindingContext(examples=3))
    finding.update(stack_view(windows[:2]))
    finding.update(stack_view(windows[2:]))  # one more example window from the second batch, then none
    attention = torch.stack([w["attention"] for w in windows[:3]], 1)  # (L, E, H, T, T)
    pairs = pair_indices(12)
    real = torch.stack([w["ids"] for w in windows[:3]]) != 0
    want = top_fraction_pairs(attention_pair_values(attention), (real[:, pairs[0]] & real[:, pairs[1]])[None, :, None], 0.1)
    assert finding.regions.shape == (2, 3, 3, 66) and torch.equal(finding.regions, want)


def test_region_figure_outlines_the_pairs_it_is_given():
    from attnsim.plots.regions import region_matrix

    region = torch.tensor([[False, True, False, False, True, False]])  # T = 4: pairs (0,2) and (1,3)
    matrix = region_matrix(region, 4)[0]
    assert matrix.nonzero().tolist() == [[0, 2], [1, 3], [2, 0], [3, 1]]
