"""Hand-worked checks of the CSM pair quantities and the CSMAccumulator."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from attnsim.stats.csm import CSMAccumulator, _csm_compute, _csm_update, _tie_update
from attnsim.stats.distance import DistanceAccumulator
from attnsim.stats.pairs import PairView, context_similarity, dense_pairs, select_top, top_fraction_counts, zscore_pairs
from tests.helpers.reference import pair_values, top_fraction_pairs

# One layer, one head, T = 4, d_head = 2.
Z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
# CSM = Z Zᵀ with zero diagonal, worked by hand:
CSM = torch.tensor(
    [
        [0.0, 0.0, 1.0, 2.0],
        [0.0, 0.0, 1.0, 0.0],
        [1.0, 1.0, 0.0, 2.0],
        [2.0, 0.0, 2.0, 0.0],
    ]
)
# pairs i<j in triu order (0,1) (0,2) (0,3) (1,2) (1,3) (2,3); distances 1 2 3 1 2 1
VALUES = [0.0, 1.0, 2.0, 1.0, 0.0, 2.0]


class Cfg:
    short_range = 1


def batch_of(lengths, seq_len):
    """A batch whose window b has lengths[b] real tokens followed by padding."""
    mask = torch.zeros(len(lengths), seq_len, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    return {
        "attention_mask": mask,
        "special_mask": torch.zeros(len(lengths), seq_len, dtype=torch.bool),
        "input_ids": torch.arange(seq_len).repeat(len(lengths), 1),
        "sentence_ids": torch.zeros(len(lengths), seq_len, dtype=torch.long),
    }


def view_of(z_windows, lengths, seq_len, top_fraction=0.34):
    z = torch.zeros(1, len(z_windows), 1, seq_len, 2)
    for b, zw in enumerate(z_windows):
        z[0, b, 0, : len(zw)] = zw
    return PairView(z, batch_of(lengths, seq_len), top_fraction=top_fraction)


def test_context_similarity_matches_hand_worked_matrix():
    assert torch.equal(context_similarity(Z), CSM)


def test_cosine_normalisation():
    cos = context_similarity(Z, "cosine")
    assert cos[0, 3] == pytest.approx(1.0)
    assert cos[0, 2] == pytest.approx(1 / math.sqrt(2))
    assert cos[1, 1] == 0.0


def test_pair_values_and_top_fraction_high_pairs():
    view = view_of([Z], [4], 4)
    assert pair_values(CSM).tolist() == VALUES
    assert view.pair_features(torch.arange(6)[None])["distance"][0].tolist() == [1, 2, 3, 1, 2, 1]
    # k = round(0.34 * 6) = 2: the two pairs with CSM 2, (0,3) and (2,3)
    assert view.high_index[0, 0, 0].tolist() == [2, 5]
    assert dense_pairs(view.high_index, 6)[0, 0, 0].tolist() == [False, False, True, False, False, True]


def test_top_fraction_counts_only_valid_pairs():
    values = torch.tensor([[[[5.0, 4.0, 3.0, 2.0, 1.0, 9.0]]]])  # (1, 1, 1, 6), T = 4
    pair_mask = torch.tensor([[True, True, False, True, False, False]])  # 3 valid pairs
    k = top_fraction_counts(pair_mask, 0.5).tolist()  # round(1.5) = 2 of the 3 valid
    assert k == [2]
    assert select_top(values, k, pair_mask[:, None, None, :], 6).tolist() == [[[[0, 1]]]]
    assert top_fraction_pairs(values, pair_mask, 0.5)[0, 0, 0].tolist() == [True, True, False, False, False, False]  # the dense reference agrees


def test_zscore_rule():
    values = torch.tensor([[[[0.0, 0.0, 0.0, 10.0]]]])
    pair_mask = torch.ones(1, 1, 1, 4, dtype=torch.bool)
    # mean 2.5, population std = sqrt((3 * 6.25 + 56.25) / 4) = 4.33; z of 10 = 1.73
    assert zscore_pairs(values, pair_mask, 1.5)[0, 0, 0].tolist() == [False, False, False, True]
    assert not zscore_pairs(values, pair_mask, 1.8).any()


def test_zscore_rule_through_the_view():
    # window 0: CSM values 0, 1, 2, 1, 0, 2 (mean 1, std sqrt(2/3) = 0.816): z of 2 = 1.22 -> (0,3) and (2,3) at 1.0
    # window 1: only tokens 0..2 real, pairs (0,1) (0,2) (1,2) = 0, 1, 1 (mean 2/3, std 0.471): z of 1 = 0.71
    view = PairView(torch.stack([Z, Z])[None, :, None], batch_of([4, 3], 4), high_rule="zscore", zscore=0.7)
    assert view.high_index[:, 0, 0].tolist() == [[2, 5], [1, 3]]  # window 1: (0,2) and (1,2); slots padded to 2
    assert view.high_count[:, 0, 0].tolist() == [2, 2]
    strict = PairView(torch.stack([Z, Z])[None, :, None], batch_of([4, 3], 4), high_rule="zscore", zscore=1.0)
    assert strict.high_index[:, 0, 0].tolist() == [[2, 5], [6, 6]]  # window 1 has no pair above 1.0: sentinel P = 6
    assert strict.high_count[:, 0, 0].tolist() == [2, 0]


def test_functional_update_and_compute_with_hand_made_tensors():
    # one layer, one head, T = 3: pairs (0,1) (0,2) (1,2) at distances 1 2 1; one window, all valid
    by_pair = torch.tensor([[[2.0, -1.0, 4.0]]])
    # shifted sums (B, L, H) about K = 1: deviations 1, -2, 3
    sums = SimpleNamespace(
        by_pair=by_pair,
        distance_sum=torch.tensor([[[0.0, 6.0, -1.0]]]),  # by distance: 2 + 4 at d = 1, -1 at d = 2
        shift=torch.tensor([[[1.0]]]),
        shifted=torch.tensor([[[2.0]]]),
        squares=torch.tensor([[[1.0 + 4.0 + 9.0]]]),
    )
    class_counts = torch.tensor([[3.0, 0.0, 0.0, 0.0, 3.0]])  # 3 valid pairs, no sentence, none identical
    by_distance = torch.tensor([[0.0, 2.0, 1.0]])[:, None].expand(1, 5, 3) * torch.tensor([1.0, 0, 0, 0, 1])[None, :, None]
    high = torch.tensor([[[0.0, 1.0, 0.0]]])  # one high pair, at distance 1
    chance = torch.tensor([[[0.0, 2 / 3, 1 / 3]]])
    state = _csm_update(sums, class_counts, by_distance, torch.ones(1, 3, dtype=torch.bool), high, chance)
    assert state["pair_count"].item() == 3 and state["csm_window_sum"].tolist() == [[5.0]]
    assert state["csm_centred"].item() == pytest.approx(14 - 4 / 3)  # Σ (x - 5/3)² = 38/3
    assert state["distance_sum"].tolist() == [[[0.0, 6.0, -1.0]]] and state["distance_count"].tolist() == [0.0, 2.0, 1.0]
    state.update(_tie_update(torch.tensor([[[1]]]), torch.tensor([[[1]]])))  # its one high pair decided by a tie
    out = _csm_compute(state, 3)
    assert (out["tie_share"].item(), out["degenerate_share"].item(), out["degenerate"].item()) == (1.0, 1.0, 1.0)
    assert out["mean"].item() == pytest.approx(5 / 3)
    assert out["std"].item() == pytest.approx(math.sqrt(21 / 3 - 25 / 9))
    assert out["distance_mean"][0, 0, 1:].tolist() == [3.0, -1.0]
    assert out["distance_high_ratio"][0, 0, 1:].tolist() == [pytest.approx(1.5), 0.0]  # 1 / (2/3) at d = 1
    assert "short_range_share" not in out  # the distance finding's (attnsim.stats.distance)
    assert out["matrix"][0, 0].nan_to_num(9.0).tolist() == [[9.0, 2.0, -1.0], [2.0, 9.0, 4.0], [-1.0, 4.0, 9.0]]


def expected_hand_worked():
    return {
        "mean": 1.0,  # 6 / 6
        "std": math.sqrt(10 / 6 - 1),
    }


def expected_distance_hand_worked():
    """The distance scalars of the same window (the ``distance`` finding's, short_range = 1)."""
    return {
        "high_mean_distance": 2.0,  # high pairs at distances 3 and 1
        # chance by distance = k * n_d / n = 2 * (3, 2, 1) / 6
        "high_mean_distance_chance": (1 * 1 + 2 * 2 / 3 + 3 * 1 / 3) / 2,
        "short_range_share": 0.5,  # d <= 1: (2,3)
        "short_range_share_chance": 0.5,
        # long range: d >= T/2 = 2 -> (0,3) only; chance (2/3 + 1/3) / 2
        "long_range_share": 0.5,
        "long_range_share_chance": 0.5,
    }


def test_accumulator_hand_worked():
    acc = CSMAccumulator(1, 1, 4)
    acc.update(view_of([Z], [4], 4))
    out = acc.compute()
    for name, value in expected_hand_worked().items():
        assert out[name][0, 0].item() == pytest.approx(value), name
    # mean CSM by distance: d1 (0+1+2)/3, d2 (1+0)/2, d3 2
    assert out["distance_mean"][0, 0, 1:].tolist() == pytest.approx([1.0, 0.5, 2.0])
    # high / chance by distance: 1/1, 0/(2/3), 1/(1/3)
    assert out["distance_high_ratio"][0, 0, 1:].tolist() == pytest.approx([1.0, 0.0, 3.0])
    matrix = out["matrix"][0, 0]
    assert torch.isnan(matrix.diagonal()).all()
    off = ~torch.eye(4, dtype=torch.bool)
    assert torch.allclose(matrix[off], CSM.double()[off])
    distance = DistanceAccumulator(1, 1, 4, short_range=1)
    distance.update(view_of([Z], [4], 4))
    got = distance.compute()
    for name, value in expected_distance_hand_worked().items():
        assert got[name][0, 0].item() == pytest.approx(value), name
    assert torch.allclose(got["distance_high_ratio"], out["distance_high_ratio"], equal_nan=True)  # one profile, two tables


def test_distance_scalars_are_computed_once_by_the_distance_finding():
    """The six distance scalars are computed by the ``distance`` finding only, not again by ``csm``."""
    from attnsim.findings.csm import CSMFinding
    from attnsim.findings.distance import DistanceFinding

    acc = CSMAccumulator(1, 1, 4)
    acc.update(view_of([Z], [4], 4))
    assert set(acc.compute()) == {
        "mean",
        "std",
        "tie_share",
        "degenerate_share",
        "degenerate",
        "matrix",
        "distance_mean",
        "distance_high_ratio",
        "distance_bins",
    }
    assert CSMFinding.statistics == ("mean", "std", "tie_share", "degenerate_share", "degenerate")
    assert set(expected_distance_hand_worked()) <= set(DistanceFinding.statistics)


def test_padding_does_not_change_a_window():
    """Z padded to T = 6 and batched with a full window of random vectors: Z's own statistics are unchanged."""
    padded = CSMAccumulator(1, 1, 6)
    padded.update(view_of([Z], [4], 6))
    out = padded.compute()
    for name, value in expected_hand_worked().items():
        assert out[name][0, 0].item() == pytest.approx(value), name
    distance = DistanceAccumulator(1, 1, 6, short_range=1)
    distance.update(view_of([Z], [4], 6))
    got = distance.compute()
    for name, value in expected_distance_hand_worked().items():
        if not name.startswith("long_range"):  # long range is d >= T/2 of the padded length
            assert got[name][0, 0].item() == pytest.approx(value), name

    torch.manual_seed(0)
    other = torch.randn(6, 2)
    together = CSMAccumulator(1, 1, 6)
    together.update(view_of([Z, other], [4, 6], 6))
    alone_other = CSMAccumulator(1, 1, 6)
    alone_other.update(view_of([other], [6], 6))
    merged = padded.merge(alone_other).compute()
    for name, value in together.compute().items():
        assert torch.allclose(value, merged[name], equal_nan=True, atol=1e-6), name


def test_merge_two_halves_equals_whole():
    torch.manual_seed(1)
    windows = [torch.randn(8, 2) for _ in range(4)]
    lengths = [8, 6, 8, 5]
    whole = CSMAccumulator(1, 1, 8)
    whole.update(view_of(windows, lengths, 8, 0.1))
    first, second = CSMAccumulator(1, 1, 8), CSMAccumulator(1, 1, 8)
    first.update(view_of(windows[:2], lengths[:2], 8, 0.1))
    second.update(view_of(windows[2:], lengths[2:], 8, 0.1))
    merged = first.merge(second).compute()
    for name, value in whole.compute().items():
        assert torch.allclose(value, merged[name], equal_nan=True, atol=1e-6), name


def test_specials_excluded_when_configured():
    batch = batch_of([4], 4)
    batch["special_mask"][0, 0] = True
    z = Z.reshape(1, 1, 1, 4, 2)
    view = PairView(z, batch, include_special=False, top_fraction=0.34)
    # only pairs among tokens 1..3 remain: (1,2) (1,3) (2,3)
    assert view.pair_features(torch.arange(6)[None])["valid"][0].tolist() == [False, False, False, True, True, True]
    acc = CSMAccumulator(1, 1, 4)
    acc.update(view)
    assert acc.compute()["mean"][0, 0].item() == pytest.approx((1 + 0 + 2) / 3)


@pytest.mark.parametrize("path", ["compiled", "fallback", "blockwise"])
def test_std_of_a_sink_like_head_matches_float64(path, monkeypatch):
    """A head whose CSM sits ~100 spreads from 0 (an attention-sink head: every token's Z nearly the same vector):
    csm/std within 1e-6 of a float64 recomputation on every walk (the one-pass E[x²] - E[x]² lost 1e-3 here)."""
    from attnsim.stats.pairs.blocks import BlockPairView

    if path == "fallback":
        monkeypatch.setenv("ATTNSIM_COMPILED", "0")
    generator = torch.Generator().manual_seed(0)
    layers, heads, seq_len, d = 1, 2, 24, 16
    lengths = [24, 17, 20]
    common = torch.randn(1, 1, heads, 1, d, generator=generator) * 3
    z = common + 0.05 * torch.randn(layers, len(lengths), heads, seq_len, d, generator=generator)  # (L, B, H, T, d)
    batch = batch_of(lengths, seq_len)
    view = BlockPairView(list(z), batch, block_rows=5) if path == "blockwise" else PairView(z, batch)
    acc = CSMAccumulator(layers, heads, seq_len)
    acc.update(view)
    got = acc.compute()
    csm = context_similarity(z.double())  # float64 throughout
    values = [[torch.cat([pair_values(csm[0, b, h, :n, :n]) for b, n in enumerate(lengths)]) for h in range(heads)]]
    want_mean = torch.tensor([[v.mean().item() for v in row] for row in values], dtype=torch.float64)
    want_std = torch.tensor([[v.std(unbiased=False).item() for v in row] for row in values], dtype=torch.float64)
    assert float((want_mean / want_std).abs().min()) > 80  # the case that cancels (SmolLM2 has a head at about 100)
    torch.testing.assert_close(got["std"], want_std, rtol=1e-6, atol=0)
    torch.testing.assert_close(got["mean"], want_mean, rtol=1e-7, atol=0)


def test_long_windows_keep_the_mean_matrix_by_cells_of_tokens(monkeypatch):
    """Windows longer than MATRIX_CELLS keep the corpus-mean matrix by cells of ceil(T / MATRIX_CELLS) tokens, each cell
    the mean over all its valid pairs of all windows (counts weight the windows). By hand, with MATRIX_CELLS = 3 and
    T = 6 (cells of 2 tokens): Z = [1,0] [0,1] [1,1] [2,0] [0,2] [1,-1], window 1 of 6 tokens, window 2 the same
    with its last token padded. Cell (0, 2): pairs (0,4) (0,5) (1,4) (1,5) = 0 1 2 -1 in window 1, (0,4) (1,4) = 0 2
    in window 2: 4 / 6. Diagonal cells hold their one pair: CSM(0,1) = 0, CSM(2,3) = 2, CSM(4,5) = -2 (window 1 only)."""
    from attnsim.stats.pairs import geometry

    monkeypatch.setattr(geometry, "MATRIX_CELLS", 3)
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0], [0.0, 2.0], [1.0, -1.0]])
    acc = CSMAccumulator(1, 1, 6)
    assert acc.cell == 2 and acc.pool_sum.shape == (1, 1, 3, 3)
    acc.update(view_of([z, z[:5]], [6, 5], 6))
    matrix = acc.compute()["matrix"][0, 0]
    assert matrix.flatten().tolist() == pytest.approx([0.0, 1.0, 2 / 3, 1.0, 2.0, 1.0, 2 / 3, 1.0, -2.0])
