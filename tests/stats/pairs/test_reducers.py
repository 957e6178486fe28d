"""attnsim.stats.pairs.reducers and the view contract. The statistics' one contract: each statistic, written once, gives the same numbers through the dense view,
the blockwise walk and the single-window view (attnsim.stats.pairs.view).

A hand-built window (T = 9: [CLS], two sentences with repeated ids, [SEP] and one padding token; 2 layers, 2 heads)
with small integer vectors whose CSM sums to 0 over the valid pairs (so that every CSM sum and both paths' variance
shifts are exact) and attention recomputed from integer queries and keys as the blockwise walk recomputes it.
"""

from __future__ import annotations

import pytest
import torch

from attnsim.capture.queries import QueryKey
from attnsim.stats.anchors import AnchorAccumulator
from attnsim.stats.attention_regions import AttentionRegionAccumulator
from attnsim.stats.csm import CSMAccumulator
from attnsim.stats.distance import DistanceAccumulator
from attnsim.stats.noise import NoiseAccumulator
from attnsim.stats.pairs import ChunkReducer, PairView, Piece
from attnsim.stats.pairs.blocks import BlockPairView
from attnsim.stats.pairs.scores import attention_rows
from attnsim.stats.repetition import RepetitionAccumulator
from attnsim.stats.sentences import SentenceAccumulator
from attnsim.stats.separators import SeparatorAccumulator

L, H, T, D = 2, 2, 9, 3
IDS = torch.tensor([[101, 7, 8, 7, 9, 8, 7, 102, 0]])
WINDOW = {
    "input_ids": IDS,
    "attention_mask": (IDS != 0).long(),
    "special_mask": (IDS == 101) | (IDS == 102),
    "sentence_ids": torch.tensor([[-1, 0, 0, 0, 1, 1, 1, -1, -1]]),
}


def hand_built():
    """(z (L, 1, H, T, d), query-keys (L,), attention (L, 1, H, T, T)) of the window."""
    g = torch.Generator().manual_seed(0)
    real = IDS[0] != 0

    def head() -> torch.Tensor:  # integer vectors whose CSM sums to 0 over the valid pairs: |sum z|^2 = sum |z|^2
        while True:
            v = torch.randint(-2, 3, (T, D), generator=g).float()
            if float((v[real].sum(0) ** 2).sum()) == float((v[real] ** 2).sum()):
                return v

    z = torch.stack([torch.stack([head() for _ in range(H)]) for _ in range(L)])[:, None]
    q, k = (torch.randint(-1, 2, (L, 1, H, T, D), generator=g).float() for _ in range(2))
    query_keys = [QueryKey(q[layer], k[layer], 0.5, None, False) for layer in range(L)]
    attention = torch.stack([attention_rows(qk, 0, T) for qk in query_keys])  # the blockwise walk's own probabilities
    return z, query_keys, attention


def statistics(view: PairView) -> dict:
    """Every computed value of the pair statistics, by ``statistic/name``."""
    accumulators = {
        "sentences": SentenceAccumulator(L, H),
        "repetition": RepetitionAccumulator(L, H),
        "noise": NoiseAccumulator(L, H),
        "regions": AttentionRegionAccumulator(L, H),
        "separators": SeparatorAccumulator(L, H, {"cls": [101], "sep": [102]}),
        "anchors": AnchorAccumulator(L, H, 200),
        "distance": DistanceAccumulator(L, H, T),
        "csm": CSMAccumulator(L, H, T),
    }
    out = {}
    for name, acc in accumulators.items():
        acc.update(view)
        out.update({f"{name}/{key}": value for key, value in acc.compute().items()})
    return out


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.nan_to_num(-7.0), b.nan_to_num(-7.0)) and torch.equal(a.isnan(), b.isnan())


@pytest.mark.parametrize("block_rows", [T, 4])
def test_one_statistic_three_views(block_rows):
    z, query_keys, attention = hand_built()
    settings = dict(top_fraction=0.2)
    # float64 pair arithmetic on the dense views, as the blockwise path's (PairView.sum_dtype)
    dense = PairView(z, WINDOW, attention, sum_dtype=torch.float64, **settings)
    single = PairView.single_window(z[:, 0], {key: value[0] for key, value in WINDOW.items()}, attention[:, 0], sum_dtype=torch.float64, **settings)
    blockwise = BlockPairView(list(z), WINDOW, query_keys, block_rows=block_rows, **settings)
    for name in ("high_index", "high_count", "attention_index", "high_in_attention", "class_counts", "class_counts_by_distance"):
        assert torch.equal(getattr(dense, name), getattr(single, name)), name
        assert torch.equal(getattr(dense, name).to(getattr(blockwise, name).dtype), getattr(blockwise, name)), name
    assert torch.equal(dense.class_value_sums.double(), blockwise.class_value_sums)
    want, from_single, from_blocks = statistics(dense), statistics(single), statistics(blockwise)
    assert want.keys() == from_single.keys() == from_blocks.keys() and len(want) >= 50
    assert sum(int(value.isfinite().sum()) for value in want.values()) > 200  # a case that says something
    for name, value in want.items():
        assert same(value, from_single[name]), name
        if block_rows < T and name.startswith("separators/"):
            # the attention's float32 sums over row blocks are added block by block: float32 rounding only
            torch.testing.assert_close(from_blocks[name], value, rtol=1e-6, atol=1e-7, equal_nan=True, msg=name)
        else:
            assert same(value, from_blocks[name]), name


def test_the_single_window_view_is_a_batch_of_one():
    z, _, attention = hand_built()
    view = PairView.single_window(z[:, 0], {key: value[0] for key, value in WINDOW.items()}, attention[:, 0])
    assert view.batch_size == 1 and view.high_index.shape[:3] == (1, L, H) and view.attention.shape == (1, L, H, T, T)
    assert view.csm_windows(1).shape == (1, L, H, T, T) and view.sum_dtype == torch.float32  # the dense path's


class RowsSeen(ChunkReducer):
    """A statistic's reducer as the protocol sees it: which (window, layer, query row) each piece held, and the CSM
    summed per head over the pieces' pairs."""

    source = "csm"

    def __init__(self, view: PairView) -> None:
        self.rows = torch.zeros(view.batch_size, view.n_layers, view.seq_len, dtype=torch.long)
        self.total = torch.zeros(view.batch_size, view.n_layers, view.n_heads, dtype=torch.float64)

    def update(self, view: PairView, piece: Piece) -> None:
        self.rows[piece.windows, piece.layers, piece.rows[0] : piece.rows[1]] += 1
        assert piece.values.shape[-1] == piece.pairs[1] - piece.pairs[0]
        self.total[piece.windows, piece.layers] += piece.values.sum(-1, dtype=torch.float64)


class KeysSeen(RowsSeen):
    source = "attention"

    def update(self, view: PairView, piece: Piece) -> None:
        self.rows[piece.windows, piece.layers, piece.rows[0] : piece.rows[1]] += 1
        self.total[piece.windows, piece.layers] += piece.values.sum((-1, -2), dtype=torch.float64)  # each row sums to 1


@pytest.mark.parametrize("block_rows", [T, 4])
def test_a_reducer_sees_every_row_once_on_every_path(block_rows):
    z, query_keys, attention = hand_built()
    views = [
        PairView(z, WINDOW, attention, reducers=(RowsSeen, KeysSeen)),
        BlockPairView(list(z), WINDOW, query_keys, block_rows=block_rows, reducers=(RowsSeen, KeysSeen)),
    ]
    for kind in (RowsSeen, KeysSeen):
        dense, blockwise = (view.reduced(kind) for view in views)
        assert (dense.rows == 1).all() and (blockwise.rows == 1).all()
        assert torch.equal(dense.total, blockwise.total)  # integer CSM values; rows of probabilities summed in float64
    assert torch.equal(views[0].reduced(RowsSeen).total, torch.zeros(1, L, H, dtype=torch.float64))  # the hand-built CSM sums to 0
