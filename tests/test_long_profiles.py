"""Long windows: distance profiles binned logarithmically beyond 512 tokens, attention by absolute position,
seq_len up to the model's positions, the corpus-mean CSM pooled (README, "Long contexts")."""

from __future__ import annotations

import torch

from attnsim.stats.distance import bin_profile, distance_bins
from tests.helpers.findings import PAD, batch_of


def test_distance_bins_are_every_distance_up_to_512_then_logarithmic():
    assert torch.equal(distance_bins(300), torch.arange(300))
    assert torch.equal(distance_bins(512), torch.arange(512))
    edges = distance_bins(8192)
    assert torch.equal(edges[:513], torch.arange(513))
    assert edges[513:].tolist()[:3] == [559, 609, 664]  # ceil(512 * 2^(k/8))
    assert bool((edges[1:] > edges[:-1]).all()) and int(edges[-1]) < 8192 and len(edges) == 513 + 32 - 1  # 4 octaves of 8 bins
    values = torch.ones(2, 8192)
    binned = bin_profile(values, edges)
    assert binned.sum().item() == 2 * 8192  # every distance in exactly one bin
    assert binned[0, 512].item() == 559 - 512 and binned[0, -1].item() == 8192 - int(edges[-1])


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


def test_seq_len_goes_to_the_model_positions_not_a_smaller_tokenizer_limit(tmp_path):
    """A decoder with 1,024 rotary positions and a tokenizer saved with model_max_length 512 takes corpus.seq_len=1024;
    1,025 is refused naming the model's limit."""
    import pytest

    from attnsim.capture.load import inspect_model, load_tokenizer
    from attnsim.errors import ConfigError
    from tests.helpers.tiny_models import save_tiny

    path = save_tiny(tmp_path / "llama", "llama", positions=1024)
    info = inspect_model(str(path), 1024)
    assert load_tokenizer(info, 1024).is_fast
    with pytest.raises(ConfigError, match="1024"):
        inspect_model(str(path), 1025)


def test_long_windows_keep_the_mean_csm_pooled_and_equal_on_both_paths():
    """T = 600 > 512: the corpus-mean CSM is kept by cells of 2 tokens, (L, H, 300, 300), the same from the dense
    and the blockwise view of one capture, and equal to pooling the dense mean by hand."""
    from omegaconf import OmegaConf

    from attnsim.capture.hooks import BatchCapture
    from attnsim.config import StatsConfig
    from attnsim.findings.base import view_factory
    from attnsim.findings.csm import CSMFinding

    seq_len = 600
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 1010, (1, seq_len), generator=generator)
    ids[0, 0], ids[0, -1] = 101, 102
    batch = batch_of(ids)
    z = (torch.randn(1, 2, seq_len, 4, generator=generator),)  # one layer, 2 heads
    stats = OmegaConf.structured(StatsConfig)
    results = []
    for path in ("dense", "blockwise"):
        finding = CSMFinding(1, 2, seq_len, stats)
        view = view_factory([finding], stats, path, 128)(BatchCapture(z, None, "z"), batch)
        finding.update(view)
        results.append(finding.accumulators["csm"].compute())
    dense, blocks = results
    assert dense["matrix"].shape == (1, 2, 300, 300)
    torch.testing.assert_close(blocks["matrix"], dense["matrix"], rtol=1e-5, atol=1e-6)
    full = z[0][0].double() @ z[0][0].double().transpose(-1, -2)  # (H, T, T)
    full.diagonal(dim1=-2, dim2=-1).fill_(float("nan"))
    hand = full.reshape(2, 300, 2, 300, 2).nanmean((-3, -1))  # every pair valid, cells of 2 x 2 tokens
    torch.testing.assert_close(dense["matrix"][0], hand, rtol=1e-5, atol=1e-5)
    assert dense["distance_bins"].tolist()[-3:] == [512, 559] or len(dense["distance_bins"]) == 514
