"""Head ablation and activation patching — the mechanics (hooks on W_O's input), the arithmetic, the config."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from attnsim.capture.architectures import Architecture
from attnsim.capture.hooks import capture_heads
from attnsim.capture.interventions import (
    InterventionModule,
    PatchingModule,
    ablation_values,
    head_kind,
    load_task_model,
    replace_heads,
)
from attnsim.capture.load import inspect_model
from attnsim.config import load_config
from attnsim.data.prompt_pairs import collate_prompt_pairs, read_prompt_pairs
from attnsim.errors import ConfigError, CorpusError, ModelError
from attnsim.findings.ablation import build_plan
from attnsim.stats.interventions import (
    METRICS,
    TaskMetric,
    next_token_targets,
    random_head_sets,
    token_loss_sums,
)

# GPT-2's layers and W_O (a Conv1D) given here, so that these tests do not depend on the architecture table having gpt2
GPT2 = Architecture("h", "attn.c_attn", "attn.c_attn", "attn.c_attn", "attn.c_proj")


def _inputs(seed: int = 0, batch: int = 3, length: int = 12, vocab: int = 200):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, length), generator=generator)
    ids[:, 0] = 101
    mask = torch.ones_like(ids)
    mask[0, -3:] = 0  # one padded window
    return ids, mask


@pytest.fixture(scope="module")
def bert(tiny_bert):
    info = inspect_model(str(tiny_bert), 32)
    model, kind, _ = load_task_model(info)
    assert kind == "encoder"
    return info, model


@pytest.fixture(scope="module")
def bert_classifier(tmp_path_factory, tiny_bert):
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    path = tmp_path_factory.mktemp("tiny_cls")
    config = BertConfig.from_pretrained(tiny_bert, num_labels=5, id2label=dict(enumerate(["business", "entertainment", "politics", "sports", "tech"])))
    config.label2id = {v: k for k, v in config.id2label.items()}
    config.initializer_range = 0.5  # logits of a few units, so that a corruption moves the logit difference visibly
    torch.manual_seed(1)
    BertForSequenceClassification(config).save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(path)
    info = inspect_model(str(path), 32)
    model, kind, _ = load_task_model(info)
    assert kind == "classifier"
    return info, model


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from tests.helpers.tiny_models import save_tiny

    path = save_tiny(tmp_path_factory.mktemp("tiny_gpt2"), "gpt2")
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()
    return model


# -- mechanics ---------------------------------------------------------------------------------------------


def test_ablating_no_head_reproduces_the_clean_output_exactly(bert):
    info, model = bert
    ids, mask = _inputs()
    with torch.no_grad():
        clean = model(input_ids=ids, attention_mask=mask).last_hidden_state
        with replace_heads(model, info.arch, info.n_heads, {}):
            same = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.equal(clean, same)
    # the module's empty head set is a pass identical to the clean one: every metric sum equal
    batch = {"input_ids": ids, "attention_mask": mask, "special_mask": torch.zeros_like(ids, dtype=torch.bool), "index": torch.arange(3)}
    module = InterventionModule(model, info, [[]], "zero", TaskMetric("encoder"))
    with torch.no_grad():
        out = module.predict_step(batch, 0)
    assert torch.equal(out["sums"][0], out["sums"][1]) and out["sums"][0, METRICS.index("cosine")] == out["counts"][0, METRICS.index("cosine")]


def _zeroed_linear(model, arch, layer, head, n_heads):
    twin = copy.deepcopy(model)
    projection = twin.base_model.get_submodule(arch.layers)[layer].get_submodule(arch.output)
    width = projection.weight.shape[1] // n_heads
    with torch.no_grad():
        projection.weight[:, head * width : (head + 1) * width] = 0  # Linear: (d_model, H*d_head), the head's columns
    return twin


@pytest.mark.parametrize("layer, head", [(0, 0), (1, 3)])
def test_zero_ablating_a_head_equals_zeroing_its_w_o_columns(bert, layer, head):
    info, model = bert
    ids, mask = _inputs(1)
    twin = _zeroed_linear(model, info.arch, layer, head, info.n_heads)
    with torch.no_grad():
        with replace_heads(model, info.arch, info.n_heads, ablation_values([(layer, head)], "zero")):
            ablated = model(input_ids=ids, attention_mask=mask).last_hidden_state
        expected = twin(input_ids=ids, attention_mask=mask).last_hidden_state
        clean = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert (ablated - expected).abs().max() <= 1e-6
    assert (ablated - clean).abs().max() > 1e-3  # the head mattered at all


def test_zero_ablation_on_a_decoder_with_a_conv1d_w_o(gpt2):
    """GPT-2's W_O is a Conv1D whose weight is (H*d_head, d_model): the head's rows are zeroed."""
    n_heads = gpt2.config.n_head
    ids = torch.randint(0, gpt2.config.vocab_size, (2, 10), generator=torch.Generator().manual_seed(0))
    twin = copy.deepcopy(gpt2)
    projection = twin.transformer.h[1].attn.c_proj
    width = projection.weight.shape[0] // n_heads
    with torch.no_grad():
        projection.weight[2 * width : 3 * width, :] = 0
        with replace_heads(gpt2, GPT2, n_heads, {(1, 2): torch.zeros(())}):
            ablated = gpt2(input_ids=ids).logits
        expected = twin(input_ids=ids).logits
    assert (ablated - expected).abs().max() <= 1e-6


def test_zero_ablation_of_a_query_head_under_grouped_query_attention():
    """Llama with 4 query heads sharing 2 key/value heads: W_O's input holds one Z per query head (its columns are zeroed)."""
    from transformers import LlamaForCausalLM

    from tests.helpers.tiny_models import tiny_config

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_config("llama", 100)).eval()
    arch = Architecture("layers", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
    ids = torch.randint(3, 100, (2, 8), generator=torch.Generator().manual_seed(1))
    twin = _zeroed_linear(model, arch, 0, 3, 4)
    with torch.no_grad():
        with replace_heads(model, arch, 4, {(0, 3): torch.zeros(())}):
            ablated = model(input_ids=ids).logits
        expected = twin(input_ids=ids).logits
        clean = model(input_ids=ids).logits
    assert (ablated - expected).abs().max() <= 1e-6 and (ablated - clean).abs().max() > 1e-6


def test_mean_ablation_over_a_single_window_is_that_windows_own_z(bert):
    info, model = bert
    ids, mask = _inputs(2, batch=1)
    batch = {"input_ids": ids, "attention_mask": mask, "special_mask": torch.zeros_like(ids, dtype=torch.bool), "index": torch.arange(1)}
    module = InterventionModule(model, info, [[(0, 1)], [(0, 0), (1, 2), (1, 3)]], "mean", TaskMetric("encoder"))
    with torch.no_grad():
        assert module.predict_step(batch, 0) is None  # the first pass
        mean = module.finish_mean()
        with capture_heads(model, info.arch, info.n_heads) as store:
            model(input_ids=ids, attention_mask=mask)
        assert torch.equal(mean, torch.stack([z[0] for z in store]))  # (L, H, T, d): the window's own Z
        out = module.predict_step(batch, 0)
    cosine = out["sums"][:, METRICS.index("cosine")] / out["counts"][:, METRICS.index("cosine")]
    assert torch.allclose(cosine, torch.ones(3, dtype=torch.float64), atol=1e-6)  # effect 0 for every set


def test_resample_takes_another_windows_z(bert):
    info, model = bert
    ids, mask = _inputs(3, batch=2)
    mask[:] = 1
    with torch.no_grad(), capture_heads(model, info.arch, info.n_heads) as store:
        model(input_ids=ids, attention_mask=mask)
    donor = [torch.roll(z, -1, dims=0) for z in store]
    values = ablation_values([(1, 0)], "resample", donor=donor)
    assert torch.equal(values[(1, 0)][0], store[1][1, 0]) and torch.equal(values[(1, 0)][1], store[1][0, 0])
    single = InterventionModule(model, info, [[(0, 0)]], "resample", TaskMetric("encoder"))
    batch = {"input_ids": ids[:1], "attention_mask": mask[:1], "special_mask": torch.zeros_like(ids[:1], dtype=torch.bool), "index": torch.arange(1)}
    with pytest.raises(ModelError, match="at least two windows"), torch.no_grad():
        single.predict_step(batch, 0)


def test_a_head_outside_the_model_is_refused(bert):
    info, model = bert
    with pytest.raises(ModelError, match="does not exist: the model has 2 layers of 4 heads"):
        with replace_heads(model, info.arch, info.n_heads, {(2, 0): torch.zeros(())}):
            pass
    assert not any(m._forward_pre_hooks for m in model.modules())  # no hook leaked


def test_patching_every_head_of_every_layer_restores_the_clean_logit_difference(bert_classifier, tiny_bert):
    info, model = bert_classifier
    clean_ids, mask = _inputs(4, batch=2)
    mask[:] = 1
    corrupted_ids = clean_ids.clone()
    corrupted_ids[:, 3:6] = torch.tensor([7, 8, 9])  # some words swapped; [CLS] (the read-out) kept
    batch = {
        "clean_ids": clean_ids,
        "corrupted_ids": corrupted_ids,
        "attention_mask": mask,
        "position": torch.zeros(2, dtype=torch.long),
        "answer": torch.tensor([3, 0]),
        "wrong": torch.tensor([0, 2]),
    }
    module = PatchingModule(model, info, "classifier")
    with torch.no_grad():
        with capture_heads(model, info.arch, info.n_heads) as store:
            clean = module.logit_diff(model(input_ids=clean_ids, attention_mask=mask), batch)
        every = {(layer, head): z[:, head] for layer, z in enumerate(store) for head in range(info.n_heads)}
        with replace_heads(model, info.arch, info.n_heads, every):
            patched = module.logit_diff(model(input_ids=corrupted_ids, attention_mask=mask), batch)
        out = module.predict_step(batch, 0)
    assert (patched - clean).abs().max() <= 1e-5
    assert torch.allclose(out["clean"], clean) and out["patched"].shape == (2, 4, 2)
    assert (out["clean"] - out["corrupted"]).abs().max() > 0.1  # the corruption changed the logit difference


# -- task metrics ----------------------------------------------------------------------------------------


def test_next_token_loss_equals_the_models_own_loss(gpt2):
    ids = torch.randint(0, gpt2.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        out = gpt2(input_ids=ids, attention_mask=mask, labels=ids)
    sums, counts = token_loss_sums(out.logits, next_token_targets(ids, mask), "lm_loss")
    index = METRICS.index("lm_loss")
    assert counts[index] == 16 and abs(float(sums[index] / counts[index]) - float(out.loss)) <= 1e-5
    assert next_token_targets(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 1, 0]])).tolist() == [[2, -100, -100]]


def test_masked_lm_metric_masks_the_same_seeded_tokens(tiny_bert):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig.from_pretrained(tiny_bert, architectures=["BertForMaskedLM"])).eval()  # as save_pretrained writes it
    assert head_kind(model.config) == "masked_lm"
    ids, mask = _inputs(6, batch=2, length=20)
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = True
    batch = {"input_ids": ids, "attention_mask": mask, "special_mask": special, "index": torch.tensor([4, 9])}
    task = TaskMetric("masked_lm", mask_token_id=103, mask_fraction=0.3, seed=0)
    inputs = task.inputs(batch)
    masked = inputs["input_ids"] == 103
    assert masked.any(dim=1).all() and not masked[:, 0].any() and not (masked & ~mask.bool()).any()
    assert torch.equal(task.inputs(batch)["input_ids"], inputs["input_ids"])  # reproducible
    with torch.no_grad():
        out = model(**inputs)
    sums, counts = task.sums(out, batch, out)
    expected = torch.nn.functional.cross_entropy(out.logits[masked].double(), ids[masked], reduction="sum")
    index = METRICS.index("mlm_loss")
    assert counts[index] == masked.sum() and abs(float(sums[index] - expected)) <= 1e-6


# -- effect arithmetic (hand-worked) ---------------------------------------------------------------------


def test_random_draws_are_reproducible_under_the_seed():
    first = random_head_sets(6, 12, 5, 10, seed=0)
    assert first == random_head_sets(6, 12, 5, 10, seed=0)
    assert first != random_head_sets(6, 12, 5, 10, seed=1)
    assert all(len(set(s)) == 5 and s == sorted(s) and all(0 <= layer < 6 and 0 <= h < 12 for layer, h in s) for s in first)
    assert len({tuple(s) for s in first}) > 1
    plan = build_plan(2, 4, "each", [(1, 1), (0, 2)], 3, 0, ("cosine",))
    again = build_plan(2, 4, "each", [(1, 1), (0, 2)], 3, 0, ("cosine",))
    assert plan.passes() == again.passes() and len(plan.passes()) == 8 + 1 + 3 + 3
    assert plan.random_index() == {1: [10, 11, 12], 2: [13, 14, 15]}


# -- config and input checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "override, match",
    [
        ("interventions.heads=[2, 9]", "list of \\[layer, head\\] pairs"),
        ("interventions.heads=every", "give null, each"),
        ("interventions.random_draws=1", "at least 2 draws"),
        ("interventions.mode=drop", "allowed values: zero, mean, resample"),
        ("interventions.select.run=abc", "go together"),
        ("interventions.mask_fraction=0", r"\(0, 1\]"),
        ("interventions.nope=1", "Unknown config key 'interventions.nope'"),
    ],
)
def test_bad_intervention_settings_are_refused(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config("ablation", [override])


def test_the_experiments_compose():
    cfg = load_config("ablation")
    assert cfg.findings == ["ablation"] and cfg.interventions.heads == "each" and cfg.interventions.random_draws == 10
    cfg = load_config("ablation", ["interventions.heads=[[1, 2], [0, 3]]", "interventions.mode=mean"])
    assert list(map(list, cfg.interventions.heads)) == [[1, 2], [0, 3]] and cfg.interventions.mode == "mean"
    assert load_config("patching").interventions.pairs == "bundled"


def test_bundled_pairs_read_for_a_classifier_and_bad_pairs_are_refused(tiny_bert, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    labels = {name: i for i, name in enumerate(["business", "entertainment", "politics", "sports", "tech"])}
    from attnsim.config import package_dir

    bundled = str(package_dir("experiments") / "patching_pairs.jsonl")
    pairs = read_prompt_pairs(bundled, tokenizer, "classifier", labels)
    assert len(pairs) == 6 and all(len(p.clean) == len(p.corrupted) for p in pairs)
    assert (pairs[0].answer, pairs[0].wrong) == (3, 0)
    batch = collate_prompt_pairs(pairs[:2])
    assert batch["clean_ids"].shape == batch["corrupted_ids"].shape == (2, max(len(p.clean) for p in pairs[:2]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"clean": "The cat sat.", "corrupted": "The elephant sat on the mat.", "answer": "sports", "wrong": "tech"}) + "\n")
    with pytest.raises(CorpusError, match="line 1: the clean prompt has 6 tokens and the corrupted one 9"):
        read_prompt_pairs(str(bad), tokenizer, "classifier", labels)
    bad.write_text(json.dumps({"clean": "a b", "corrupted": "a c", "answer": "golf", "wrong": "tech"}) + "\n")
    with pytest.raises(CorpusError, match="'answer' is 'golf', not a class"):
        read_prompt_pairs(str(bad), tokenizer, "classifier", labels)
    with pytest.raises(CorpusError, match="has no head"):
        read_prompt_pairs(bundled, tokenizer, "encoder")


@pytest.mark.parametrize("z, verdict", [(2.5, "holds"), (1.0, "does not hold"), (float("nan"), "not measured")])
def test_the_report_reads_the_verdict_of_the_singled_out_heads(z, verdict):
    from attnsim.analysis.report import render
    from attnsim.analysis.runs import LoggedRun
    from attnsim.analysis.verdicts import intervention_verdicts

    metrics = {
        "ablation/clean_accuracy": 0.9,
        "ablation/top_accuracy_effect": 0.3,
        "ablation/top_accuracy_random_mean": 0.05,
        "ablation/top_accuracy_random_std": 0.1,
        "ablation/top_accuracy_zscore": z,
    }
    params = {
        "interventions.select.metric": "repetition/repetition_score",
        "interventions.select.top": "5",
        "interventions.select.run": "abcdef0123456789",
        "findings": "ablation",
    }
    run = LoggedRun("f" * 32, "ablation", "FINISHED", "0", params=params, metrics=metrics)
    assert intervention_verdicts(run) == [
        ("top", "accuracy", verdict, f"accuracy effect 0.3 against random heads 0.05 ± 0.1 (z = {'n/a' if z != z else f'{z:.3g}'}; clean accuracy 0.9)")
    ]
    text = render([run])
    section = text.split("## Interventions")[1]
    assert (
        f"top 5 heads by `repetition/repetition_score` of run `abcdef01`, by accuracy: the heads the statistic singles out matter more than random heads: **{verdict}**"
        in section
    )
    repetition = text.split("## 6. Repetition heads")[1].split("## 7.")[0]
    assert f"(top heads by `repetition/repetition_score`): the heads the statistic singles out matter more than random heads: **{verdict}**" in repetition
    assert "the heads the statistic singles out" not in text.split("## 6. Repetition heads")[0].split("## Runs")[1]  # not under other claims
