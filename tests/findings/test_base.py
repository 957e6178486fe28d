"""What findings declare as class attributes: their needs, their config keys, and the default summary."""

from __future__ import annotations

import torch

from attnsim.config import load_config
from attnsim.findings.base import Finding, FindingContext, Needs
from attnsim.findings.registry import FINDINGS

DEFAULT_SUMMARY = {"attention_maps", "attention_regions", "csm", "distance", "induction", "noise", "repetition", "sentences", "separators"}


def test_nine_findings_share_the_default_summarise():
    assert {name for name in FINDINGS if FINDINGS[name].summarise is Finding.summarise} == DEFAULT_SUMMARY


def test_the_default_summary_reads_the_declared_outputs():
    class Acc:
        def compute(self):
            return {"a": torch.ones(2, 3), "b": torch.zeros(2, 3), "p": torch.ones(2, 3, 4), "bins": torch.arange(4), "m": "matrix"}

    class Declared(Finding):
        name = "declared"
        statistics = ("a", "b")
        profiles = ("p", "missing")  # a profile compute() does not give is skipped
        profile_bins = "bins"
        figure_outputs = ("m",)

        def build(self):
            return {"acc": Acc()}

    finding = Declared(2, 3, 8, load_config("csm").stats, FindingContext())
    finding.windows = 5
    summary = finding.summarise()
    assert set(summary.scalars) == {"a", "b"} and set(summary.profiles) == {"p"} and summary.windows == 5
    assert torch.equal(summary.profile_index["p"], torch.arange(4)) and summary.figure_data == {"m": "matrix"}


def test_findings_declare_their_needs():
    needs = Needs.of([FINDINGS[name] for name in ("csm", "rollout", "gradient_maps")])
    assert needs.attention and needs.gradients and not needs.interventions and not needs.encoder_decoder
    assert needs.without_blockwise == ("rollout", "gradient_maps")
    assert Needs.of([FINDINGS["ablation"]]).interventions and Needs.of([FINDINGS["alignment"]]).encoder_decoder
