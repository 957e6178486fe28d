"""Gradient-weighted rollout and CDAM: hand-worked stats, and the capture's gradients checked by finite differences."""

from __future__ import annotations

import pytest
import torch

from attnsim.capture.gradients import GradientCapture, GradientModule, load_classifier
from attnsim.capture.load import inspect_model
from attnsim.stats.gradmaps import GradientMapAccumulator, cdam, gradient_rollout, gradient_weighted_attention

D = torch.float64


def test_gradient_weighted_rollout_hand_worked():
    # one layer, two heads, two tokens
    attention = torch.tensor([[[[[0.5, 0.5], [0.25, 0.75]], [[1.0, 0.0], [0.5, 0.5]]]]], dtype=D)  # (L=1, B=1, H=2, 2, 2)
    gradients = torch.tensor([[[[[2.0, -1.0], [4.0, 1.0]], [[1.0, 3.0], [-2.0, 2.0]]]]], dtype=D)
    relevance = gradient_weighted_attention(attention, gradients)
    # head 0: ReLU([[1, -0.5], [1, 0.75]]); head 1: ReLU([[1, 0], [-1, 1]])
    assert torch.allclose(relevance[0, 0, 0], torch.tensor([[1.0, 0.0], [1.0, 0.75]], dtype=D))
    assert torch.allclose(relevance[0, 0, 1], torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=D))
    rollout = gradient_rollout(relevance)
    # Ā = mean over heads = [[1, 0], [0.5, 0.875]]; R = I + Ā I
    assert torch.allclose(rollout[0, 0], torch.tensor([[2.0, 0.0], [0.5, 1.875]], dtype=D))
    # a second identical layer: R2 = R1 + Ā R1 = [[4, 0], [0.5 + 0.5*2 + 0.875*0.5, 1.875 + 0.875*1.875]]
    two = gradient_rollout(torch.cat([relevance, relevance]))
    assert torch.allclose(two[1, 0], torch.tensor([[4.0, 0.0], [1.9375, 1.875 + 0.875 * 1.875]], dtype=D))


def test_padding_is_masked_and_cdam_hand_worked():
    attention = torch.ones(1, 1, 1, 3, 3, dtype=D) / 3
    gradients = torch.ones(1, 1, 1, 3, 3, dtype=D)
    relevance = gradient_weighted_attention(attention, gradients, torch.tensor([[True, True, False]]))
    assert torch.equal(relevance[0, 0, 0, 2], torch.zeros(3, dtype=D)) and torch.equal(relevance[0, 0, 0, :, 2], torch.zeros(3, dtype=D))
    tokens = torch.tensor([[[1.0, 2.0], [0.5, -1.0], [3.0, 3.0]]], dtype=D)
    grads = torch.tensor([[[0.5, 0.25], [2.0, 1.0], [1.0, 1.0]]], dtype=D)
    assert torch.allclose(cdam(tokens, grads), torch.tensor([[1.0, 0.0, 6.0]], dtype=D))
    assert torch.allclose(cdam(tokens, grads, torch.tensor([[True, True, False]])), torch.tensor([[1.0, 0.0, 0.0]], dtype=D))
    with pytest.raises(ValueError):
        cdam(tokens, grads[:, :2])


def test_gradient_accumulator_hand_worked_and_merge():
    relevance = torch.zeros(2, 1, 2, 2, 2, dtype=D)  # (L=2, B=1, H=2, T=2, T)
    relevance[0, 0, 0] = 1.0  # sum 4
    relevance[1, 0, 1, 0, 1] = 4.0  # sum 4
    rows = torch.tensor([[0.0, 3.0]], dtype=D)
    scores = torch.tensor([[2.0, -6.0]], dtype=D)
    categories = {"cls": torch.tensor([[True, False]]), "sep": torch.tensor([[False, True]])}
    acc = GradientMapAccumulator(2, 2, ["cls", "sep"])
    acc.update(relevance, rows, scores, categories, torch.tensor([0.25]), torch.tensor([True]))
    out = acc.compute()
    assert torch.allclose(out["head_relevance"], torch.tensor([[4.0, 0.0], [0.0, 4.0]], dtype=D))
    assert torch.allclose(out["relevance_share"], torch.tensor([[0.5, 0.0], [0.0, 0.5]], dtype=D))
    assert abs(float(out["cdam_cls_share"]) - 0.25) < 1e-12 and abs(float(out["cdam_sep_share"]) - 0.75) < 1e-12
    assert abs(float(out["cdam_positive_share"]) - 0.25) < 1e-12
    assert abs(float(out["rollout_sep_mass"]) - 1.0) < 1e-12
    assert abs(float(out["target_probability"]) - 0.25) < 1e-12
    other = GradientMapAccumulator(2, 2, ["cls", "sep"])
    other.update(relevance * 2, rows, -scores, categories, torch.tensor([0.75]), torch.tensor([False]))
    merged = acc.merge(other).compute()
    assert torch.allclose(merged["head_relevance"], torch.tensor([[6.0, 0.0], [0.0, 6.0]], dtype=D))
    assert abs(float(merged["target_is_predicted"]) - 0.5) < 1e-12
    assert abs(float(merged["cdam_positive_share"]) - 0.5) < 1e-12


# --- the capture's gradients, checked by finite differences --------------------------------


def _tiny_classifier(tmp_path):
    """A randomly initialised 2-layer BERT classifier (3 classes) saved with the bundled tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from tests.helpers.models import BUNDLED

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(BUNDLED)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        num_labels=3,
        initializer_range=0.3,
    )
    model = BertForSequenceClassification(config)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return tmp_path


DELTA: dict = {}


def _perturbable_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Eager attention whose probabilities get DELTA[layer] added, for finite differences (test only)."""
    scores = torch.matmul(query, key.transpose(2, 3)) * (scaling if scaling is not None else query.size(-1) ** -0.5)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = scores.softmax(-1)
    if module.layer_idx in DELTA:
        weights = weights + DELTA[module.layer_idx]
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def _hooks(model) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


def test_attention_and_token_gradients_match_finite_differences(tmp_path):
    from transformers import AttentionInterface

    info = inspect_model(str(_tiny_classifier(tmp_path)), 16)
    model, tags = load_classifier(info, seed=1)
    assert tags["attnsim.classifier_head"] == "checkpoint" and model.config.num_labels == 3
    model = model.double()
    module = GradientModule(model, info, "z", target_class=None)
    batch = {
        "input_ids": torch.tensor([[101, 2054, 2003, 1996, 3007, 1029, 102, 0], [101, 7592, 2088, 102, 0, 0, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0, 0, 0]]),
        "special_mask": torch.zeros(2, 8, dtype=torch.bool),
    }
    with torch.no_grad():  # transformers installs its own output-recording hooks on the first forward; they stay
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_attentions=True)
    before = _hooks(model)
    with torch.no_grad():
        capture = module.predict_step(batch, 0)
    assert _hooks(model) == before  # no hook outlives the call
    assert isinstance(capture, GradientCapture)  # without a view factory, the raw capture
    assert capture.attention_gradients.shape == capture.attention.shape == (2, 2, 2, 8, 8)
    target = capture.target

    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register("attnsim_test_perturbable", _perturbable_attention)
    AttentionMaskInterface.register("attnsim_test_perturbable", eager_mask)  # the same padding mask as eager
    model.config._attn_implementation = "attnsim_test_perturbable"

    def target_logits() -> torch.Tensor:
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return logits.gather(1, target[:, None])[:, 0]

    assert torch.allclose(target_logits(), capture.logits.gather(1, target[:, None])[:, 0], atol=1e-10)
    eps = 1e-6
    for layer, item, head, query, key in [(0, 0, 0, 1, 2), (1, 0, 1, 0, 3), (1, 1, 0, 0, 1), (0, 1, 1, 2, 3)]:
        delta = torch.zeros(2, 2, 8, 8, dtype=D)
        delta[item, head, query, key] = eps
        DELTA[layer] = delta
        up = target_logits()[item]
        DELTA[layer] = -delta
        down = target_logits()[item]
        DELTA.clear()
        numeric = float((up - down) / (2 * eps))
        analytic = float(capture.attention_gradients[layer, item, head, query, key])
        assert abs(analytic) > 1e-4  # a gradient that matters, not 0 = 0
        assert abs(numeric - analytic) <= 1e-6 * abs(analytic), (layer, item, head, query, key, numeric, analytic)

    # ∂y/∂T for the tokens entering the final block: perturb them with a pre-hook on the last layer
    model.config._attn_implementation = "eager"
    last = model.bert.encoder.layer[-1]
    for item, position, dim in [(0, 0, 3), (0, 4, 7), (1, 2, 0)]:
        values = []
        for sign in (1, -1):

            def bump(_module, args, kwargs, sign=sign, item=item, position=position, dim=dim):
                hidden = args[0].clone()
                hidden[item, position, dim] += sign * eps
                return (hidden, *args[1:]), kwargs

            handle = last.register_forward_pre_hook(bump, with_kwargs=True)
            try:
                values.append(target_logits()[item])
            finally:
                handle.remove()
        numeric = float((values[0] - values[1]) / (2 * eps))
        analytic = float(capture.final_gradients[item, position, dim])
        assert abs(analytic) > 1e-4
        assert abs(numeric - analytic) <= 1e-6 * abs(analytic), (item, position, dim, numeric, analytic)
    # CDAM is gradient x token summed over d_model
    assert torch.allclose(cdam(capture.final_tokens, capture.final_gradients), (capture.final_tokens * capture.final_gradients).sum(-1))
