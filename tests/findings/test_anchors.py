"""Anchor tokens of high-CSM pairs, worked by hand on two 6-token windows and three heads."""

from __future__ import annotations

import math

import pytest
import torch

from attnsim.config import StatsConfig
from attnsim.findings.anchors import AnchorsFinding
from attnsim.findings.base import FindingContext
from attnsim.stats.anchors import AnchorAccumulator, window_anchors
from tests.helpers.findings import CLS, SEP, VOCAB, batch_of, symmetric, view_from_csm

IDS = torch.tensor([[CLS, 7, 8, 7, 9, SEP]] * 2)  # positions 0..5
# high pairs (top 3 of 15) per window and head
HIGH = [
    [{(1, 2), (1, 3), (1, 4)}, {(0, 5), (2, 5), (3, 4)}, {(1, 2), (1, 3), (1, 4)}],  # window 0
    [{(3, 4), (3, 5), (0, 1)}, {(0, 1), (0, 2), (0, 3)}, {(2, 4), (4, 5), (0, 3)}],  # window 1
]


def hand_view():
    csm = torch.stack([torch.stack([symmetric(6, {p: v for p, v in zip(sorted(h), (9.0, 8.0, 7.0))}) for h in heads]) for heads in HIGH])  # (B, H, T, T)
    return view_from_csm(csm[None], batch_of(IDS), top_fraction=0.2)


def anchors_of(view):
    return window_anchors(view.high_index, view.high_count, view.pair_ends, view.batch["input_ids"])


def test_window_anchors_by_hand():
    position, token, share, has = anchors_of(hand_view())
    # window 0: head 0 token 1 in 3 pairs; head 1 token 5 in 2; head 2 as head 0
    # window 1: head 0 token 3 in 2; head 1 token 0 in 3; head 2 token 4 in 2
    assert position[:, 0].tolist() == [[1, 5, 1], [3, 0, 4]]
    assert token[:, 0].tolist() == [[7, SEP, 7], [7, CLS, 9]]
    assert torch.allclose(share[:, 0], torch.tensor([[1.0, 2 / 3, 1.0], [2 / 3, 1.0, 2 / 3]]))
    assert has.all()


def test_degree_ties_go_to_the_lowest_position():
    csm = symmetric(6, {(2, 3): 9.0, (4, 5): 8.0, (0, 1): 7.0})[None, None, None]  # every token in one pair
    position, _, share, _ = anchors_of(view_from_csm(csm, batch_of(IDS[:1]), top_fraction=0.2))
    assert int(position) == 0 and math.isclose(float(share), 1 / 3, rel_tol=1e-6)


def test_anchor_statistics_by_hand():
    acc = AnchorAccumulator(1, 3, VOCAB)
    acc.update(hand_view())
    out = acc.compute()
    # head 0: anchors 7, 7; head 1: [SEP], [CLS] (tie: lowest id wins); head 2: 7, 9 (tie: 7)
    assert out["top_anchor"].tolist() == [[7, CLS, 7]]
    assert torch.allclose(out["anchor_share"], torch.tensor([[5 / 6, 5 / 6, 5 / 6]], dtype=torch.float64))
    assert out["anchor_consistency"].tolist() == [[1.0, 0.5, 0.5]]
    assert out["anchor_unique"].tolist() == [[0.0, 1.0, 0.0]]  # heads 0 and 2 share token 7
    assert out["distinct_anchors"].tolist() == [[2.0, 2.0, 2.0]]
    ids, windows = acc.top_anchors(2)
    assert ids[0, 1].tolist() == [CLS, SEP] and windows[0, 1].tolist() == [1.0, 1.0]
    assert int(acc.token_counts.sum()) == 6  # one anchor per window and head


def test_anchor_table_names_tokens_and_counts():
    from transformers import AutoTokenizer

    from tests.helpers.models import BUNDLED

    tokenizer = AutoTokenizer.from_pretrained(BUNDLED)
    finding = AnchorsFinding(1, 3, 6, StatsConfig(), FindingContext(vocab_size=len(tokenizer), tokenizer=tokenizer))
    finding.update(hand_view())
    summary = finding.summarise()
    table = summary.tables["tables/anchors_top.csv"]
    head0 = table[(table["layer"] == 0) & (table["head"] == 0)]
    assert head0[["rank", "token_id", "windows", "share"]].values.tolist() == [[1, 7, 2.0, 1.0]]
    assert head0.token.tolist() == tokenizer.convert_ids_to_tokens([7])
    assert summary.figure_data["top_anchor_tokens"][0][1] == "[CLS]"


def test_findings_take_a_finding_context_not_a_dict():
    """Every finding gets one typed FindingContext; the old untyped ``extra`` dict is refused by name."""
    with pytest.raises(TypeError, match="takes a FindingContext"):
        AnchorsFinding(1, 3, 6, StatsConfig(), {"vocab_size": 10})
    with pytest.raises(ValueError, match=r"FindingContext\(vocab_size=...\)"):
        AnchorsFinding(1, 3, 6, StatsConfig(), FindingContext())
    finding = AnchorsFinding(1, 3, 6, StatsConfig(), FindingContext(vocab_size=10))
    assert finding.context.vocab_size == 10 and finding.context.tokenizer is None
