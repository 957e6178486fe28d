"""The ``dla`` finding: a hand-built two-layer model whose answer is worked out on paper, the decomposition check on tiny
Llama and GPT-2 (every direct component sums to the model's own logit), and a run that logs its statistics."""

from __future__ import annotations

import math

import pytest
import torch

from attnsim.capture.architectures import architecture_for
from attnsim.capture.load import ModelInfo, inspect_model, load_tokenizer
from attnsim.capture.residual import ResidualModule
from attnsim.findings.dla import DLAFinding
from tests.helpers.tiny_models import save_tiny

EPS = 1e-6


def _successor_model():
    """A two-layer Llama on 4 tokens whose only writing head is layer 1's head 0: it copies the mean of the tokens so far,
    each moved to its successor (t -> t + 1 mod 4). Embeddings and W_U are the identity, MLPs and every other head write
    nothing, queries and keys are zero (uniform causal attention), every norm's weight is 1."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=4,
        hidden_size=4,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=4,
        intermediate_size=4,
        rms_norm_eps=EPS,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    successor = torch.roll(torch.eye(4), 1, dims=0)  # column t holds e_{t+1}
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        for module in model.modules():
            if type(module).__name__ == "LlamaRMSNorm":
                module.weight.fill_(1.0)
        model.model.embed_tokens.weight.copy_(torch.eye(4))
        model.lm_head.weight.copy_(torch.eye(4))
        attention = model.model.layers[1].self_attn
        attention.v_proj.weight.copy_(torch.cat([torch.eye(4), torch.eye(4)]))  # both heads read the stream
        attention.o_proj.weight[:, :4] = successor  # head 0 writes the successor; head 1's slice stays zero
    info = ModelInfo("hand-built", "successor", "llama", 2, 2, 4, 4, 16, architecture_for("llama"), config)
    return model, info


def _fold(finding, module, ids, mask=None):
    mask = torch.ones_like(ids) if mask is None else mask
    with torch.no_grad():
        batch = module.predict_step({"input_ids": ids, "attention_mask": mask}, 0)
    finding.update(batch)
    return finding.summarise()


def test_the_successor_head_raises_the_next_token_by_the_hand_worked_amount():
    model, info = _successor_model()
    finding = DLAFinding(2, 2, 3, None)
    summary = _fold(finding, ResidualModule(model, info, DLAFinding.residual), torch.tensor([[0, 1, 2]]))
    # position 0: the stream's input to layer 1 is e_0, RMS-normed to 2·e_0 (σ = sqrt(1/4 + eps)); the head writes
    # 2·e_1, so x_0 = e_0 + 2·e_1 and σ_0 = sqrt(5/4 + eps); DLA = 2·e_1 · (e_1 − 1/4) / σ_0 = 1.5 / σ_0
    # position 1: the head writes the mean of 2·e_0 and 2·e_1, moved: e_1 + e_2; x_1 = e_1 + e_1 + e_2 (σ_1 = σ_0);
    # DLA = (e_1 + e_2) · (e_2 − 1/4) / σ_1 = 0.5 / σ_1.  Position 2 has no next token.
    norm_in = 2.0 / math.sqrt(4 * (0.25 + EPS))  # the RMS norm of e_t times two, to first order exactly 2
    sigma = math.sqrt((1 + norm_in**2) / 4 + EPS)
    values = [0.75 * norm_in / sigma, (1.0 - 0.5) * norm_in / 2 / sigma]
    mean = sum(values) / 2
    dla = summary.scalars["dla_mean"]
    assert abs(float(dla[1, 0]) - mean) < 1e-5, (float(dla[1, 0]), mean)
    assert abs(float(summary.scalars["dla_std"][1, 0]) - abs(values[0] - values[1]) / 2) < 1e-5
    assert float(summary.scalars["dla_positive_share"][1, 0]) == 1.0
    assert dla[0].abs().max() == 0 and dla[1, 1] == 0  # heads that write nothing have no direct effect
    assert summary.metrics["positions"] == 2 and summary.metrics["decomposition_error"] < 1e-6


def test_trace_dla_of_the_successor_model_with_the_mean_or_a_contrast_token_as_baseline():
    import attnsim
    from attnsim.findings.dla import trace_dla

    model, _ = _successor_model()
    t = attnsim.trace(torch.tensor([0, 1, 2]), model=model, names=["result", "resid_post"])
    assert t.str_tokens == [["0", "1", "2"]]
    norm_in = 2.0 / math.sqrt(4 * (0.25 + EPS))
    sigma = [math.sqrt((1 + norm_in**2) / 4 + EPS), math.sqrt(((1 + norm_in / 2) ** 2 + (norm_in / 2) ** 2) / 4 + EPS)]
    mean = trace_dla(t, model)[0, :, 1, 0]
    assert abs(float(mean[0]) - 0.75 * norm_in / sigma[0]) < 1e-5 and abs(float(mean[1]) - 0.5 * norm_in / 2 / sigma[1]) < 1e-5
    # against token 0: position 0 writes norm_in·e_1, read along e_1 − e_0; position 1 writes norm_in/2·(e_1 + e_2), along e_2 − e_0
    contrast = trace_dla(t, model, contrast=0)[0, :, 1, 0]
    assert abs(float(contrast[0]) - norm_in / sigma[0]) < 1e-5 and abs(float(contrast[1]) - norm_in / 2 / sigma[1]) < 1e-5
    assert torch.isnan(contrast[2])


class _DigitTokenizer:
    """Each character of a text is the token of that digit (the successor model's vocabulary is 0..3)."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [int(c) for c in text]}

    def convert_ids_to_tokens(self, ids):
        return [str(i) for i in ids]


def test_the_finding_with_a_contrast_token_measures_against_that_tokens_logit():
    from types import SimpleNamespace

    from attnsim.findings.base import FindingContext

    model, info = _successor_model()
    finding = DLAFinding(2, 2, 3, SimpleNamespace(dla_contrast="0"), FindingContext(tokenizer=_DigitTokenizer()))
    summary = _fold(finding, ResidualModule(model, info, DLAFinding.residual), torch.tensor([[0, 1, 2]]))
    norm_in = 2.0 / math.sqrt(4 * (0.25 + EPS))
    sigma = [math.sqrt((1 + norm_in**2) / 4 + EPS), math.sqrt(((1 + norm_in / 2) ** 2 + (norm_in / 2) ** 2) / 4 + EPS)]
    # against token 0 (as trace_dla with contrast=0): norm_in / σ_0 at position 0, norm_in / 2 / σ_1 at position 1
    expected = (norm_in / sigma[0] + norm_in / 2 / sigma[1]) / 2
    assert abs(float(summary.scalars["dla_mean"][1, 0]) - expected) < 1e-5
    assert summary.metrics["decomposition_error"] < 1e-6  # the check reads raw logits, whatever the baseline


def test_a_contrast_text_of_two_tokens_is_refused_with_the_tokens():
    from types import SimpleNamespace

    from attnsim.errors import ConfigError
    from attnsim.findings.base import FindingContext

    with pytest.raises(ConfigError, match=r"'stats.dla_contrast' is '01'.*2 tokens \['0', '1'\].*exactly one token"):
        DLAFinding(2, 2, 3, SimpleNamespace(dla_contrast="01"), FindingContext(tokenizer=_DigitTokenizer())).build()


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_every_component_sums_to_the_models_logit(family, tmp_path):
    from transformers import AutoModelForCausalLM

    path = save_tiny(tmp_path, family)
    info = inspect_model(str(path), 32)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = load_tokenizer(info, 32)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    encoded = tokenizer(["The minister said the plan would cost more.", "Shares fell."], padding=True, return_tensors="pt")
    finding = DLAFinding(info.n_layers, info.n_heads, 32, None)
    summary = _fold(finding, ResidualModule(model, info, DLAFinding.residual), encoded["input_ids"], encoded["attention_mask"])
    assert summary.metrics["decomposition_error"] < 1e-4
    assert summary.metrics["positions"] == int(encoded["attention_mask"].sum()) - 2  # each text's last token has no next
    torch.testing.assert_close(summary.scalars["dla_mean"].float(), _independent_dla(family, model, encoded), rtol=1e-4, atol=1e-5)


def _independent_dla(family, model, encoded):
    """Each head's mean DLA recomputed from hooks written here: W_O's input split by head, through W_O's slice, dotted with
    the final norm's weight times (W_U[t] − the mean row), centred for a LayerNorm, over σ of the norm's input."""
    base = model.base_model
    layers, out_path, norm = (base.layers, "self_attn.o_proj", base.norm) if family == "llama" else (base.h, "attn.c_proj", base.ln_f)
    zs, finals = [], []
    handles = [layer.get_submodule(out_path).register_forward_pre_hook(lambda m, a: zs.append(a[0])) for layer in layers]
    handles.append(norm.register_forward_pre_hook(lambda m, a: finals.append(a[0])))
    with torch.no_grad():
        model(**encoded, use_cache=False)
    for handle in handles:
        handle.remove()
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    valid = torch.zeros_like(mask, dtype=torch.bool)
    valid[:, :-1] = mask[:, :-1].bool() & mask[:, 1:].bool()
    targets = ids[:, 1:][valid[:, :-1]]
    x = finals[0][valid]
    w = model.lm_head.weight
    direction = norm.weight * (w[targets] - w.mean(0))
    if family == "gpt2":
        direction = direction - direction.mean(-1, keepdim=True)
        sigma = torch.sqrt(x.var(-1, unbiased=False) + norm.eps)
    else:
        sigma = torch.sqrt(x.pow(2).mean(-1) + norm.variance_epsilon)
    means = []
    for layer, z in zip(layers, zs):
        weight = layer.get_submodule(out_path).weight
        weight = weight.T if family == "gpt2" else weight  # (d_model, H·d_head)
        heads = z[valid].reshape(len(targets), model.config.num_attention_heads, -1)  # (N, H, d_head)
        slices = weight.reshape(weight.shape[0], model.config.num_attention_heads, -1)  # (d_model, H, d_head)
        result = torch.einsum("nhd,mhd->nhm", heads, slices)
        means.append((torch.einsum("nhm,nm->nh", result, direction) / sigma[:, None]).mean(0))
    return torch.stack(means).detach()


@pytest.mark.parametrize("family", ["gpt_neox", "opt", "qwen2", "gemma", "mistral"])
def test_the_decomposition_holds_for_every_decoder_family(family, tmp_path):
    """GPT-NeoX's parallel block, OPT's flattened MLP, Gemma's norm that scales by 1 + weight."""
    from transformers import AutoModelForCausalLM

    path = save_tiny(tmp_path, family)
    info = inspect_model(str(path), 32)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    finding = DLAFinding(info.n_layers, info.n_heads, 32, None)
    summary = _fold(finding, ResidualModule(model, info, DLAFinding.residual), torch.tensor([[5, 9, 33, 7, 101, 64, 12]]))
    assert summary.metrics["decomposition_error"] < 1e-6 and summary.metrics["positions"] == 6


def test_dla_refuses_a_model_that_is_not_a_causal_lm(tmp_path, tracking_uri):
    import attnsim
    from attnsim.errors import ConfigError

    with pytest.raises(ConfigError, match="dla need a causal language model .* 'all-MiniLM-L6-v2' is not one \\(an encoder, model type bert\\)"):
        attnsim.run("dla", ["model.path=bundled", "corpus.limit=2"])


def test_a_dla_run_logs_per_head_metrics_and_the_decomposition_check(tmp_path, tracking_uri):
    from mlflow import MlflowClient

    import attnsim

    path = save_tiny(tmp_path / "llama", "llama")
    result = attnsim.run(
        "dla", [f"model.path={path}", "corpus.limit=4", "corpus.seq_len=32", "trainer.batch_size=2", "trainer.progress_bar=false", "plots.explorer=false"]
    )
    metrics = MlflowClient(tracking_uri).get_run(result.run_id).data.metrics
    assert metrics["dla/decomposition_error"] < 1e-4
    assert "dla/dla_mean/L01/H03" in metrics and "dla/dla_positive_share/L00" in metrics
    assert 0 <= metrics["dla/dla_positive_share/L01/H03"] <= 1


def test_trace_dla_is_the_findings_per_position_attribution(tmp_path):
    import attnsim
    from attnsim.findings.dla import trace_dla

    path = save_tiny(tmp_path, "llama")
    texts = ["The minister said the plan would cost more.", "Shares fell."]
    t = attnsim.trace(texts, model=str(path), names=["result", "resid_post"])
    per_position = trace_dla(t, model=str(path))
    assert per_position.shape == (2, t.tokens.shape[1], 2, 4)
    assert torch.isnan(per_position[:, -1]).all() and torch.isnan(per_position[1][t.mask[1] == 0]).all()
    info = inspect_model(str(path), 32)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    finding = DLAFinding(2, 4, 32, None)
    summary = _fold(finding, ResidualModule(model, info, DLAFinding.residual), t.tokens, t.mask)
    torch.testing.assert_close(per_position.nanmean((0, 1)), summary.scalars["dla_mean"].float(), rtol=1e-5, atol=1e-6)


def test_trace_dla_refuses_gemma3_whose_blocks_norm_the_attention_s_output(tmp_path):
    """Gemma 3 adds post_attention_layernorm(W_O's output) to the stream, not the heads' results: refused, with why."""
    import attnsim
    from attnsim.errors import ModelError
    from attnsim.findings.dla import trace_dla

    path = str(save_tiny(tmp_path, "gemma3_text"))
    t = attnsim.trace("The cat sat on the mat.", model=path, names=["result", "resid_post"])
    with pytest.raises(ModelError, match="'gemma3_text' norms the attention's output before adding it to the residual stream"):
        trace_dla(t, model=path)
