"""Head ablation and patching on decoders from the architecture table: ``ablation`` (each head) on a tiny GPT-2 (Conv1D W_O) and a
tiny Llama (grouped-query attention), measured by the causal LM's next-token loss, and ``patching`` on GPT-2."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from mlflow import MlflowClient

import attnsim
from tests.helpers.tiny_models import save_tiny

SMALL = ["corpus.seq_len=32", "corpus.limit=4", "trainer.batch_size=4", "trainer.progress_bar=false", "interventions.random_draws=2", "tracking.figures=false"]


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def decoder(request, tmp_path_factory):
    return request.param, save_tiny(tmp_path_factory.mktemp(f"tiny_{request.param}"), request.param)


def _windows(overrides):
    from attnsim.config import load_config
    from attnsim.findings.registry import FINDINGS
    from attnsim.workflows.run import prepare

    windows = prepare(load_config("ablation", overrides, known_findings=FINDINGS)).corpus.windows
    ids = torch.from_numpy(np.stack([w.input_ids for w in windows])).long()
    mask = torch.from_numpy(np.stack([w.attention_mask for w in windows])).long()
    return ids, mask


def test_ablation_of_each_head_of_a_causal_lm(decoder, tracking_uri):
    family, path = decoder
    overrides = [f"model.path={path}", "interventions.heads=each"] + SMALL
    result = attnsim.run("ablation", overrides)
    summary = result.summaries["ablation"]
    assert set(summary.metrics) >= {"clean_lm_loss"} and not any(k.startswith("clean_") and k != "clean_lm_loss" for k in summary.metrics)
    for part in ("effect", "random_mean", "random_std", "zscore"):
        grid = summary.scalars[f"lm_loss_{part}"]
        assert grid.shape == (2, 4) and bool(grid.isfinite().all()), (family, part)  # every query head alone (Llama: 4 query heads on 2 key/value heads)
    assert float(summary.scalars["lm_loss_effect"].abs().max()) > 0  # the heads do something

    # the clean value is the model's own next-token loss on the same windows (Hugging Face's labels= loss)
    from transformers import AutoModelForCausalLM

    ids, mask = _windows(overrides)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    with torch.no_grad():
        own = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
    assert summary.metrics["clean_lm_loss"] == pytest.approx(float(own), rel=1e-5)

    client = MlflowClient(tracking_uri)
    table = pd.read_csv(client.download_artifacts(result.run_id, "tables/ablation_sets.csv"))
    assert len(table) == 8 and set(table["metric"]) == {"lm_loss"}
    assert np.allclose(table["effect"], table["ablated"] - table["clean"])  # a loss: effect = ablated - clean
    tags = client.get_run(result.run_id).data.tags
    assert tags["attnsim.intervention_head"] == "causal_lm"


def test_activation_patching_on_a_tiny_gpt2(tmp_path_factory, tracking_uri):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = save_tiny(tmp_path_factory.mktemp("tiny_gpt2_patching"), "gpt2")
    tokenizer = AutoTokenizer.from_pretrained(path)
    # single-token words of the trained BPE tokenizer (a leading space marks a word start)
    words = [w for w in ("Ġsaid", "Ġyear", "Ġthat", "Ġhas", "Ġare", "Ġits", "Ġfor", "Ġand") if w in tokenizer.get_vocab()]
    words = [tokenizer.convert_tokens_to_string([w]) for w in words]
    words = [w for w in words if len(tokenizer(w, add_special_tokens=False)["input_ids"]) == 1][:6]
    assert len(words) >= 4
    pairs = []
    for n, (a, b) in enumerate(zip(words[0::2], words[1::2])):
        # prompts of two lengths: a batch of pairs is right-padded, the read-out is each pair's last real token
        clean, corrupted = (f"The{a} in the{a} and the", f"The{b} in the{b} and the") if n % 2 == 0 else (f"The{a} and the", f"The{b} and the")
        assert len(tokenizer(clean)["input_ids"]) == len(tokenizer(corrupted)["input_ids"])  # equal length: Z is copied position by position
        pairs.append({"clean": clean, "corrupted": corrupted, "answer": a, "wrong": b})
    file = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    file.write_text("".join(json.dumps(p) + "\n" for p in pairs))

    result = attnsim.run("patching", [f"model.path={path}", f"interventions.pairs={file}", "trainer.progress_bar=false", "tracking.figures=false"])
    summary = result.summaries["patching"]
    assert summary.metrics["pairs"] == float(len(pairs))
    share = summary.scalars["restored_share"]
    assert share.shape == (2, 4) and bool(share.isfinite().all())

    # clean and corrupted logit differences are the model's own: logit(answer) - logit(wrong) after the last token
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    diffs = {"clean": [], "corrupted": []}
    for pair in pairs:
        answer, wrong = (tokenizer(pair[k], add_special_tokens=False)["input_ids"][0] for k in ("answer", "wrong"))
        for key in diffs:
            with torch.no_grad():
                logits = model(**tokenizer(pair[key], return_tensors="pt")).logits[0, -1]
            diffs[key].append(float(logits[answer] - logits[wrong]))
    assert summary.metrics["clean_logit_diff"] == pytest.approx(sum(diffs["clean"]) / len(pairs), abs=1e-5)
    assert summary.metrics["corrupted_logit_diff"] == pytest.approx(sum(diffs["corrupted"]) / len(pairs), abs=1e-5)
    expected = (summary.scalars["patched_logit_diff"] - summary.metrics["corrupted_logit_diff"]) / (
        summary.metrics["clean_logit_diff"] - summary.metrics["corrupted_logit_diff"]
    )
    assert torch.allclose(share, expected) and math.isfinite(float(share.sum()))
