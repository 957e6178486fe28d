"""The fast paths of PairView: block-preselected top-k, the tie rule, window-by-window passes
(any chunk size, CPU or accelerator layout), per-layer inputs; and the figure/table helpers they feed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnsim.stats.pairs.view as pairs
from attnsim.stats.anchors import AnchorAccumulator
from attnsim.stats.attention_regions import AttentionRegionAccumulator
from attnsim.stats.csm import CSMAccumulator
from attnsim.stats.distance import DistanceAccumulator
from attnsim.stats.noise import NoiseAccumulator
from attnsim.stats.pairs import (
    PairView,
    context_similarity,
    dense_pairs,
    exact_top,
    exact_top_per_row,
    partition_top,
    top_indices,
)
from attnsim.stats.repetition import RepetitionAccumulator
from attnsim.stats.sentences import SentenceAccumulator
from attnsim.stats.separators import SeparatorAccumulator
from tests.helpers.findings import CATEGORIES, VOCAB, assert_same, random_windows, stack_view

L, H, T = 2, 3, 20


def accumulators():
    return {
        "csm": CSMAccumulator(L, H, T),
        "distance": DistanceAccumulator(L, H, T, short_range=2),
        "sentences": SentenceAccumulator(L, H),
        "anchors": AnchorAccumulator(L, H, VOCAB),
        "repetition": RepetitionAccumulator(L, H),
        "attention_regions": AttentionRegionAccumulator(L, H),
        "separators": SeparatorAccumulator(L, H, CATEGORIES),
        "noise": NoiseAccumulator(L, H, short_range=2),
    }


def computed(view: PairView) -> dict:
    out = {}
    for name, acc in accumulators().items():
        acc.update(view)
        out.update({f"{name}/{key}": value for key, value in acc.compute().items()})
    return out


@pytest.mark.parametrize("n, k", [(8128, 163), (8128, 1), (1000, 21), (997, 30), (50, 40), (12, 12)])
def test_block_preselection_finds_the_topk_set(n, k):
    generator = torch.Generator().manual_seed(n + k)
    values = torch.randn(7, n, generator=generator)
    values[:, ::5] = float("-inf")  # invalid entries rank last
    k = min(k, int(torch.isfinite(values[0]).sum()))
    got = top_indices(values, k).sort(-1).values
    want = values.topk(k, -1).indices.sort(-1).values
    assert torch.equal(got, want)


@pytest.mark.parametrize("n, k", [(8128, 163), (8128, 1), (8125, 162), (1000, 21), (997, 30), (50, 40), (13, 12)])
def test_partition_selection_equals_the_exact_rule(n, k):
    generator = torch.Generator().manual_seed(7 * n + k)
    values = torch.randn(2, 5, n, generator=generator)
    values[..., ::3] = float("-inf")  # invalid entries rank last
    k = min(k, int(torch.isfinite(values).sum(-1).min()) - 1)
    got = partition_top(values, k)
    assert got is not None and got.shape == (2, 5, k)
    assert torch.equal(got, exact_top(values, k).sort(-1).values)  # the same positions, ascending


def test_partition_selection_leaves_ties_and_nan_to_the_exact_rule():
    tied = torch.tensor([[0.0, 5.0, 2.0, 5.0, 2.0, 2.0, 1.0, 2.0]])
    assert partition_top(tied, 3) is None  # the 3rd and 4th largest are both 2
    assert partition_top(tied, 2).tolist() == [[1, 3]]  # 5, 5 then 2: no tie at the 2nd value
    blocks = torch.zeros(1, 4000)
    blocks[0, 7], blocks[0, 9] = 1.0, 1.0  # a tie among block maxima at the k-th
    assert partition_top(blocks, 1) is None and partition_top(blocks, 2).tolist() == [[7, 9]]
    with_nan = torch.randn(3, 100)
    with_nan[1, 5] = float("nan")
    assert partition_top(with_nan, 10) is None
    assert partition_top(torch.randn(3, 100, dtype=torch.float64), 10) is None  # float32 only


def test_a_tie_at_the_kth_value_goes_to_the_lowest_positions():
    values = torch.tensor([[0.0, 5.0, 2.0, 5.0, 2.0, 2.0, 1.0, 2.0]])
    assert sorted(exact_top(values, 3)[0].tolist()) == [1, 2, 3]  # 5, 5 and the first 2
    assert sorted(exact_top(values, 4)[0].tolist()) == [1, 2, 3, 4]
    counts = torch.tensor([[3], [1]])
    both = torch.cat([values, values])
    index = exact_top_per_row(both, counts, 3, sentinel=8)
    assert sorted(index[0].tolist()) == [1, 2, 3] and sorted(index[1].tolist()) == [1, 8, 8]


@pytest.mark.parametrize("rule", ["top_fraction", "zscore"])
def test_window_passes_do_not_depend_on_chunks_or_layout(monkeypatch, rule):
    windows = random_windows([20, 11, 17, 20, 6], T, L, H, seed=3)
    reference = computed(stack_view(windows, high_rule=rule, zscore=1.0))
    monkeypatch.setattr(pairs, "CHUNK_ELEMENTS_CPU", 1)  # one window per chunk
    assert_same(computed(stack_view(windows, high_rule=rule, zscore=1.0)), reference)
    monkeypatch.setattr(PairView, "_on_accelerator", lambda self: True)  # whole batch, batched products, several k
    # float64 products here against the compiled walk's float32 ones (each value within product_error): the CSM ratio
    # of near-cancelling means (an outside mean 50 times smaller than its terms) moves by up to 1.1e-5 between them
    assert_same(computed(stack_view(windows, high_rule=rule, zscore=1.0)), reference, rtol=3e-5)


def test_per_layer_inputs_equal_stacked_tensors():
    windows = random_windows([20, 13], T, L, H, seed=4)
    stacked = stack_view(windows)
    z = torch.stack([w["z"] for w in windows], 1)  # (L, B, H, T, d)
    layers = PairView(tuple(z.unbind(0)), stacked.batch, tuple(stacked.attention.unbind(1)), top_fraction=stacked.top_fraction)
    assert_same(computed(layers), computed(stacked))
    assert torch.equal(layers.high_index, stacked.high_index) and torch.equal(layers.attention_index, stacked.attention_index)
    assert torch.equal(layers.csm_windows(1), context_similarity(z[:, :1]).transpose(0, 1)) and torch.equal(layers.attention_windows(1), stacked.attention[:1])


def test_high_and_high_attention_indices_list_valid_pairs_and_their_overlap():
    view = stack_view(random_windows([20, 9], T, L, H, seed=5))
    high, high_attention = dense_pairs(view.high_index, view.n_pairs).transpose(0, 1), dense_pairs(view.attention_index, view.n_pairs).transpose(0, 1)
    assert torch.equal(high.sum(-1), view.high_count.transpose(0, 1))
    valid = view.pair_features(torch.arange(view.n_pairs).expand(view.batch_size, -1))["valid"]  # (B, P)
    assert not (high & ~valid[None, :, None, :]).any()  # never an invalid pair
    assert torch.equal(high_attention.sum(-1).float(), view.high_attention_count.transpose(0, 1))
    assert torch.equal((high & high_attention).sum(-1).float(), view.high_in_attention.transpose(0, 1))


def test_mask_edges_outline_a_block():
    from attnsim.plots.common import mask_edges

    mask = np.zeros((4, 5), bool)
    mask[1:3, 1:4] = True
    edges = mask_edges(mask)
    assert len(edges) == 2 * (2 + 3)  # unit edges around a 2 x 3 block
    xs, ys = edges[..., 0], edges[..., 1]
    assert xs.min() == 0.5 and xs.max() == 3.5 and ys.min() == 0.5 and ys.max() == 2.5


def test_sink_tables_load_with_mlflow_and_figures_are_pngs(tracking_uri, tmp_path):
    import mlflow
    import pandas as pd
    from PIL import Image

    from attnsim.plots.layers import by_layer
    from attnsim.tracking.store import Tracker

    tracker = Tracker(tracking_uri)  # also $MLFLOW_TRACKING_URI: mlflow.load_table searches runs through it
    frame = pd.DataFrame({"layer": [0, 1], "head": [0, 0], "value": [0.5, 0.25]})
    with tracker.run("tables") as sink:
        sink.log_table(frame, "tables/a.json")
        sink.log_table(frame, "tables/b.json")
        sink.log_figure(by_layer({"x": torch.rand(2, 3)}, "title", "y"), "figures/x.png", dpi=50)
        run_id = sink.run_id
    client = mlflow.MlflowClient(tracker.uri)
    experiment = client.get_run(run_id).info.experiment_id
    loaded = client.load_table(experiment, "tables/b.json", run_ids=[run_id], extra_columns=["run_id"])
    assert loaded[["layer", "head", "value"]].values.tolist() == frame.values.tolist() and set(loaded["run_id"]) == {run_id}
    path = client.download_artifacts(run_id, "figures/x.png", str(tmp_path))
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size[0] > 100
