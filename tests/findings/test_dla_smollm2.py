"""On the bundled SmolLM2, the heads the ``induction`` experiment ranks highest raise the correct token on the second copy
of repeated random tokens: their mean direct logit attribution there is positive and larger than on the first copy."""

from __future__ import annotations

import pytest
import torch

import attnsim
from attnsim.findings.dla import trace_dla

pytestmark = pytest.mark.e2e

FAST = ["trainer.progress_bar=false", "tracking.figures=false", "plots.explorer=false"]


def test_top_induction_heads_raise_the_copied_token(smollm2, tracking_uri):
    scores = attnsim.run("induction", ["model.path=smollm2", "corpus.limit=4"] + FAST).summaries["induction"].scalars["induction_score"]
    order = torch.argsort(scores.flatten(), descending=True)[:5]
    heads = [(int(i) // scores.shape[1], int(i) % scores.shape[1]) for i in order]
    first = torch.randint(1000, 40000, (2, 50), generator=torch.Generator().manual_seed(0))
    t = attnsim.trace(torch.cat([first, first], 1), model="smollm2", names=["result", "resid_post"])
    dla = trace_dla(t, model="smollm2")  # (batch, pos, layer, head)
    for layer, head in heads:
        one, two = float(dla[:, :49, layer, head].mean()), float(dla[:, 50:99, layer, head].mean())
        assert two > 0 and two > one, (layer, head, one, two)  # measured: +0.02 to +0.20 on the second copy, about 0 on the first
