"""Decoder models end to end: next-token gradient maps, `paper` runs on a tiny GPT-2 and a tiny Llama with
finite metrics, and `attnsim compare` of a decoder run beside a MiniLM-style (BERT) run."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

import attnsim.workflows.run as runner
from attnsim.analysis.compare import compare
from attnsim.capture.gradients import GradientModule, load_classifier
from attnsim.capture.load import inspect_model
from attnsim.findings.registry import FINDINGS
from tests.helpers.runs import runs_of
from tests.helpers.tiny_models import save_tiny

PAPER = ["csm", "distance", "sentences", "anchors", "repetition", "attention_regions", "separators", "noise"]


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("gpt2"), "gpt2")


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("llama"), "llama")


def test_gradient_maps_of_a_causal_lm_differentiate_the_next_token_logit_at_the_last_position(tiny_gpt2):
    info = inspect_model(str(tiny_gpt2), 16)
    model, tags = load_classifier(info, seed=0)
    assert tags["attnsim.classifier_head"] == "checkpoint" and tags["attnsim.num_labels"] == str(model.config.vocab_size)
    ids = torch.tensor([[20, 40, 60, 80, 100, 120], [30, 50, 70, 90, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    batch = {"input_ids": ids, "attention_mask": mask, "special_mask": torch.zeros(2, 6, dtype=torch.bool)}
    last = torch.tensor([5, 3])
    for target_class in (None, 17):
        capture = GradientModule(model, info, "z", target_class=target_class).predict_step(batch, 0)
        # an independent forward: the LM head's logits at each window's last real token
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        outputs = model(inputs_embeds=embeds, attention_mask=mask, output_attentions=True)
        next_logits = outputs.logits[torch.arange(2), last]  # (B, vocab)
        assert torch.allclose(capture.logits, next_logits.detach(), atol=1e-6)
        expected = next_logits.argmax(-1) if target_class is None else torch.full((2,), target_class)
        assert capture.target.tolist() == expected.tolist()
        grads = torch.autograd.grad(next_logits.gather(1, expected[:, None]).sum(), outputs.attentions)
        assert torch.allclose(capture.attention_gradients, torch.stack(grads), atol=1e-6)
        # rows after the last real token cannot change its logit
        assert capture.attention_gradients[:, 1, :, 4:].abs().max() == 0
        assert capture.attention_gradients[:, 0].abs().amax((0, 1, 3)).gt(0).any()


def _paper_run(model_path, tracking_uri, seq_len=32):
    overrides = [
        f"model.path={model_path}",
        "corpus.limit=4",
        f"corpus.seq_len={seq_len}",
        "trainer.batch_size=4",
        "plots.examples=1",
        "trainer.progress_bar=false",
        f"tracking.uri={tracking_uri}",
    ]
    return runner.run("paper", overrides)


@pytest.mark.e2e
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_paper_run_on_a_tiny_decoder_finishes_with_finite_metrics(family, tiny_gpt2, tiny_llama, tracking_uri):
    path = tiny_gpt2 if family == "gpt2" else tiny_llama
    result = _paper_run(path, tracking_uri)
    client, runs = runs_of(tracking_uri)
    (run,) = runs
    assert run.info.status == "FINISHED" and run.info.run_id == result.run_id
    metrics = run.data.metrics
    means = [f"{name}/{stat}" for name in PAPER for stat in FINDINGS[name].statistics]
    assert [key for key in means if key not in metrics] == []
    # every finding measures something on a decoder: no NaN model mean except ratios that can be undefined
    undefined = {key for key in means if not math.isfinite(metrics[key])}
    assert undefined <= {"attention_regions/csm_inside_outside_ratio", "repetition/repetition_csm_ratio"}, undefined
    assert math.isfinite(metrics["csm/mean"]) and 0 < metrics["separators/attention_cls"] <= 1
    # a random decoder attends about uniformly over the keys each query can see: the causal chance levels
    assert metrics["separators/attention_entropy"] == pytest.approx(metrics["separators/attention_entropy_chance"], rel=0.05)
    assert metrics["separators/attention_entropy_chance"] < math.log(32) - 0.5  # not the encoder's log(T)
    heads = pd.read_csv(client.download_artifacts(run.info.run_id, "tables/csm_heads.csv"))
    assert len(heads) == 2 * 4


@pytest.mark.e2e
def test_compare_puts_a_decoder_run_beside_a_bert_run(tmp_path, tiny_bert, tracking_uri):
    """A 3-layer GPT-2 beside the 2-layer MiniLM-style BERT: layers the shallower model lacks are NaN (today's rule)."""
    deeper = save_tiny(tmp_path / "gpt2_3", "gpt2", layers=3)
    bert = _paper_run(tiny_bert, tracking_uri)
    gpt2 = _paper_run(deeper, tracking_uri)
    table = compare([bert.run_id, gpt2.run_id], log_run=False, uri=tracking_uri)
    assert table.shape[1] == 2
    bert_column, gpt2_column = table.columns
    for stat in ("csm/mean", "separators/attention_cls", "separators/attention_entropy", "distance/short_range_share"):
        rows = table.loc[stat]
        assert list(rows.index) == ["L00", "L01", "L02", "mean"], stat
        assert rows[gpt2_column].notna().all() and rows[bert_column].drop("L02").notna().all(), stat
        assert math.isnan(rows.loc["L02", bert_column]), stat
