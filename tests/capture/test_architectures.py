"""Decoder-only (causal) language models: architecture table, capture per family, windows and inspection.

Every model is a tiny seeded random config saved with ``save_pretrained`` from ``AutoModelForCausalLM``
next to a tokenizer trained here (:mod:`tests.tiny_models`); attnsim loads its base model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnsim.capture.architectures import ARCHITECTURES, architecture_for, layer_modules, projection_weight, split_qkv
from attnsim.capture.hooks import forward_with_capture, head_results, output_projections
from attnsim.capture.load import inspect_model, load_model, load_tokenizer
from attnsim.data.sources import Document
from attnsim.data.windows import build_corpus, pad_token_id, special_template
from attnsim.errors import ModelError
from tests.helpers.tiny_models import DECODERS, save_tiny


@pytest.fixture(scope="session")
def tiny_decoders(tmp_path_factory):
    """family -> directory of a tiny seeded causal LM (built once per session)."""
    return {family: save_tiny(tmp_path_factory.mktemp(family), family) for family in DECODERS}


def _ids(info, batch=2, pos=9, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, int(info.config.vocab_size), (batch, pos), generator=generator)
    mask = torch.ones(batch, pos, dtype=torch.long)
    mask[1, 6:] = 0  # right padding in the second window
    return ids, mask


@pytest.mark.parametrize("family", DECODERS)
def test_head_outputs_sum_to_output_projection_and_attention_is_causal(tiny_decoders, family):
    info = inspect_model(str(tiny_decoders[family]), 32)
    assert info.causal and info.arch is ARCHITECTURES[family]
    model, tags = load_model(info, needs_attention=True)
    assert tags["attnsim.attn_implementation"] == "eager"
    ids, mask = _ids(info)
    outputs = []
    handles = [layer.get_submodule(info.arch.output).register_forward_hook(lambda m, a, out: outputs.append(out)) for layer in layer_modules(model, info.arch)]
    try:
        with torch.no_grad():
            _, capture = forward_with_capture(model, info.arch, info.n_heads, {"input_ids": ids, "attention_mask": mask}, attention=True)
    finally:
        for handle in handles:
            handle.remove()
    n_layers, heads, d_head = info.n_layers, info.n_heads, info.d_head
    assert capture.z.shape == (n_layers, 2, heads, 9, d_head)
    assert capture.attention.shape == (n_layers, 2, heads, 9, 9)  # per query head, also under GQA
    w_o = output_projections(model, info.arch, heads)
    assert w_o.shape == (n_layers, heads, d_head, info.d_model)
    results = head_results(capture.z, w_o)  # (L, B, H, T, D)
    for layer, module in enumerate(layer_modules(model, info.arch)):
        bias = module.get_submodule(info.arch.output).bias
        total = results[layer].sum(1) + (bias if bias is not None else 0)
        assert (total - outputs[layer]).abs().max() <= 1e-5, (family, layer)
    probs = capture.attention
    rows = probs.sum(-1)  # (L, B, H, T)
    assert torch.allclose(rows[:, 0], torch.ones_like(rows[:, 0]), atol=1e-5)  # every row of the unpadded window
    assert torch.allclose(rows[:, 1, :, :6], torch.ones_like(rows[:, 1, :, :6]), atol=1e-5)  # real rows of the padded one
    upper = torch.triu(torch.ones(9, 9, dtype=torch.bool), diagonal=1)
    assert probs[..., upper].abs().max() == 0  # no token attends to a later one
    assert probs[:, 1, :, :6, 6:].abs().max() == 0  # real tokens never see padding


def test_grouped_query_attention_keeps_query_heads(tmp_path):
    """Llama with 8 query heads sharing 2 key/value heads and head_dim 16 != hidden/heads: Z and attention per query head."""
    path = save_tiny(tmp_path / "gqa", "llama", heads=8, hidden=32, num_key_value_heads=2, head_dim=16)
    info = inspect_model(str(path), 32)
    assert (info.n_heads, info.n_kv_heads, info.d_head, info.d_model) == (8, 2, 16, 32)
    model, _ = load_model(info, needs_attention=True)
    assert layer_modules(model, info.arch)[0].get_submodule(info.arch.output).in_features == 8 * 16
    ids, mask = _ids(info)
    with torch.no_grad():
        _, capture = forward_with_capture(model, info.arch, info.n_heads, {"input_ids": ids, "attention_mask": mask}, attention=True)
    assert capture.z.shape == (2, 2, 8, 9, 16) and capture.attention.shape == (2, 2, 8, 9, 9)
    # heads that share keys and values still have their own queries, hence their own attention
    assert not torch.allclose(capture.attention[0, 0, 0], capture.attention[0, 0, 1])
    assert output_projections(model, info.arch, 8).shape == (2, 8, 16, 32)


def test_gpt2_conv1d_and_fused_qkv_recompute_z(tiny_decoders):
    """GPT-2 stores Conv1D weights (in, out) and fuses Q|K|V in c_attn: Z recomputed from them matches the capture."""
    info = inspect_model(str(tiny_decoders["gpt2"]), 32)
    assert (info.n_layers, info.n_heads, info.d_head, info.d_model, info.max_length) == (2, 4, 8, 32, 512)  # n_layer, n_head, n_embd, n_positions
    model, _ = load_model(info, needs_attention=True)
    arch = info.arch
    layer = layer_modules(model, arch)[0]
    c_proj = layer.get_submodule(arch.output)
    assert c_proj.weight.shape == (32, 32) and projection_weight(layer.get_submodule(arch.query), arch).shape == (96, 32)
    ids, mask = _ids(info)
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[0]
        _, capture = forward_with_capture(model, arch, 4, {"input_ids": ids, "attention_mask": mask}, attention=True)
        q, k, v = split_qkv(layer.get_submodule(arch.query)(layer.ln_1(hidden)), arch, 4, 4, 8)
    scores = q @ k.transpose(-1, -2) / 8**0.5
    allowed = torch.tril(torch.ones(9, 9, dtype=torch.bool))[None, None] & mask.bool()[:, None, None, :]
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    assert (probs[0] - capture.attention[0, 0]).abs().max() <= 1e-5
    assert ((probs @ v)[0] - capture.z[0, 0]).abs().max() <= 1e-5


def test_split_qkv_per_head_layout():
    """GPT-NeoX's query_key_value output is [q_h | k_h | v_h] per head."""
    arch = architecture_for("gpt_neox")
    heads, d = 2, 3
    projected = torch.arange(2 * heads * 3 * d, dtype=torch.float32).reshape(1, 2, heads * 3 * d)  # (B=1, T=2, 18)
    q, k, v = split_qkv(projected, arch, heads, heads, d)
    assert q.shape == (1, 2, 2, 3)
    assert q[0, 1, 0].tolist() == [9.0, 10.0, 11.0] and k[0, 1, 0].tolist() == [12.0, 13.0, 14.0] and v[0, 0, 1].tolist() == [24.0, 25.0, 26.0]
    with pytest.raises(ModelError, match="Cannot split"):
        split_qkv(projected, architecture_for("llama"), heads, heads, d)


def test_phi_table_entry_captures():
    """Phi (dense output projection, partial rotary) from a config: the head outputs sum to the projection's output."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(
        "phi", vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64
    )
    torch.manual_seed(0)
    model = AutoModel.from_config(config, attn_implementation="eager").eval()
    arch = architecture_for("phi")
    outputs = []
    dense = layer_modules(model, arch)[1].get_submodule(arch.output)
    handle = dense.register_forward_hook(lambda m, a, out: outputs.append(out))
    ids = torch.randint(0, 64, (1, 7))
    try:
        with torch.no_grad():
            _, capture = forward_with_capture(model, arch, 4, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, attention=True)
    finally:
        handle.remove()
    total = head_results(capture.z, output_projections(model, arch, 4))[1].sum(1) + dense.bias
    assert (total - outputs[0]).abs().max() <= 1e-5
    assert capture.attention[..., torch.triu(torch.ones(7, 7, dtype=torch.bool), 1)].abs().max() == 0


def test_unsupported_type_refused_before_loading_lists_decoders(tmp_path):
    from transformers import AutoConfig

    AutoConfig.for_model("gptj", n_embd=32, n_layer=1, n_head=4).save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="model type 'gptj'") as error:
        inspect_model(str(tmp_path), 32)  # only config.json exists: nothing was loaded
    for family in (*DECODERS, "phi", "bert", "vit"):
        assert family in str(error.value)


def test_windows_take_the_tokenizers_own_specials(tiny_decoders):
    """Llama's BOS opens every window, GPT-2 adds nothing; windows are exactly seq_len; padding is masked."""
    text = "The river rose after three days of rain. Farmers moved their cattle to higher ground. " * 4
    short = "It was short."
    for family, prefix in (("llama", ["<s>"]), ("mistral", ["<s>"]), ("gpt2", []), ("gpt_neox", []), ("qwen2", [])):
        info = inspect_model(str(tiny_decoders[family]), 24)
        tokenizer = load_tokenizer(info, 24)
        start, end = special_template(tokenizer)
        assert tokenizer.convert_ids_to_tokens(start.tolist()) == prefix and len(end) == 0, family
        corpus = build_corpus([Document("a", text), Document("b", short)], tokenizer, 24, shuffle=False, min_tokens=2)
        for window in corpus.windows:
            assert (
                len(window.input_ids) == 24
                and window.special_mask[: len(prefix)].all()
                and not window.special_mask[len(prefix) : int(window.attention_mask.sum())].any()
            )
        assert corpus.windows[-1].attention_mask.sum() < 24  # the short document is padded
        assert (corpus.windows[-1].input_ids[corpus.windows[-1].attention_mask == 0] == pad_token_id(tokenizer)).all()


def test_pad_falls_back_to_eos_for_tokenizers_without_pad(tiny_decoders):
    """GPT-2's tokenizer has no pad token: windows pad with EOS (attention mask 0), never with None."""
    info = inspect_model(str(tiny_decoders["gpt2"]), 24)
    tokenizer = load_tokenizer(info, 24)
    tokenizer.pad_token = None
    assert tokenizer.pad_token_id is None and pad_token_id(tokenizer) == tokenizer.eos_token_id
    corpus = build_corpus([Document("b", "It was short.")], tokenizer, 24, min_tokens=2)
    (window,) = corpus.windows
    padding = window.attention_mask == 0
    assert padding.any() and (window.input_ids[padding] == tokenizer.eos_token_id).all()
    assert np.all(window.sentence_ids[padding] == -1)


def _rotate(x: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary position embedding of (batch, head, pos, d) at positions 0..pos-1 (the half-split convention, base ``base``)."""
    d, pos = x.shape[-1], x.shape[-2]
    angles = torch.arange(pos, dtype=torch.float32)[:, None] / base ** (torch.arange(0, d, 2, dtype=torch.float32) / d)[None, :]  # (pos, d/2)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos + half * sin


def test_gemma3_z_and_attention_are_the_models_own(tiny_decoders):
    """Gemma 3 (``gemma3_text``, the model type transformers' GGUF reader gives a ``gemma3`` file): attnsim's Z and
    attention equal (1) W_O's input read by a hook of this test and eager ``output_attentions``, exactly, and (2) a
    computation from the weights: per-head RMS norm of queries and keys (QK-norm), rotary positions with the sliding
    layers' and the global layers' bases, scores scaled by query_pre_attn_scalar ** -0.5 = 16 ** -0.5 (not head_dim's
    8 ** -0.5), grouped-query attention, causal and padding masks, and the 4-token sliding window of layer 0."""
    info = inspect_model(str(tiny_decoders["gemma3_text"]), 32)
    assert info.arch is ARCHITECTURES["gemma3_text"] and info.causal
    assert (info.n_layers, info.n_heads, info.n_kv_heads, info.d_head) == (2, 4, 2, 8)
    config = info.config
    assert config.layer_types == ["sliding_attention", "full_attention"] and config.sliding_window == 4
    model, _ = load_model(info, needs_attention=True)
    ids, mask = _ids(info)
    layers = layer_modules(model, info.arch)
    inputs_of_w_o: list = []
    handles = [layer.self_attn.o_proj.register_forward_pre_hook(lambda m, args: inputs_of_w_o.append(args[0])) for layer in layers]
    try:
        with torch.no_grad():
            own = model(input_ids=ids, attention_mask=mask, output_attentions=True, output_hidden_states=True, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    with torch.no_grad():
        _, capture = forward_with_capture(model, info.arch, info.n_heads, {"input_ids": ids, "attention_mask": mask}, attention=True)
    assert len(inputs_of_w_o) == 2 and len(own.attentions) == 2
    for layer in range(2):
        assert torch.equal(capture.z[layer], inputs_of_w_o[layer].reshape(2, 9, 4, 8).transpose(1, 2))
        assert torch.equal(capture.attention[layer], own.attentions[layer])

    bases = {"sliding_attention": 10_000.0, "full_attention": 1_000_000.0}
    assert {kind: config.rope_parameters[kind]["rope_theta"] for kind in bases} == bases
    position = torch.arange(9)
    for layer, module in enumerate(layers):
        attn = module.self_attn
        x = module.input_layernorm(own.hidden_states[layer])  # the layer's input, normed as the block norms it
        q, k, v = (proj(x).reshape(2, 9, -1, 8).transpose(1, 2) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
        q, k = attn.q_norm(q), attn.k_norm(k)  # QK-norm: RMS over each head's 8 dimensions, scaled by 1 + weight
        base = bases[config.layer_types[layer]]
        q, k = _rotate(q, base), _rotate(k, base)
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)  # query heads 0, 1 read key/value head 0
        scores = q @ k.transpose(-1, -2) * 16**-0.5
        allowed = (position[None, :] <= position[:, None])[None, None] & mask.bool()[:, None, None, :]
        if config.layer_types[layer] == "sliding_attention":
            allowed = allowed & (position[:, None] - position[None, :] < 4)[None, None]
        probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        assert (probs - capture.attention[layer]).abs().max() <= 1e-6, layer
        assert ((probs @ v) - capture.z[layer]).abs().max() <= 1e-6, layer
    distance = position[:, None] - position[None, :]
    assert capture.attention[0][..., distance >= 4].abs().max() == 0  # the sliding layer: nothing beyond the window
    assert capture.attention[0][..., distance == 3].min() > 0  # but all of it
    assert capture.attention[1][0][..., distance >= 4].min() > 0  # the global layer sees every earlier token


def test_gemma3_queries_and_keys_recompute_its_eager_attention(tiny_decoders):
    """The blockwise path's record of Gemma 3 (queries after QK-norm and rotary, its scale, its mask with the sliding
    window) recomputes eager attention on every real query row, in the sliding layer and the global one."""
    from transformers import AutoModel

    from attnsim.capture.queries import register
    from attnsim.stats.pairs.scores import attention_rows

    info = inspect_model(str(tiny_decoders["gemma3_text"]), 32)
    eager, _ = load_model(info, needs_attention=True)
    recorded = AutoModel.from_pretrained(str(tiny_decoders["gemma3_text"]), attn_implementation=register()).eval()
    ids, mask = _ids(info)
    inputs = {"input_ids": ids, "attention_mask": mask}
    with torch.no_grad():
        _, dense = forward_with_capture(eager, info.arch, info.n_heads, inputs, attention=True)
        _, blocks = forward_with_capture(recorded, info.arch, info.n_heads, inputs, attention=False, queries=True)
    assert [qk.scaling for qk in blocks.query_keys] == [16**-0.5, 16**-0.5]
    real = mask.bool()[:, None, :, None]
    for layer in range(2):
        assert float(((attention_rows(blocks.query_keys[layer], 0, 9) - dense.attention[layer]).abs() * real).max()) <= 1e-6, layer
        assert float((blocks.z[layer] - dense.z[layer]).abs().max()) <= 1e-6, layer
