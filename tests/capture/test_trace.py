"""attnsim.trace against an independent capture written here: plain forward hooks on the model's own modules and the
attention probabilities of a plain forward pass, on tiny GPT-2, tiny Llama (grouped-query attention) and the decoder side
of tiny T5."""

from __future__ import annotations

import pytest
import torch

import attnsim
from attnsim.capture.record import NAMES, Trace
from attnsim.errors import ConfigError
from tests.helpers.tiny_models import save_tiny

TEXTS = ["The minister said the plan would cost more than expected.", "Shares fell sharply."]


@pytest.fixture(scope="module", params=["gpt2", "llama", "t5"])
def family_trace(request, tmp_path_factory):
    family = request.param
    path = save_tiny(tmp_path_factory.mktemp(family), family)
    t = attnsim.trace(TEXTS, model=str(path))
    return family, path, t


def _model(family, path):
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    auto = AutoModelForSeq2SeqLM if family == "t5" else AutoModelForCausalLM
    return auto.from_pretrained(path, attn_implementation="eager").eval()


def _reference(family, model, t):
    """Independent capture: V from a hook on each layer's value projection, the probabilities of a plain forward pass,
    z = probabilities @ V (keys and values repeated over the query heads that share them), W_O's output from a hook on it,
    and the hidden states the model returns."""
    config = model.config
    if family == "gpt2":
        layers, value, out = model.transformer.h, "attn.c_attn", "attn.c_proj"
    elif family == "llama":
        layers, value, out = model.model.layers, "self_attn.v_proj", "self_attn.o_proj"
    else:
        layers, value, out = model.decoder.block, "layer.0.SelfAttention.v", "layer.0.SelfAttention.o"
    values, outs, handles = [], [], []
    for layer in layers:
        handles.append(layer.get_submodule(value).register_forward_hook(lambda m, a, o: values.append(o.detach())))
        handles.append(layer.get_submodule(out).register_forward_hook(lambda m, a, o: outs.append(o.detach())))
    mask = t.mask
    with torch.no_grad():
        if family == "t5":
            start = torch.full_like(t.tokens[:, :1], config.decoder_start_token_id)
            decoder_ids = torch.cat([start, t.tokens[:, :-1]], 1)
            o = model(
                input_ids=t.tokens,
                attention_mask=mask,
                decoder_input_ids=decoder_ids,
                decoder_attention_mask=mask,
                output_attentions=True,
                output_hidden_states=True,
            )
            maps, hidden = o.decoder_attentions, o.decoder_hidden_states
        else:
            o = model(input_ids=t.tokens, attention_mask=mask, output_attentions=True, output_hidden_states=True, use_cache=False)
            maps, hidden = o.attentions, o.hidden_states
    for handle in handles:
        handle.remove()
    heads = t.meta["n_heads"]
    d_head = t.meta["d_head"]
    zs = []
    for v, p in zip(values, maps):
        batch, pos, _ = v.shape
        if family == "gpt2":
            v = v[..., 2 * heads * d_head :]  # c_attn's output is [Q | K | V]
        v = v.reshape(batch, pos, -1, d_head).transpose(1, 2)  # (B, H_kv, T, d)
        v = v.repeat_interleave(heads // v.shape[1], dim=1)  # grouped-query attention: each query head's values
        zs.append((p @ v).transpose(1, 2))  # (B, T, H, d)
    return maps, zs, outs, hidden, o.logits


def test_pattern_and_z_equal_an_independent_capture(family_trace):
    family, path, t = family_trace
    model = _model(family, path)
    maps, zs, _, _, _ = _reference(family, model, t)
    assert t.n_layers == len(maps) == 2
    for layer in range(t.n_layers):
        assert t["pattern", layer].shape == (2, t.meta["n_heads"], t.tokens.shape[1], t.tokens.shape[1])
        torch.testing.assert_close(t["pattern", layer], maps[layer], rtol=0, atol=0)
        assert t["z", layer].shape == (2, t.tokens.shape[1], t.meta["n_heads"], t.meta["d_head"])
        torch.testing.assert_close(t["z", layer], zs[layer], rtol=1e-5, atol=1e-6)


def test_result_summed_over_heads_is_the_attention_output(family_trace):
    family, path, t = family_trace
    model = _model(family, path)
    _, _, outs, _, _ = _reference(family, model, t)
    for layer in range(t.n_layers):
        projection = model.get_submodule({"gpt2": "transformer.h", "llama": "model.layers", "t5": "decoder.block"}[family])[layer]
        projection = projection.get_submodule({"gpt2": "attn.c_proj", "llama": "self_attn.o_proj", "t5": "layer.0.SelfAttention.o"}[family])
        bias = projection.bias.detach() if getattr(projection, "bias", None) is not None else 0.0
        summed = t["result", layer].sum(2) + bias
        scale = outs[layer].abs().max()
        assert float((summed - outs[layer]).abs().max() / scale) < 1e-6
        assert float((t["attn_out", layer] - outs[layer]).abs().max()) == 0.0


def test_residual_stream_links_layers_and_matches_the_models_hidden_states(family_trace):
    family, path, t = family_trace
    model = _model(family, path)
    _, _, _, hidden, logits = _reference(family, model, t)
    for layer in range(t.n_layers):
        torch.testing.assert_close(t["resid_pre", layer], hidden[layer], rtol=0, atol=0)
        torch.testing.assert_close(t["resid_mid", layer], t["resid_pre", layer] + t["attn_out", layer], rtol=0, atol=0)
        if layer + 1 < t.n_layers:
            torch.testing.assert_close(t["resid_post", layer], t["resid_pre", layer + 1], rtol=0, atol=0)
        if family != "t5":  # pre-norm decoder: the MLP's write is all that lies between resid_mid and resid_post
            torch.testing.assert_close(t["resid_mid", layer] + t["mlp_out", layer], t["resid_post", layer], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(t.logits, logits, rtol=0, atol=0)
    assert len(t.str_tokens) == 2 and len(t.str_tokens[0]) == t.tokens.shape[1]
    assert t.mask[1].sum() < t.mask[0].sum()  # the shorter text is padded on the right


def test_save_and_load_round_trip_is_identical(family_trace, tmp_path):
    _, _, t = family_trace
    back = Trace.load(t.save(tmp_path / "t.safetensors"))
    assert back.names == t.names == tuple(NAMES)
    for name in t.names:
        for layer in range(t.n_layers):
            assert torch.equal(back[name, layer], t[name, layer])
    assert torch.equal(back.tokens, t.tokens) and torch.equal(back.mask, t.mask) and torch.equal(back.logits, t.logits)
    assert back.str_tokens == t.str_tokens and back.meta == t.meta


def test_names_capture_only_what_is_asked(family_trace):
    family, path, _ = family_trace
    t = attnsim.trace(TEXTS[1], model=str(path), names=["pattern"])
    assert t.names == ("pattern",) and t.tokens.shape[0] == 1
    with pytest.raises(KeyError, match="holds no 'z' .*names=\\[..., 'z'\\]"):
        t["z", 0]
    with pytest.raises(KeyError, match="Layer 5 is outside the model's 2 layers"):
        t["pattern", 5]


def test_token_ids_are_traced_as_given(family_trace):
    _, path, t = family_trace
    again = attnsim.trace(t.tokens[0], model=str(path), names=["resid_post"])
    assert torch.equal(again.tokens, t.tokens[:1]) and again.mask.all()
    length = int(t.mask[0].sum())  # the first text is the longest: no padding
    torch.testing.assert_close(again["resid_post", 1][:, :length], t["resid_post", 1][:1, :length], rtol=1e-6, atol=1e-6)


def test_bad_names_and_texts_are_refused_before_any_model_loads(tmp_path):
    with pytest.raises(ConfigError, match="cannot capture \\['attention'\\]. Give names among pattern, z, result"):
        attnsim.trace("a text", model=str(tmp_path / "no-model"), names=["attention"])
    with pytest.raises(ConfigError, match="takes a text, a list of texts \\(each a non-empty string\\) or a tensor of token ids"):
        attnsim.trace(["a text", ""], model=str(tmp_path / "no-model"))


def test_a_file_that_is_not_a_trace_is_refused(tmp_path):
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, str(tmp_path / "w.safetensors"))
    with pytest.raises(ConfigError, match="not a saved trace"):
        Trace.load(tmp_path / "w.safetensors")


@pytest.mark.e2e
def test_smollm2_pattern_and_result_match_hooks_on_the_model(smollm2):
    """The bundled SmolLM2 (grouped-query attention, 9 query heads over 3 key/value heads): the pattern is the model's own
    probabilities and the heads' results sum to o_proj's output (it has no bias) within 1e-6 relative."""
    from transformers import AutoModelForCausalLM

    t = attnsim.trace("The cat sat on the mat. The cat sat on the", model="smollm2", names=["pattern", "result", "resid_post"])
    model = AutoModelForCausalLM.from_pretrained(smollm2, attn_implementation="eager").eval()
    outs = []
    handles = [layer.self_attn.o_proj.register_forward_hook(lambda m, a, o: outs.append(o)) for layer in model.model.layers]
    with torch.no_grad():
        reference = model(input_ids=t.tokens, attention_mask=t.mask, output_attentions=True, use_cache=False)
    for handle in handles:
        handle.remove()
    assert t.n_layers == 30 and t["pattern", 0].shape[1] == 9
    for layer in (0, 17, 29):
        torch.testing.assert_close(t["pattern", layer], reference.attentions[layer], rtol=0, atol=0)
        assert float((t["result", layer].sum(2) - outs[layer]).abs().max() / outs[layer].abs().max()) < 1e-6
    torch.testing.assert_close(t.logits, reference.logits, rtol=0, atol=0)


def test_post_norm_bert_names_what_the_module_docstring_says(tiny_bert):
    """BERT: attn_out is attention.output.dense's output (before its LayerNorm), mlp_out output.dense's (before the output
    LayerNorm), resid_post the layer's output; an encoder has no logits."""
    from transformers import AutoModel

    t = attnsim.trace(TEXTS, model=str(tiny_bert), names=["result", "attn_out", "mlp_out", "resid_pre", "resid_mid", "resid_post"])
    model = AutoModel.from_pretrained(tiny_bert).eval()
    dense, mlp = [], []
    handles = []
    for layer in model.encoder.layer:
        handles.append(layer.attention.output.dense.register_forward_hook(lambda m, a, o: dense.append(o)))
        handles.append(layer.output.dense.register_forward_hook(lambda m, a, o: mlp.append(o)))
    with torch.no_grad():
        out = model(input_ids=t.tokens, attention_mask=t.mask)
    for handle in handles:
        handle.remove()
    assert t.logits is None
    for layer in range(t.n_layers):
        bias = model.encoder.layer[layer].attention.output.dense.bias.detach()
        assert float((t["result", layer].sum(2) + bias - dense[layer]).abs().max() / dense[layer].abs().max()) < 1e-6
        torch.testing.assert_close(t["attn_out", layer], dense[layer], rtol=0, atol=0)
        torch.testing.assert_close(t["mlp_out", layer], mlp[layer], rtol=0, atol=0)
        torch.testing.assert_close(t["resid_mid", layer], t["resid_pre", layer] + dense[layer], rtol=0, atol=0)
    torch.testing.assert_close(t["resid_post", t.n_layers - 1], out.last_hidden_state, rtol=0, atol=0)


def test_a_trace_is_logged_as_a_run_artifact(family_trace, tracking_uri, tmp_path):
    from mlflow import MlflowClient
    from mlflow.artifacts import download_artifacts

    _, _, t = family_trace
    client = MlflowClient(tracking_uri)
    run = client.create_run(client.create_experiment("traces"))
    assert t.log_artifact(run.info.run_id, uri=tracking_uri) == "traces/trace.safetensors"
    local = download_artifacts(run_id=run.info.run_id, artifact_path="traces/trace.safetensors", dst_path=str(tmp_path), tracking_uri=tracking_uri)
    assert torch.equal(Trace.load(local)["resid_post", 1], t["resid_post", 1])


@pytest.mark.parametrize("family", ["gpt_neox", "opt", "qwen2", "gemma", "mistral"])
def test_every_decoder_familys_stream_adds_up(family, tmp_path):
    """resid_post = resid_mid + mlp_out (GPT-NeoX's parallel block too; OPT's MLP runs on the flattened stream) and
    resid_post[L] = resid_pre[L + 1]."""
    t = attnsim.trace(TEXTS, model=str(save_tiny(tmp_path, family)), names=["mlp_out", "resid_pre", "resid_mid", "resid_post"])
    for layer in range(t.n_layers):
        torch.testing.assert_close(t["resid_mid", layer] + t["mlp_out", layer], t["resid_post", layer], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(t["resid_post", 0], t["resid_pre", 1], rtol=0, atol=0)


@pytest.mark.parametrize("family", ["vit", "dinov2"])
def test_vision_transformers_are_traced_from_pixel_values(family, tmp_path):
    from transformers import AutoConfig, AutoModel

    fields = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=16)
    if family == "vit":
        fields["intermediate_size"] = 64
    torch.manual_seed(0)
    AutoModel.from_config(AutoConfig.for_model(family, **fields)).save_pretrained(tmp_path)
    pixels = torch.randn(2, 3, 32, 32)
    t = attnsim.trace(pixels, model=str(tmp_path))
    model = AutoModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    outs = []
    layers = model.base_model.get_submodule("layers" if family == "vit" else "encoder.layer")
    handles = [layer.attention.o_proj.register_forward_hook(lambda m, a, o: outs.append(o)) for layer in layers]
    with torch.no_grad():
        reference = model(pixel_values=pixels, output_attentions=True)
    for handle in handles:
        handle.remove()
    assert t.tokens.shape == (2, 5) and t.str_tokens[0] == ["0", "1", "2", "3", "4"]  # [CLS] and 2 x 2 patches
    for layer in range(2):
        torch.testing.assert_close(t["pattern", layer], reference.attentions[layer], rtol=0, atol=0)
        bias = layers[layer].attention.o_proj.bias.detach()
        assert float((t["result", layer].sum(2) + bias - outs[layer]).abs().max() / outs[layer].abs().max()) < 1e-6
    torch.testing.assert_close(t["resid_post", 0], t["resid_pre", 1], rtol=0, atol=0)
    if family == "vit":  # pre-norm: the MLP's write is all that lies between resid_mid and resid_post
        torch.testing.assert_close(t["resid_mid", 1] + t["mlp_out", 1], t["resid_post", 1], rtol=1e-6, atol=1e-6)


def test_images_for_a_text_model_are_refused(family_trace):
    _, path, _ = family_trace
    with pytest.raises(ConfigError, match="a text model takes texts or token ids, not images"):
        attnsim.trace(torch.randn(1, 3, 32, 32), model=str(path))
