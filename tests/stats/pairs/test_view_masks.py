"""Shared pair masks of PairView, worked by hand on a 6-token window."""

from __future__ import annotations

import torch

from attnsim.stats.pairs import PAIR_CLASSES, dense_pairs, head_sums, pair_indices
from tests.helpers.findings import CLS, PAD, SEP, batch_of, symmetric, view_from_csm
from tests.helpers.reference import attention_pair_values, pair_sums, pair_values

SAME, IDENTICAL = PAIR_CLASSES.index("same"), PAIR_CLASSES.index("identical")

# positions:      0    1  2  3  4    5    6
IDS = torch.tensor([[CLS, 7, 8, 7, SEP, PAD, PAD]])
SENTENCES = torch.tensor([[-1, 0, 0, 1, -1, -1, -1]])


def features(view) -> dict:
    """The view's published pair classes of every pair of each window: ``valid``, ``same``, ... (batch, P) bool."""
    return view.pair_features(torch.arange(view.n_pairs).expand(view.batch_size, -1))


def pair_set(mask_row: torch.Tensor, seq_len: int) -> set:
    pairs = pair_indices(seq_len)
    return {(int(pairs[0, p]), int(pairs[1, p])) for p in mask_row.nonzero().flatten().tolist()}


def test_same_sentence_pairs_never_hold_a_token_outside_sentences():
    view = view_from_csm(torch.zeros(1, 1, 1, 7, 7), batch_of(IDS, SENTENCES))
    # sentence 0 = {1, 2}, sentence 1 = {3}; [CLS], [SEP] and padding (-1) are in no sentence
    assert pair_set(features(view)["same"][0], 7) == {(1, 2)}


def test_identical_pairs_exclude_special_tokens_and_padding():
    ids = torch.tensor([[CLS, 7, 8, 7, SEP, SEP, PAD, PAD]])  # two [SEP] and two padding tokens share an id
    view = view_from_csm(torch.zeros(1, 1, 1, 8, 8), batch_of(ids))
    assert pair_set(features(view)["identical"][0], 8) == {(1, 3)}


def test_identical_pairs_follow_the_statistics_token_mask():
    ids = torch.tensor([[CLS, 7, 8, 7, SEP]])
    view = view_from_csm(torch.zeros(1, 1, 1, 5, 5), batch_of(ids), include_special=False)
    assert pair_set(features(view)["identical"][0], 5) == {(1, 3)}
    assert features(view)["valid"].sum() == 3  # pairs among the three content tokens


def test_unknown_tokens_never_form_identical_pairs():
    UNK = 100
    ids = torch.tensor([[CLS, UNK, 7, UNK, 7, SEP]])  # two [UNK] (say an emoji and a snowman) and two 7s
    batch = batch_of(ids)
    assert pair_set(features(view_from_csm(torch.zeros(1, 1, 1, 6, 6), batch))["identical"][0], 6) == {(1, 3), (2, 4)}
    batch["unknown_mask"] = ids == UNK
    assert pair_set(features(view_from_csm(torch.zeros(1, 1, 1, 6, 6), batch))["identical"][0], 6) == {(2, 4)}


def test_collate_marks_real_unknown_tokens_only():
    import numpy as np

    from attnsim.data.module import collate_windows
    from attnsim.data.windows import Window

    ids = np.array([101, 100, 7, 100, 102, 0], dtype=np.int32)
    mask = np.array([1, 1, 1, 1, 1, 0], dtype=np.int8)
    window = Window("d", ids, mask, np.zeros(6, bool), np.zeros(6, np.int32), np.zeros((6, 2), np.int32))
    assert "unknown_mask" not in collate_windows([(0, window)])
    marked = collate_windows([(0, window)], unk_token_id=100)["unknown_mask"]
    assert marked.tolist() == [[False, True, False, True, False, False]]
    padded_unk = collate_windows([(0, window)], unk_token_id=0)["unknown_mask"]  # padding is never marked
    assert not padded_unk.any()


def test_k_is_rounded_half_up():
    from attnsim.stats.pairs import top_fraction_counts

    def k(n: int, fraction: float) -> int:
        return int(top_fraction_counts(torch.arange(8)[None] < n, fraction)[0])

    # Python's round() would give 2 for 2.5 and 0 for 0.5 (half to even)
    assert [k(5, 0.5), k(3, 0.5), k(7, 0.5), k(1, 0.5), k(4, 0.3), k(0, 0.5)] == [3, 2, 4, 1, 1, 0]


def test_high_attention_pairs_use_either_direction():
    T = 4
    attention = torch.full((1, 1, 1, T, T), 0.01)
    attention[..., 2, 0] = 0.9  # query 2 attends to key 0: pair (0, 2) through A[j, i]
    attention[..., 1, 3] = 0.8  # pair (1, 3) through A[i, j]
    attention[..., 0, 1] = 0.5
    values = attention_pair_values(attention)
    assert torch.allclose(values[0, 0, 0], torch.tensor([0.5, 0.9, 0.01, 0.01, 0.8, 0.01]))  # (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
    # 6 valid pairs, top_fraction 1/3: the top 2 by max(A[i,j], A[j,i])
    view = view_from_csm(torch.zeros(1, 1, 1, T, T), batch_of(torch.tensor([[CLS, 7, 8, SEP]])), attention, top_fraction=1 / 3)
    assert pair_set(dense_pairs(view.attention_index, 6)[0, 0, 0], T) == {(0, 2), (1, 3)}


def test_high_sums_are_weighted_sums_over_high_pairs():
    T = 4
    csm = symmetric(T, {(0, 1): 5.0, (0, 2): 4.0, (1, 3): 3.0, (2, 3): -1.0}).expand(1, 1, 1, T, T).clone()
    view = view_from_csm(csm, batch_of(torch.tensor([[CLS, 7, 8, SEP]])), top_fraction=2 / 6)  # high: (0,1), (0,2)
    # pair order (0,1) (0,2) (0,3) (1,2) (1,3) (2,3); weights: column 0 picks (0,2) and (2,3), column 1 all pairs
    weights = torch.tensor([[[0.0, 1.0], [1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [1.0, 1.0]]])
    assert head_sums(view.high_index, weights)[0, 0, 0].tolist() == [1.0, 2.0]
    assert pair_sums(pair_values(csm), weights)[0, 0, 0].tolist() == [4.0 - 1.0, 5.0 + 4.0 + 3.0 - 1.0]  # the dense reference
    # the view's CSM sums over the pair classes: every pair valid, one sentence of the two content tokens (1, 2)
    assert view.class_value_sums[0, 0, 0].tolist() == [11.0, 0.0, 0.0, 0.0, 11.0]


def test_high_counts_count_each_layers_high_pairs_meeting_each_condition():
    T = 4
    layer0 = symmetric(T, {(0, 1): 5.0, (0, 2): 4.0})  # high: (0,1) d=1, (0,2) d=2
    layer1 = symmetric(T, {(0, 3): 5.0, (1, 3): 4.0})  # high: (0,3) d=3, (1,3) d=2
    csm = torch.stack([layer0, layer1])[:, None, None]  # (layer, batch, head, T, T)
    view = view_from_csm(csm, batch_of(torch.tensor([[CLS, 7, 8, SEP]])), top_fraction=2 / 6)

    def select(f):
        return [f["distance"] == 1, f["distance"] >= 2, f["valid"]]

    counts = view.high_counts(view.high_index, select)
    assert counts.dtype == view.sum_dtype and counts.shape == (1, 2, 1, 3)
    assert counts[0, :, 0].tolist() == [[1.0, 1.0, 2.0], [0.0, 2.0, 2.0]]
    # the same numbers as high_sums with 0/1 weights
    weights = view.high_sums(view.high_index, lambda f: torch.stack(select(f), -1).to(view.sum_dtype))
    assert torch.equal(weights, counts)
