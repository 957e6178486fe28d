"""Shapes of captured tensors.

Attention that is not (batch, heads, T, T) and per-head outputs that are not (batch, T, heads x d_head)
are a ModelError naming the layer and the shapes, raised in capture before any statistic runs; an
output projection called with keyword arguments is still captured, or refused with a clear message.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from transformers import BertConfig, BertModel

from attnsim.capture.architectures import Architecture, architecture_for, layer_modules
from attnsim.capture.hooks import capture_heads, check_shapes, forward_with_capture
from attnsim.errors import ModelError

HEADS, D_HEAD = 4, 8
WIDTH = HEADS * D_HEAD
FAKE = Architecture("layers", "q", "k", "v", "attention.output.dense")


def tiny_bert_model() -> BertModel:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=HEADS, intermediate_size=64, attn_implementation="eager")
    return BertModel(config).eval()


def _inputs(batch: int = 2, tokens: int = 7):
    ids = torch.randint(5, 100, (batch, tokens), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


class KeywordProjection(nn.Module):
    """An output projection whose forward takes ``hidden_states`` (and optionally ``residual``) by keyword."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)

    def forward(self, hidden_states, residual=None):  # noqa: ANN001
        out = self.linear(hidden_states)
        return out if residual is None else out + residual


class FakeLayer(nn.Module):
    """A layer whose W_O is called in one of several ways (``mode``)."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode
        self.attention = nn.Module()
        self.attention.output = nn.Module()
        self.attention.output.dense = KeywordProjection() if mode.startswith("keyword") else nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dense = self.attention.output.dense
        batch, tokens, _ = x.shape
        if self.mode == "keyword":
            return dense(hidden_states=x)
        if self.mode == "keyword_two":
            return dense(hidden_states=x, residual=x)
        if self.mode == "input_keyword":
            return dense(input=x)
        if self.mode == "split_heads":  # the heads' outputs passed unconcatenated: (B, H, T, d_head)
            dense(x.reshape(batch, tokens, HEADS, D_HEAD).transpose(1, 2))
        return dense(x)


class FakeModel(nn.Module):
    """Embedding + layers; returns attention maps of ``attention_shape`` when asked for them."""

    def __init__(self, mode: str, attention_shape=None):  # noqa: ANN001
        super().__init__()
        self.embed = nn.Embedding(100, WIDTH)
        self.layers = nn.ModuleList([FakeLayer(mode), FakeLayer(mode)])
        self.attention_shape = attention_shape
        self.config = SimpleNamespace(_attn_implementation="eager")
        self.seen = []

    @property
    def base_model(self) -> nn.Module:
        return self

    def forward(self, input_ids, attention_mask=None, output_attentions=False):  # noqa: ANN001
        x = self.embed(input_ids)
        for layer in self.layers:
            self.seen.append(x)
            x = layer(x)
        batch, tokens = input_ids.shape
        shape = self.attention_shape or (batch, HEADS, tokens, tokens)
        attentions = tuple(torch.full(shape, 1.0 / shape[-1]) for _ in self.layers) if output_attentions else None
        return SimpleNamespace(last_hidden_state=x, attentions=attentions)


@pytest.mark.parametrize("mode", ["keyword", "input_keyword", "positional"])
def test_projection_called_with_keywords_is_captured(mode):
    model = FakeModel(mode)
    with torch.no_grad():
        _, capture = forward_with_capture(model, FAKE, HEADS, _inputs(), attention=True)
    assert capture.z.shape == (2, 2, HEADS, 7, D_HEAD)
    # Z of layer 1 is its input (B, T, H*d) split into heads: (B, H, T, d)
    expected = model.seen[1].reshape(2, 7, HEADS, D_HEAD).transpose(1, 2)
    assert torch.equal(capture.z[1], expected)


def test_ambiguous_keywords_are_refused_not_an_index_error():
    with pytest.raises(
        ModelError,
        match=r"Layer 0 \(layers.0.attention.output.dense\): the output projection W_O was called with keyword arguments \['hidden_states', 'residual'\]",
    ):
        with torch.no_grad():
            forward_with_capture(FakeModel("keyword_two"), FAKE, HEADS, _inputs(), attention=False)


def test_unconcatenated_heads_are_an_error_naming_layer_and_shape():
    with pytest.raises(
        ModelError,
        match=r"Layer 0 \(layers.0.attention.output.dense\): the input of the output projection W_O has shape \(2, 4, 7, 8\).*heads x d_head = 4 x 8 = 32",
    ):
        with torch.no_grad():
            forward_with_capture(FakeModel("split_heads"), FAKE, HEADS, _inputs(), attention=False)


def test_wrong_head_count_for_the_projection_width():
    """n_heads that does not divide W_O's input width (a config that does not match the weights)."""
    with pytest.raises(ModelError, match=r"Layer 0 .*shape \(2, 7, 32\).*a multiple of 5 \(num_attention_heads = 5\)"):
        with torch.no_grad():
            forward_with_capture(FakeModel("positional"), FAKE, 5, _inputs(), attention=False)


@pytest.mark.parametrize(
    "shape, bad",
    [((2, 1, 7, 7), "(2, 1, 7, 7)"), ((2, HEADS, 7, 6), "(2, 4, 7, 6)"), ((2, HEADS, 7), "(2, 4, 7)"), ((2, HEADS * 2, 7, 7), "(2, 8, 7, 7)")],
)
def test_attention_of_the_wrong_shape_is_an_error(shape, bad):
    with pytest.raises(ModelError, match=re.escape(f"Layer 0: the attention probabilities have shape {bad}, but attnsim expects") + r".* = \(2, 4, 7, 7\)"):
        with torch.no_grad():
            forward_with_capture(FakeModel("positional", shape), FAKE, HEADS, _inputs(), attention=True)


def test_real_bert_with_keyword_projection_and_monkeypatched_attention():
    """A tiny BERT whose W_O is called as dense(input=...) is captured as before; a forward returning
    head-pooled attention in layer 1 is refused, naming layer 1."""
    model = tiny_bert_model()
    arch = architecture_for("bert")
    inputs = _inputs()
    with torch.no_grad():
        _, plain = forward_with_capture(model, arch, HEADS, inputs, attention=True)
    for layer in layer_modules(model, arch):
        out = layer.attention.output  # BertSelfOutput: dense, dropout, LayerNorm(x + input_tensor)
        out.forward = lambda hidden_states, input_tensor, out=out: out.LayerNorm(out.dropout(out.dense(input=hidden_states)) + input_tensor)
    with torch.no_grad():
        _, keyword = forward_with_capture(model, arch, HEADS, inputs, attention=True)
    assert torch.allclose(keyword.z, plain.z) and torch.allclose(keyword.attention, plain.attention)

    original = model.forward

    def pooled(*args, **kwargs):
        out = original(*args, **kwargs)
        maps = list(out.attentions)
        maps[1] = maps[1].mean(1, keepdim=True)  # (B, 1, T, T): heads averaged
        out["attentions"] = tuple(maps)
        return out

    model.forward = pooled
    with pytest.raises(ModelError, match=r"Layer 1: the attention probabilities have shape \(2, 1, 7, 7\).*\(2, 4, 7, 7\)"):
        with torch.no_grad():
            forward_with_capture(model, arch, HEADS, inputs, attention=True)


def test_token_count_must_match_the_batch():
    """Images: T comes from the layout; a model that adds tokens the layout does not know is refused."""
    z = [torch.zeros(2, HEADS, 9, D_HEAD)]
    check_shapes(z, [torch.zeros(2, HEADS, 9, 9)], HEADS, 2, 9)
    with pytest.raises(ModelError, match=r"Layer 0: the per-head outputs Z have shape \(2, 4, 9, 8\).*2 inputs of 7 tokens"):
        check_shapes(z, None, HEADS, 2, 7)
    with pytest.raises(ModelError, match=r"Layer 0: the per-head outputs Z .*4 heads"):
        check_shapes([torch.zeros(2, 2, 9, 16)], None, HEADS, 2, 9)


def test_error_is_raised_before_any_statistic_runs(tiny_bert):
    """Through CaptureModule.predict_step: the batch never reaches a view."""
    from attnsim.capture.load import inspect_model, load_model
    from attnsim.capture.module import CaptureModule

    info = inspect_model(str(tiny_bert), 16)
    model, _ = load_model(info, needs_attention=True)
    original = model.forward

    def pooled(*args, **kwargs):
        out = original(*args, **kwargs)
        out["attentions"] = tuple(m[:, :2] for m in out.attentions)  # two heads of four
        return out

    model.forward = pooled
    module = CaptureModule(model, info, True, "z", view_factory=lambda capture, batch: pytest.fail("a view was built"))
    batch = _inputs(2, 16)
    with pytest.raises(ModelError, match=r"Layer 0: the attention probabilities have shape \(2, 2, 16, 16\)"), torch.no_grad():
        module.predict_step(batch, 0)


def test_hooks_are_removed_after_an_error():
    model = FakeModel("split_heads")
    with pytest.raises(ModelError), torch.no_grad():
        with capture_heads(model, FAKE, HEADS):
            model(**_inputs())
    assert all(not layer.attention.output.dense._forward_pre_hooks for layer in model.layers)
