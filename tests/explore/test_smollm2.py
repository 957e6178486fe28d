"""The live explorer on the bundled real LLM (model.path=smollm2): one short text, one head switched off."""

from __future__ import annotations

import numpy as np
import torch

from attnsim.explore.session import Explorer


def test_smollm2_explorer_predicts_and_ablates(smollm2):
    from attnsim.capture.interventions import ablation_values, replace_heads

    explorer = Explorer.load(["model.path=smollm2", "corpus.seq_len=32"])
    assert explorer.kind == "causal_lm" and explorer.describe()["layers"] == 30 and explorer.describe()["heads"] == 9
    text = "The capital of France is Paris. The capital of Italy is"
    data = explorer.analyse(text, 5, 3, off=[(3, 0)], mode="zero")
    assert data["tokens"][-1] == "is" and len(data["predictions"]["tokens"]) == data["n_tokens"]
    assert any("Rome" in token for token in data["predictions"]["tokens"][-1])  # the model's top-5 after "Italy is"
    window = explorer.window(text)
    inputs = {"input_ids": window.batch["input_ids"], "attention_mask": window.batch["attention_mask"]}
    with torch.inference_mode(), replace_heads(explorer.model, explorer.info.arch, explorer.info.n_heads, ablation_values([(3, 0)], "zero")):
        direct = torch.softmax(explorer.model(**inputs).logits[0, -1], -1).topk(5)
    assert data["ablation"]["predictions"]["ids"][-1] == direct.indices.tolist()
    assert np.abs(np.array(data["ablation"]["predictions"]["p"][-1]) - direct.values.numpy()).max() <= 1e-6
    assert data["numbers"]["induction_score"][5][3] is not None  # "The capital of" repeats
