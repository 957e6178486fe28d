"""The per-batch view against a dense float64 recomputation, and its single window walk shared by the findings' reducers."""

from __future__ import annotations

import pytest
import torch

from attnsim.config import StatsConfig
from attnsim.findings.attention_regions import AttentionRegionsFinding
from attnsim.findings.base import FindingContext, view_factory
from attnsim.findings.csm import CSMFinding
from attnsim.findings.separators import SeparatorsFinding
from attnsim.stats.attention_regions import AttentionRegionAccumulator, RegionInsideSums
from attnsim.stats.csm import CSMAccumulator, CSMPairSums
from attnsim.stats.pairs import ChunkReducer, PairView, TieCounts, dense_pairs
from attnsim.stats.separators import SeparatorAccumulator, SeparatorSums
from tests.helpers.findings import CATEGORIES, CLS, SEP, batch_of, random_windows
from tests.helpers.reference import dense_reference

L, H, T = 2, 3, 20


def inputs(lengths=(20, 11, 17, 6), seed=7):
    windows = random_windows(list(lengths), T, L, H, seed=seed)
    ids = torch.stack([w["ids"] for w in windows])
    batch = batch_of(ids, torch.stack([w["sentence"] for w in windows]))
    return torch.stack([w["z"] for w in windows], 1), batch, torch.stack([w["attention"] for w in windows], 1)


@pytest.mark.parametrize("include_special", [True, False])
@pytest.mark.parametrize("lengths", [(20, 11, 17, 6), (20, 20)])  # padded windows; only whole ones (the entropy's unweighted sum)
def test_view_matches_a_dense_float64_recomputation(include_special, lengths):
    z, batch, attention = inputs(lengths)
    view = PairView(z, batch, attention, top_fraction=0.1, include_special=include_special)
    ref = dense_reference(z, batch, attention, 0.1, include_special)
    high = dense_pairs(view.high_index, view.n_pairs).transpose(0, 1)
    high_attention = dense_pairs(view.attention_index, view.n_pairs).transpose(0, 1)
    assert torch.equal(high, ref["high"]) and torch.equal(high_attention, ref["high_attention"])

    def close(got, want):
        assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-4), (got.double() - want).abs().max()

    close(view.class_value_sums.transpose(0, 1), ref["class_sums"])
    close(view.reduced(CSMPairSums).by_pair, ref["by_pair"])
    csm_sums = view.reduced(CSMPairSums)  # the dense walk shifts each window by its own mean: nothing left over
    close(csm_sums.squares.transpose(0, 1), ref["squares"])
    assert float(csm_sums.shifted.abs().max()) < 1e-9 * max(1.0, float(csm_sums.shift.abs().max()))
    close(view.reduced(RegionInsideSums).inside.transpose(0, 1), ref["inside"])
    sums = view.reduced(SeparatorSums)
    close(sums.key_mass.transpose(0, 1), ref["key_mass"])
    close(sums.entropy.transpose(0, 1), ref["entropy"])
    close(sums.distance.transpose(0, 1), ref["distance"])


def counting_view(monkeypatch, factory=None, **settings):
    """A view of random windows that counts the chunks its CSM and attention walks compute."""
    calls = {"csm": 0, "attention": 0}
    csm_chunk, attention_chunk = PairView._csm_pair_chunk, PairView._attention_chunk

    def count_csm(self, start, stop, *args, **kwargs):
        calls["csm"] += 1
        return csm_chunk(self, start, stop, *args, **kwargs)

    def count_attention(self, start, stop):
        calls["attention"] += 1
        return attention_chunk(self, start, stop)

    monkeypatch.setattr(PairView, "_csm_pair_chunk", count_csm)
    monkeypatch.setattr(PairView, "_attention_chunk", count_attention)
    z, batch, attention = inputs()
    capture = type("Capture", (), {"vectors": z, "attention": attention})()
    view = factory(capture, batch) if factory is not None else PairView(z, batch, attention, **settings)
    return view, calls


def test_registered_reducers_share_one_walk_per_source(monkeypatch):
    from transformers import AutoTokenizer

    from tests.helpers.models import BUNDLED

    cfg = StatsConfig(top_fraction=0.1)
    tokenizer = AutoTokenizer.from_pretrained(BUNDLED)
    context = FindingContext(tokenizer=tokenizer, vocab_size=len(tokenizer))
    findings = [kind(L, H, T, cfg, context) for kind in (CSMFinding, AttentionRegionsFinding, SeparatorsFinding, CSMFinding)]
    factory = view_factory(findings, cfg)
    assert factory.keywords["reducers"] == (CSMPairSums, TieCounts, RegionInsideSums, SeparatorSums)
    view, calls = counting_view(monkeypatch, factory)
    assert view.capture is not None and view.top_fraction == 0.1
    chunks = len(view._chunks())
    accumulators = [CSMAccumulator(L, H, T), AttentionRegionAccumulator(L, H), SeparatorAccumulator(L, H, CATEGORIES)]
    for acc in accumulators:
        acc.update(view)
    assert calls == {"csm": chunks, "attention": chunks}  # one walk each, whatever the number of statistics

    # unregistered: each reducer read after its source was walked costs a walk of its own, with the same sums
    late, late_calls = counting_view(monkeypatch, top_fraction=0.1)
    late_accumulators = [CSMAccumulator(L, H, T), AttentionRegionAccumulator(L, H), SeparatorAccumulator(L, H, CATEGORIES)]
    for acc in late_accumulators:
        acc.update(late)
    assert late_calls["csm"] > chunks
    for acc, other in zip(accumulators, late_accumulators):
        for key, value in acc.compute().items():
            assert torch.equal(value.nan_to_num(0.0), other.compute()[key].nan_to_num(0.0)), key


def test_register_refuses_a_reducer_of_an_unknown_source():
    class Keys(ChunkReducer):
        source = "keys"

    view = PairView(torch.zeros(1, 1, 1, 4, 2), batch_of(torch.tensor([[CLS, 5, 6, SEP]])))
    with pytest.raises(ValueError, match="source 'keys'; a view walks only csm, attention"):
        view.register(Keys)


def test_a_reducer_of_attention_needs_attention():
    view = PairView(torch.zeros(1, 1, 1, 4, 2), batch_of(torch.tensor([[CLS, 5, 6, SEP]])))
    with pytest.raises(ValueError, match="needs attention probabilities"):
        view.reduced(SeparatorSums)
