"""What findings declare as class attributes (issue 32): their needs, their config keys, and the default summary."""

from __future__ import annotations

import torch

from attnsim.config import load_config
from attnsim.findings.base import Finding, FindingContext
from attnsim.findings.registry import FINDINGS

DEFAULT_SUMMARY = {"attention_maps", "attention_regions", "csm", "distance", "induction", "noise", "repetition", "sentences", "separators"}


def test_declarations_are_on_every_finding_with_their_types():
    for name in FINDINGS:
        kind = FINDINGS[name]
        assert issubclass(kind, Finding) and kind.name == name
        for flag in ("needs_attention", "needs_gradients", "blockwise", "needs_interventions", "encoder_decoder"):
            assert isinstance(getattr(kind, flag), bool), (name, flag)
        assert isinstance(kind.config_keys, tuple) and all(isinstance(key, str) and key for key in kind.config_keys)


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
