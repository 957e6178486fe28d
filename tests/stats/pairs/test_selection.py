"""Ties at the k-th CSM value (attention-sink heads): how many high pairs the tie rule decided, on every walk."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnsim.stats.csm import CSMAccumulator
from attnsim.stats.pairs import PairView, TieCounts, kernels, pair_indices, tie_decided
from attnsim.stats.pairs.blocks import BlockPairView, StreamingTop
from tests.helpers.findings import batch_of, view_from_csm


def test_tie_decided_hand_worked():
    # 10 pairs, k = 2: one clear winner (9), four tied at the k-th value (5): one choice left among four -> decided
    values = torch.tensor([[9.0, 5.0, 1.0, 5.0, 1.0, 5.0, 1.0, 5.0, 1.0, 1.0]])
    valid = torch.ones(1, 10, dtype=torch.bool)
    assert tie_decided(values, valid, 2, torch.tensor([0.0])).tolist() == [1]
    assert tie_decided(values, valid, 5, torch.tensor([0.0])).tolist() == [0]  # 9 and all four 5s: no tie left out
    assert tie_decided(values, valid, 4, torch.tensor([0.0])).tolist() == [3]  # three of four 5s: decided by ties
    near = values + torch.tensor([[0.0, 0.1, 0.0, -0.1, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0]])
    assert tie_decided(near, valid, 2, torch.tensor([0.0])).tolist() == [0]  # distinct values: the model decides
    assert tie_decided(near, valid, 2, torch.tensor([0.2])).tolist() == [1]  # ... unless within the tolerance
    hidden = valid.clone()
    hidden[0, [3, 5, 7]] = False  # the other tied pairs invalid: one 5 left for one slot
    assert tie_decided(values, hidden, 2, torch.tensor([0.0])).tolist() == [0]
    assert tie_decided(values, valid, 0, torch.tensor([0.0])).tolist() == [0]


def test_csm_statistics_flag_a_head_decided_by_ties():
    # T = 5 (10 pairs); head 0 as above (k = round(0.2 * 10) = 2: one of its two choices by a tie), head 1 distinct
    pairs = pair_indices(5)
    csm = torch.zeros(1, 1, 2, 5, 5)
    tied = torch.tensor([9.0, 5.0, 1.0, 5.0, 1.0, 5.0, 1.0, 5.0, 1.0, 1.0])
    for head, values in enumerate([tied, torch.arange(10.0)]):
        csm[0, 0, head, pairs[0], pairs[1]] = values
        csm[0, 0, head, pairs[1], pairs[0]] = values
    batch = batch_of(torch.tensor([[11, 12, 13, 14, 15]]), specials=())
    view = view_from_csm(csm, batch, top_fraction=0.2)
    assert view.reduced(TieCounts).decided.tolist() == [[[1, 0]]]
    acc = CSMAccumulator(1, 2, 5)
    acc.update(view)
    out = acc.compute()
    assert out["tie_share"].tolist() == [[0.5, 0.0]]
    assert out["degenerate_share"].tolist() == [[1.0, 0.0]] and out["degenerate"].tolist() == [[1.0, 0.0]]


def _sink_vectors(windows=3, heads=2, seq_len=40, d=16, seed=0):
    # head 0: every token's vector the same (an attention sink): a constant CSM, every pair tied; head 1: random
    generator = torch.Generator().manual_seed(seed)
    z = torch.randn(1, windows, heads, seq_len, d, generator=generator)
    z[:, :, 0] = z[:, :, 0, :1]
    return z


def _lengths_batch(lengths, seq_len):
    mask = torch.zeros(len(lengths), seq_len, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    return {
        "input_ids": torch.arange(seq_len).repeat(len(lengths), 1) + 100,
        "attention_mask": mask,
        "special_mask": torch.zeros(len(lengths), seq_len, dtype=torch.bool),
        "sentence_ids": torch.zeros(len(lengths), seq_len, dtype=torch.long),
    }


@pytest.mark.parametrize("path", ["compiled", "fallback", "blockwise"])
def test_every_walk_counts_the_same_ties(path, monkeypatch):
    if path == "fallback":
        monkeypatch.setenv("ATTNSIM_COMPILED", "0")
    if path == "compiled" and not kernels.compiled_available():
        pytest.skip("numba is not installed")
    lengths, seq_len = [40, 33, 25], 40
    z = _sink_vectors(seq_len=seq_len)
    batch = _lengths_batch(lengths, seq_len)
    view = BlockPairView(list(z), batch, block_rows=7) if path == "blockwise" else PairView(z, batch)
    decided = view.reduced(TieCounts).decided  # (B, L, H)
    k = view.high_count[:, 0, 0]  # (B,)
    assert decided[:, 0, 0].tolist() == k.tolist()  # the sink head: every choice among equal values
    assert decided[:, 0, 1].tolist() == [0, 0, 0]  # random vectors: distinct values


def test_kernel_counts_as_the_reference():
    if not kernels.compiled_available():
        pytest.skip("numba is not installed")
    generator = torch.Generator().manual_seed(1)
    windows, heads, seq_len, d = 3, 4, 30, 8
    base = torch.randn(windows, 1, heads, 1, d, generator=generator)
    scale = torch.tensor([0.0, 1e-7, 1e-3, 1.0]).view(1, 1, heads, 1, 1)  # from exact ties to distinct values
    vectors = (base + scale * torch.randn(windows, 1, heads, seq_len, d, generator=generator)).float()
    tokens = torch.ones(windows, seq_len, dtype=torch.bool)
    tokens[1, 20:] = False
    rows, cols = pair_indices(seq_len)
    valid = tokens[:, rows] & tokens[:, cols]
    weights = torch.stack([valid.float()] * 5, 1)
    counts = [9, 4, 1]
    walked = kernels.compiled_csm_walk(vectors, tokens, counts, weights)
    for w, k in enumerate(counts):
        want = tie_decided(walked.pairs[w], valid[w], k, walked.error[w])
        assert torch.equal(walked.tie_decided[w], want), (w, walked.tie_decided[w], want)
    assert int(walked.tie_decided[0, 0, 0]) == 9 and int(walked.tie_decided[0, 0, 3]) == 0


def test_streaming_top_keeps_the_selection_and_reads_the_next_value():
    rng = np.random.default_rng(0)
    values = rng.choice(np.float32([1, 2, 3, 4]), size=200).astype(np.float32)
    for k in (1, 7, 30):
        plain, spare = StreamingTop(k), StreamingTop(k, spare=1)
        for start in range(0, 200, 23):
            block = values[start : start + 23]
            index = np.arange(start, start + len(block))
            for top in (plain, spare):
                chosen = block > top.threshold
                top.push(block[chosen], index[chosen])
        assert torch.equal(plain.result(k, 200), spare.result(k, 200))
        want = tie_decided(torch.from_numpy(values)[None], torch.ones(1, 200, dtype=torch.bool), k, torch.tensor([0.0]))
        assert spare.tie_decided(0.0) == int(want[0])
