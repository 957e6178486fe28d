"""What findings declare as class attributes: their needs, their config keys, and the default summary."""

from __future__ import annotations

import torch

from attnsim.config import load_config
from attnsim.findings.base import Finding, FindingContext, Needs
from attnsim.findings.registry import FINDINGS


def test_findings_on_the_default_summarise_declare_what_it_reads():
    """A finding that keeps :meth:`Finding.summarise` declares its per-head statistics (or profiles, or figure outputs):
    the summary, the metric reference and the tables read those declarations, so one without any would log nothing."""
    default = [name for name in FINDINGS if FINDINGS[name].summarise is Finding.summarise]
    assert {"csm", "distance", "sentences", "separators", "induction"} <= set(default)
    assert [n for n in default if not (FINDINGS[n].statistics or FINDINGS[n].profiles or FINDINGS[n].figure_outputs)] == []


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
