"""The pair-space tables (attnsim/stats/pairs/tables.py) on one hand-worked window.

Window of T = 5: [CLS] a b a [SEP], sentences 0 0 0 1 1, specials excluded. The tokens in statistics are 1, 2, 3;
their pairs: (1, 2) same sentence, distance 1; (1, 3) cross sentence, identical token ('a', 'a'), distance 2;
(2, 3) cross sentence, distance 1 (neither same-sentence nor identical). Every other pair holds a special token.
"""

from __future__ import annotations

import torch

from attnsim.stats.pairs.tables import CLASS_TABLES, PairTables


class Tables(PairTables):
    def __init__(self, batch, include_special=False):
        self.batch, self.include_special, self.positions = batch, include_special, None
        self.seq_len = batch["attention_mask"].shape[1]
        self.n_pairs = self.seq_len * (self.seq_len - 1) // 2
        self.device = batch["attention_mask"].device


def window():
    return {
        "input_ids": torch.tensor([[101, 7, 8, 7, 102]]),
        "attention_mask": torch.ones(1, 5, dtype=torch.long),
        "special_mask": torch.tensor([[1, 0, 0, 0, 1]]),
        "sentence_ids": torch.tensor([[0, 0, 0, 1, 1]]),
    }


def index_of(tables, i, j):
    rows, cols, _ = tables.pair_ends(torch.arange(tables.n_pairs))
    return int(((rows == i) & (cols == j)).nonzero())


def test_tokens_pairs_and_distances():
    t = Tables(window())
    assert t.tokens.tolist() == [[False, True, True, True, False]]
    assert int(t._pair_mask.sum()) == 3 and t.n_pairs == 10
    rows, cols, listed = t.pair_ends(torch.tensor([index_of(t, 1, 3), t.n_pairs]))
    assert rows.tolist() == [1, 0] and cols.tolist() == [3, 1] and listed.tolist() == [True, False]  # the sentinel: pair 0's ends, not listed
    assert t._distance.tolist() == [int(c - r) for r, c in zip(*t._pairs.tolist())]


def test_class_counts_and_their_distances_by_hand():
    t = Tables(window())
    assert CLASS_TABLES == ("valid", "same", "cross", "identical", "neither")
    assert t.class_counts.tolist() == [[3.0, 1.0, 2.0, 1.0, 1.0]]
    by_distance = t.class_counts_by_distance[0, :, :3].tolist()  # distances 0 (unused), 1, 2
    assert by_distance == [[0, 2, 1], [0, 1, 0], [0, 1, 1], [0, 0, 1], [0, 1, 0]]
    assert float(t.class_counts_by_distance[..., 3:].sum()) == 0


def test_pair_features_high_counts_and_high_sums_of_listed_pairs():
    t = Tables(window())
    same, identical, neither = index_of(t, 1, 2), index_of(t, 1, 3), index_of(t, 2, 3)
    index = torch.tensor([[[[same, identical, t.n_pairs], [neither, t.n_pairs, t.n_pairs]]]])  # (batch 1, layer 1, head 2, S 3)
    features = t.pair_features(index)
    assert features["same"].tolist() == [[[[True, False, False], [False, False, False]]]]
    assert features["identical"].tolist() == [[[[False, True, False], [False, False, False]]]]
    assert features["distance"].tolist() == [[[[1, 2, 0], [1, 0, 0]]]]
    counts = t.high_counts(index, lambda f: (f["valid"], f["same"], f["cross"], f["identical"]))
    assert counts.tolist() == [[[[2.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]]]]
    sums = t.high_sums(index, lambda f: (f["distance"] * f["valid"]).to(torch.float32)[..., None])
    assert sums.tolist() == [[[[3.0], [1.0]]]]  # distances 1 + 2, and 1


def test_by_distance_sums_each_pairs_value_at_its_distance():
    t = Tables(window())
    by_pair = torch.arange(1.0, 11.0).view(1, 1, 10)  # (L, H, P): pair p holds p + 1
    want = torch.zeros(5)
    for p, (r, c) in enumerate(zip(*t._pairs.tolist())):
        want[c - r] += p + 1
    assert t._by_distance(by_pair)[0, 0].tolist() == want.tolist()
