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
from tests.helpers.findings import CATEGORIES, CLS, PAD, SEP, batch_of, random_windows
from tests.helpers.reference import dense_reference

L, H, T = 2, 3, 20


def inputs(lengths=(20, 11, 17, 6), seed=7):
    windows = random_windows(list(lengths), T, L, H, seed=seed)
    ids = torch.stack([w["ids"] for w in windows])
    batch = batch_of(ids, torch.stack([w["sentence"] for w in windows]))
    return torch.stack([w["z"] for w in windows], 1), batch, torch.stack([w["attention"] for w in windows], 1)


@pytest.mark.parametrize("include_special", [True, False])
@pytest.mark.parametrize("lengths", [(20, 11, 17, 6), (20, 20)])  # padded windows; only whole ones (the entropy's unweighted sum)
@pytest.mark.parametrize("layered", [False, True])  # stacked tensors, or the capture's per-layer tensors (the attention walked layer by layer)
def test_view_matches_a_dense_float64_recomputation(include_special, lengths, layered):
    z, batch, attention = inputs(lengths)
    if layered:
        view = PairView(list(z.unbind(0)), batch, list(attention.unbind(0)), top_fraction=0.1, include_special=include_special)
        assert view._captured_attention_layers is not None  # the walk of per-layer pieces
    else:
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


def test_position_profile_is_one_under_uniform_attention_and_finds_a_sink():
    """Mass each key position receives per query, over uniform attention: 1 everywhere for uniform attention;
    for attention all on the first token, T at position 0 and 0 elsewhere."""
    from attnsim.stats.pairs import PairView
    from attnsim.stats.separators import SeparatorAccumulator

    seq_len = 6
    ids = torch.tensor([[101, 5, 6, 7, 8, 102], [101, 5, 6, 102, PAD, PAD]])
    batch = batch_of(ids)
    real = batch["attention_mask"].float()
    uniform = (real[:, None, :] / real.sum(-1)[:, None, None]).expand(2, seq_len, seq_len).contiguous()  # (B, T, T)
    sink = torch.zeros(2, seq_len, seq_len)
    sink[..., 0] = 1.0
    for attention, want in ((uniform, None), (sink, "sink")):
        acc = SeparatorAccumulator(1, 1, {"cls": [101], "sep": [102], "period": [], "comma": []}, seq_len=seq_len)
        view = PairView(torch.randn(1, 2, 1, seq_len, 2), batch, attention[None, :, None])
        acc.update(view)
        out = acc.compute()
        ratio = out["position_mass"] / out["position_mass_chance"]
        assert torch.equal(out["position_bins"], torch.arange(seq_len))
        if want is None:
            torch.testing.assert_close(ratio[0, 0, :4], torch.ones(4, dtype=torch.float64))
        else:
            # 10 queries all on position 0; uniform gives position 0: 6 * 1/6 + 4 * 1/4 = 2 -> ratio 5
            assert ratio[0, 0, 0].item() == 5.0 and ratio[0, 0, 1:4].abs().sum().item() == 0.0


def test_position_profile_chance_of_a_causal_model_is_uniform_over_the_visible_keys():
    """A causal head's uniform attention (query i gives 1/(i+1) to keys 0..i) is its chance: ratio 1 at every position.
    Worked by hand for T = 4, one window, every token a query: key 0 receives 1 + 1/2 + 1/3 + 1/4 = 25/12,
    key 3 receives 1/4; per query (4 queries): 25/48 and 1/16."""
    from attnsim.stats.pairs import PairView
    from attnsim.stats.separators import SeparatorAccumulator

    seq_len = 4
    ids = torch.tensor([[5, 6, 7, 8]])
    batch = batch_of(ids, specials=())
    causal = torch.tril(torch.ones(seq_len, seq_len))
    causal = causal / causal.sum(-1, keepdim=True)
    acc = SeparatorAccumulator(1, 1, {"cls": [], "sep": [], "period": [], "comma": []}, causal=True, seq_len=seq_len)
    acc.update(PairView(torch.randn(1, 1, 1, seq_len, 2), batch, causal[None, None, None]))
    out = acc.compute()
    want = torch.tensor([25 / 48, 13 / 48, 7 / 48, 1 / 16], dtype=torch.float64)
    torch.testing.assert_close(out["position_mass_chance"][0, 0], want)
    torch.testing.assert_close(out["position_mass"][0, 0], want)
