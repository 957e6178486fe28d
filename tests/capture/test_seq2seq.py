"""Capture of the encoder–decoder families (T5, BART, Marian) on tiny seeded models."""

from __future__ import annotations

import pytest
import torch

from attnsim.capture.architectures import SEQ2SEQ_ARCHITECTURES, architecture_for
from attnsim.capture.hooks import layer_modules
from attnsim.capture.load import inspect_model, load_model, load_tokenizer
from attnsim.capture.seq2seq import STREAMS, _stream, forward_seq2seq, shift_right
from attnsim.errors import ModelError
from tests.helpers.tiny_models import save_tiny


@pytest.fixture(scope="session", params=["t5", "bart", "marian"])
def tiny(request, tmp_path_factory):
    path = save_tiny(tmp_path_factory.mktemp(request.param), request.param)
    info = inspect_model(str(path), 16)
    model, _ = load_model(info, needs_attention=True)
    return request.param, info, model, load_tokenizer(info, 16)


def _batch(tokenizer, source_len=12, target_len=9):
    sources = ["The minister said the plan would cost more.", "Shares fell."]
    targets = ["Der Minister sagte, der Plan koste mehr.", "Aktien fielen."]
    src = tokenizer(sources, padding="max_length", max_length=source_len, truncation=True, return_tensors="pt")
    tgt = tokenizer(text_target=targets, padding="max_length", max_length=target_len, truncation=True, return_tensors="pt")
    return {"input_ids": src["input_ids"], "attention_mask": src["attention_mask"], "target_ids": tgt["input_ids"], "target_mask": tgt["attention_mask"]}


def test_encoder_decoder_types_are_supported_and_listed():
    assert set(SEQ2SEQ_ARCHITECTURES) == {"t5", "bart", "marian"}
    assert architecture_for("t5").cross == "layer.1.EncDecAttention.o"
    with pytest.raises(ModelError, match="bart.*marian.*t5"):
        architecture_for("no-such-model")


def test_shift_right_starts_with_the_decoder_start_token():
    out = shift_right(torch.tensor([[5, 6, 2, 0]]), start_id=9, pad_id=0)
    assert out.tolist() == [[9, 5, 6, 2]]


def test_inspect_reads_the_decoders_layers_and_heads(tiny):
    family, info, _, _ = tiny
    assert (info.n_layers, info.n_heads, info.d_head) == (2, 4, 8)
    assert info.arch.seq2seq and info.arch.scaled == (family != "t5")


def test_z_times_w_o_plus_bias_is_each_projections_output(tiny):
    """Sum over heads of Z_h · W_O[h] (+ bias) equals W_O's output, for all three attention blocks, every layer."""
    family, info, model, tokenizer = tiny
    batch = _batch(tokenizer)
    seen = {s: [] for s in STREAMS}
    handles = []
    for s in STREAMS:
        view = _stream(info.arch, s)
        for layer in layer_modules(model, view):
            handles.append(layer.get_submodule(view.output).register_forward_hook(lambda m, a, out, s=s: seen[s].append(out.detach())))
    try:
        with torch.no_grad():
            capture = forward_seq2seq(model, info.arch, batch, attention=True)
    finally:
        for h in handles:
            h.remove()
    for s in STREAMS:
        view = _stream(info.arch, s)
        assert len(capture.z[s]) == 2 == len(seen[s])
        for index, layer in enumerate(layer_modules(model, view)):
            projection = layer.get_submodule(view.output)
            z = capture.z[s][index]  # (B, H, T, d)
            b, h, t, d = z.shape
            w = projection.weight.reshape(-1, h, d)  # (d_model, H, d)
            out = torch.einsum("bhtd,mhd->btm", z, w)
            if projection.bias is not None:
                out = out + projection.bias
            assert torch.allclose(out, seen[s][index], atol=1e-5), (family, s, index)
    leaked = [name for name, module in model.named_modules() if module._forward_pre_hooks]
    assert leaked == []  # no capture hook outlives the call


def test_probabilities_rows_sum_to_one_and_decoder_is_causal(tiny):
    family, info, model, tokenizer = tiny
    batch = _batch(tokenizer)
    with torch.no_grad():
        capture = forward_seq2seq(model, info.arch, batch, attention=True)
    src_len, tgt_len = batch["input_ids"].shape[1], batch["target_ids"].shape[1]
    assert capture.attention["cross"][0].shape == (2, 4, tgt_len, src_len)
    assert capture.attention["encoder"][0].shape == (2, 4, src_len, src_len)
    for s in STREAMS:
        for probs in capture.attention[s]:
            assert torch.allclose(probs.sum(-1), torch.ones(probs.shape[:-1]), atol=1e-5), (family, s)
    source_pad = ~batch["attention_mask"].bool()  # padded source columns get no attention
    for probs in capture.attention["cross"] + capture.attention["encoder"]:
        assert probs.masked_select(source_pad[:, None, None, :].expand_as(probs)).abs().max() < 1e-6
    upper = torch.triu(torch.ones(tgt_len, tgt_len, dtype=torch.bool), 1)
    for probs in capture.attention["decoder"]:
        assert probs[..., upper].abs().max() == 0.0  # causal: nothing above the diagonal


def test_sdpa_without_probabilities_is_refused(tmp_path):
    path = save_tiny(tmp_path, "bart")
    info = inspect_model(str(path), 16)
    model, _ = load_model(info, attn_implementation="sdpa", needs_attention=False)
    batch = _batch(load_tokenizer(info, 16))
    with torch.no_grad():
        capture = forward_seq2seq(model, info.arch, batch, attention=False)  # Z is captured under SDPA too
    assert capture.attention is None and capture.z["cross"][0].shape == (2, 4, 9, 8)
    with pytest.raises(ModelError, match="eager"), torch.no_grad():
        forward_seq2seq(model, info.arch, batch, attention=True)
