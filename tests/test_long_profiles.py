"""Long windows: distance profiles binned logarithmically beyond 512 tokens, attention by absolute position,
seq_len up to the model's positions, the corpus-mean CSM pooled (README, "Long contexts")."""

from __future__ import annotations

import torch

from tests.helpers.findings import batch_of


def test_long_windows_keep_the_mean_csm_pooled_and_equal_on_both_paths():
    """T = 600 > 128: the corpus-mean CSM is kept by cells of ceil(600 / 128) = 5 tokens, (L, H, 120, 120), the same from the dense
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
    assert dense["matrix"].shape == (1, 2, 120, 120)
    torch.testing.assert_close(blocks["matrix"], dense["matrix"], rtol=1e-5, atol=1e-6)
    full = z[0][0].double() @ z[0][0].double().transpose(-1, -2)  # (H, T, T)
    full.diagonal(dim1=-2, dim2=-1).fill_(float("nan"))
    hand = full.reshape(2, 120, 5, 120, 5).nanmean((-3, -1))  # every pair valid, cells of 5 x 5 tokens
    torch.testing.assert_close(dense["matrix"][0], hand, rtol=1e-5, atol=1e-5)
    assert dense["distance_bins"].tolist()[-3:] == [512, 559] or len(dense["distance_bins"]) == 514
