"""Captured per-head outputs and attention against an independent recomputation from Q, K, V weights."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel

from attnsim.capture.architectures import architecture_for, layer_modules
from attnsim.capture.hooks import forward_with_capture, head_results, output_projections
from attnsim.errors import ModelError
from tests.helpers.models import save_tiny_model


def recompute_layer(layer, arch, hidden, mask, n_heads):
    """softmax(Q Kᵀ/√d + mask) V per head, from the layer's own weights. hidden: (B, T, D)."""
    q = layer.get_submodule(arch.query)(hidden)
    k = layer.get_submodule(arch.key)(hidden)
    v = layer.get_submodule(arch.value)(hidden)
    batch, pos, width = q.shape
    d = width // n_heads

    def split(x):  # (B, T, H*d) -> (B, H, T, d)
        return x.view(batch, pos, n_heads, d).transpose(1, 2)

    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(-1, -2) / d**0.5  # (B, H, T, T)
    scores = scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf"))
    probs = scores.softmax(-1)
    return probs @ v, probs


@pytest.mark.parametrize("kind", ["bert", "distilbert", "roberta"])
def test_z_and_attention_match_recomputation(tmp_path, kind):
    path = save_tiny_model(tmp_path / kind, kind, layers=2, heads=4, hidden=32)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    arch = architecture_for(model.config.model_type)
    torch.manual_seed(0)
    ids = torch.randint(1000, 2000, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0  # padding in the second window
    with torch.no_grad():
        outputs, capture = forward_with_capture(model, arch, 4, {"input_ids": ids, "attention_mask": mask}, attention=True)
        hidden_states = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        assert capture.z.shape == (2, 2, 4, 9, 8)
        for index, layer in enumerate(layer_modules(model, arch)):
            z, probs = recompute_layer(layer, arch, hidden_states[index], mask, 4)
            assert (capture.z[index] - z).abs().max() <= 1e-5
            assert (capture.attention[index] - probs).abs().max() <= 1e-5


def test_head_results_sum_to_output_projection(tiny_bert):
    model = AutoModel.from_pretrained(tiny_bert, attn_implementation="eager").eval()
    arch = architecture_for("bert")
    ids = torch.randint(1000, 2000, (2, 7))
    seen = []
    dense = layer_modules(model, arch)[1].get_submodule(arch.output)
    handle = dense.register_forward_hook(lambda m, a, out: seen.append(out))
    try:
        with torch.no_grad():
            _, capture = forward_with_capture(model, arch, 4, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, attention=False)
    finally:
        handle.remove()
    results = head_results(capture.z, output_projections(model, arch, 4))  # (L, B, H, T, D)
    assert torch.allclose(results[1].sum(1) + dense.bias, seen[0], atol=1e-5)


def test_sdpa_z_equals_eager_z_and_no_hook_leaks(tiny_bert):
    ids = torch.randint(1000, 2000, (1, 6))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    eager = AutoModel.from_pretrained(tiny_bert, attn_implementation="eager").eval()
    sdpa = AutoModel.from_pretrained(tiny_bert, attn_implementation="sdpa").eval()
    arch = architecture_for("bert")
    with torch.no_grad():
        _, a = forward_with_capture(eager, arch, 4, inputs, attention=False)
        _, b = forward_with_capture(sdpa, arch, 4, inputs, attention=False)
    assert torch.allclose(a.z, b.z, atol=1e-5)
    for model in (eager, sdpa):
        for layer in layer_modules(model, arch):
            assert not layer.get_submodule(arch.output)._forward_pre_hooks


def test_sdpa_cannot_return_attention(tiny_bert):
    sdpa = AutoModel.from_pretrained(tiny_bert, attn_implementation="sdpa").eval()
    ids = torch.randint(1000, 2000, (1, 6))
    with pytest.raises(ModelError, match="attn_implementation=eager"):
        forward_with_capture(sdpa, architecture_for("bert"), 4, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, attention=True)


def test_unsupported_architecture_lists_supported():
    with pytest.raises(ModelError, match="Supported model types: .*bert.*distilbert"):
        architecture_for("gptj")  # a decoder family attnsim does not capture


def test_each_batch_view_is_released_after_every_callback_read_it(tiny_bert):
    """The module drops a batch's captured tensors once all callbacks ran, so that two batches'
    captures never coexist during the next forward pass; the callbacks still see the full view."""
    import pytorch_lightning as pl

    from attnsim.capture.load import inspect_model, load_model
    from attnsim.capture.module import CaptureModule
    from attnsim.config import load_config
    from attnsim.findings.base import view_factory

    info = inspect_model(str(tiny_bert), seq_len=16)
    model, _ = load_model(info, needs_attention=True)
    module = CaptureModule(model, info, True, "z", view_factory([], load_config("csm", []).stats))

    class Keep(pl.Callback):
        def __init__(self):
            self.views, self.seen = [], []

        def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            self.seen.append(float(outputs.class_value_sums.sum()))  # the view is complete here
            self.views.append(outputs)

    batches = [
        {
            "input_ids": torch.randint(5, 90, (3, 16)),
            "attention_mask": torch.ones(3, 16, dtype=torch.long),
            "special_mask": torch.zeros(3, 16, dtype=torch.bool),
            "sentence_ids": torch.zeros(3, 16, dtype=torch.long),
        }
        for _ in range(2)
    ]
    keep = Keep()
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[keep])
    trainer.predict(module, dataloaders=torch.utils.data.DataLoader(batches, batch_size=None), return_predictions=False)
    assert len(keep.seen) == 2 and all(torch.isfinite(torch.tensor(keep.seen)))
    for view in keep.views:  # released after the callbacks: no tensor left
        assert not any(torch.is_tensor(v) or isinstance(v, (tuple, dict)) for v in vars(view).values())


@pytest.mark.parametrize("vector", ["z", "result"])
def test_predict_step_returns_the_raw_capture_or_what_the_injected_factory_builds(tiny_bert, vector):
    from attnsim.capture.hooks import BatchCapture
    from attnsim.capture.load import inspect_model, load_model
    from attnsim.capture.module import CaptureModule

    info = inspect_model(str(tiny_bert), seq_len=16)
    model, _ = load_model(info, needs_attention=True)
    batch = {"input_ids": torch.randint(5, 90, (2, 16)), "attention_mask": torch.ones(2, 16, dtype=torch.long)}
    with torch.no_grad():
        raw = CaptureModule(model, info, True, vector).predict_step(batch, 0)
        built = CaptureModule(model, info, True, vector, view_factory=lambda capture, b: ("view", capture, b)).predict_step(batch, 0)
        _, reference = forward_with_capture(model, info.arch, info.n_heads, batch, True)
    assert isinstance(raw, BatchCapture) and raw.vector == vector
    width = info.d_head if vector == "z" else info.d_model
    assert len(raw.vectors) == info.n_layers and raw.vectors[0].shape == (2, info.n_heads, 16, width)
    want = reference.z_layers if vector == "z" else head_results(reference.z, output_projections(model, info.arch, info.n_heads)).unbind(0)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(raw.vectors, want))
    assert all(torch.equal(a, b) for a, b in zip(raw.attention, reference.attention_layers))
    assert built[0] == "view" and isinstance(built[1], BatchCapture) and built[2] is batch


def test_a_decoder_s_capture_builds_no_key_value_cache(tmp_path):
    """A causal decoder's forward would keep every layer's keys and values for a generation that never follows
    (``use_cache`` defaults to True): the capture turns it off, and the outputs stay those of the forward with it."""
    from tests.helpers.tiny_models import save_tiny

    path = save_tiny(tmp_path / "llama", "llama", lm_head=False)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    arch = architecture_for(model.config.model_type)
    inputs = {"input_ids": torch.randint(3, 200, (2, 12)), "attention_mask": torch.ones(2, 12, dtype=torch.long)}
    with torch.no_grad():
        cached = model(**inputs)
        outputs, capture = forward_with_capture(model, arch, 4, inputs, attention=False)
    assert cached.past_key_values is not None and outputs.past_key_values is None
    assert torch.equal(outputs.last_hidden_state, cached.last_hidden_state)
    assert capture.z.shape == (2, 2, 4, 12, 8)
