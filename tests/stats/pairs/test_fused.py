"""Probabilities without eager attention on the dense path: the model runs SDPA with its queries and keys
recorded, and :class:`~attnsim.stats.pairs.fused.RecomputedPairView` recomputes each chunk's attention.
Compared with eager attention's maps on the same windows."""

from __future__ import annotations

import functools

import torch

from attnsim.stats.pairs.fused import RecomputedPairView, window_probabilities
from attnsim.stats.pairs.scores import attention_rows
from tests.helpers.blockwise import bert_pair, blockwise_finding_objects, capture_batch, windows_batch


def _fold(view_builder, raw, batch, seq_len, tokenizer):  # noqa: F811
    findings, stats = blockwise_finding_objects(seq_len, tokenizer)
    view = view_builder(findings, stats)(raw, batch)
    for finding in findings:
        finding.update(view)
        assert finding.error is None, (finding.name, finding.error)
    return findings, view


def test_recomputed_view_equals_eager_maps(tokenizer):  # noqa: F811
    """Tiny BERT on BBC windows (one padded), T = 256: probabilities recomputed from the recorded queries and
    keys equal eager attention's within 1e-6 (absolute, on probabilities <= 1) on every real query row of the first
    layer (1e-5 after it: SDPA's hidden states carry their own rounding); against T x T maps of the same capture every
    `paper` statistic within 1e-6 relative (and 1e-6 of its scale) and the same high-CSM and high-attention pairs."""
    from attnsim.capture.hooks import BatchCapture
    from attnsim.findings.base import view_factory

    seq_len = 256
    eager, recorded = bert_pair(len(tokenizer))
    batch = windows_batch(tokenizer, seq_len, 3)
    assert bool((batch["attention_mask"] == 0).any()), "the test needs a padded window"
    dense = capture_batch(eager, batch, "dense")
    queried = capture_batch(recorded, batch, "blockwise")  # SDPA with queries and keys recorded
    real = batch["attention_mask"].bool()[:, None, :, None]
    for layer, maps in enumerate(dense.attention_layers):
        got = window_probabilities(queried.query_keys[layer], 0, 3)
        assert got.shape == maps.shape
        # layer 0 reads the same queries and keys as eager; later layers' inputs carry SDPA's rounding
        assert float(((got - maps).abs() * real).max()) < (1e-6 if layer == 0 else 1e-5)
        torch.testing.assert_close(got.sum(-1), torch.ones_like(got.sum(-1)))
    # the same capture on both sides, maps recomputed whole by the blockwise path's reference (one window at a time)
    maps = tuple(attention_rows(qk, 0, seq_len) for qk in queried.query_keys)
    eager_raw = BatchCapture(queried.z_layers, maps, "z")
    recomputed_raw = BatchCapture(queried.z_layers, None, "z", queried.query_keys)
    a, view_a = _fold(lambda f, s: view_factory(f, s), eager_raw, batch, seq_len, tokenizer)

    def recomputed(findings, stats):
        return functools.partial(RecomputedPairView.from_capture, **view_factory(findings, stats).keywords)

    b, view_b = _fold(recomputed, recomputed_raw, batch, seq_len, tokenizer)
    assert isinstance(view_b, RecomputedPairView) and view_b.has_attention
    assert torch.equal(view_a.high_index, view_b.high_index)
    assert torch.equal(view_a.attention_index, view_b.attention_index)
    compared = 0
    for x, y in zip(a, b):
        for key, acc in x.accumulators.items():
            got = y.accumulators[key].compute()
            for name, value in acc.compute().items():
                if value.is_floating_point():
                    scale = value.abs().nan_to_num(0).max().clamp_min(1e-30)
                    torch.testing.assert_close(got[name].double(), value.double(), rtol=1e-6, atol=1e-6 * float(scale), equal_nan=True, msg=f"{x.name}/{name}")
                else:
                    assert torch.equal(got[name], value), (x.name, name)
                compared += 1
    assert compared >= 57


def test_window_probabilities_apply_the_causal_rule_and_an_additive_mask():
    """SDPA's own causal rule (keys after the query get probability 0) and an additive mask (a key at -inf
    gets 0, the others share the row as softmax of their scores)."""
    from attnsim.capture.queries import QueryKey

    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    causal = window_probabilities(QueryKey(q, k, 0.5, None, True), 0, 1)
    assert torch.equal(causal.triu(1), torch.zeros_like(causal))
    want = torch.softmax((q @ k.transpose(-1, -2) * 0.5).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf")), -1)
    torch.testing.assert_close(causal, want, rtol=1e-6, atol=1e-7)
    additive = torch.zeros(1, 1, 1, 5)
    additive[..., 2] = float("-inf")
    masked = window_probabilities(QueryKey(q, k, 0.5, additive, False), 0, 1)
    assert torch.equal(masked[..., 2], torch.zeros_like(masked[..., 2]))
    keep = [0, 1, 3, 4]
    torch.testing.assert_close(masked[..., keep], torch.softmax((q @ k.transpose(-1, -2) * 0.5)[..., keep], -1), rtol=1e-6, atol=1e-7)


def test_recomputed_path_choice_and_refusals():
    """capture.path=recomputed is kept at any length for text; images and gradient findings (which need eager maps)
    and scores the recomputation cannot reproduce are refused before any model loads."""
    from types import SimpleNamespace

    import pytest

    from attnsim.capture.architectures import architecture_for
    from attnsim.capture.load import ModelInfo, choose_capture_path
    from attnsim.errors import ConfigError, ModelError

    text = ModelInfo("x", "x", "llama", 4, 8, 32, 256, 8192, architecture_for("llama"), SimpleNamespace(model_type="llama"))
    image = ModelInfo("x", "x", "vit", 2, 4, 8, 32, 0, architecture_for("vit"), SimpleNamespace(model_type="vit"))
    assert choose_capture_path("recomputed", 128, 512, text, True) == "recomputed"
    assert choose_capture_path("recomputed", 128, 512, text, True, high_rule="zscore") == "recomputed"  # the dense view's rules
    with pytest.raises(ConfigError, match="capture.path=dense"):
        choose_capture_path("recomputed", 128, 512, image, True)
    with pytest.raises(ConfigError, match="gradient"):
        choose_capture_path("recomputed", 128, 512, text, True, needs_gradients=True)
    soft = ModelInfo("x", "x", "llama", 4, 8, 32, 256, 8192, architecture_for("llama"), SimpleNamespace(model_type="gemma2", attn_logit_softcapping=50.0))
    with pytest.raises(ModelError, match="soft-capping"):
        choose_capture_path("recomputed", 128, 512, soft, True)


def test_recomputed_run_equals_the_dense_run(tiny_bert, tracking_uri):
    """An end-to-end `attnsim run` with capture.path=recomputed: the model runs the recording SDPA (tagged), and
    the CSM and attention statistics equal the dense (eager) run's."""
    import mlflow
    import pytest

    from attnsim.workflows.run import run

    common = [
        f"model.path={tiny_bert}",
        "corpus.limit=2",
        "corpus.seq_len=48",
        f"tracking.uri={tracking_uri}",
        "plots.examples=0",
        "findings=[csm,separators,attention_regions]",
    ]
    recomputed = run("csm", common + ["capture.path=recomputed"])
    dense = run("csm", common + ["capture.path=dense"])
    client = mlflow.MlflowClient(tracking_uri)
    got, want = client.get_run(recomputed.run_id), client.get_run(dense.run_id)
    assert got.info.status == "FINISHED"
    assert got.data.tags["attnsim.capture_path"] == "recomputed" and want.data.tags["attnsim.capture_path"] == "dense"
    assert got.data.tags["attnsim.attn_implementation"] == "attnsim_sdpa" and want.data.tags["attnsim.attn_implementation"] == "eager"
    compared = [key for key in want.data.metrics if key.startswith(("csm/", "separators/", "attention_regions/")) and "time" not in key]
    assert any(key.startswith("separators/") for key in compared) and any(key.startswith("attention_regions/") for key in compared)
    for key in compared:
        assert got.data.metrics[key] == pytest.approx(want.data.metrics[key], rel=1e-5, abs=1e-6), key
