"""Names of the findings an experiment can list under ``findings``."""

from __future__ import annotations

from typing import Dict, Type

from attnsim.findings.base import Finding
from attnsim.findings.anchors import AnchorsFinding
from attnsim.findings.attention_maps import AttentionMapsFinding
from attnsim.findings.attention_regions import AttentionRegionsFinding
from attnsim.findings.csm import CSMFinding
from attnsim.findings.distance import DistanceFinding
from attnsim.findings.gradient_maps import GradientMapsFinding
from attnsim.findings.noise import NoiseFinding
from attnsim.findings.repetition import RepetitionFinding
from attnsim.findings.rollout import RolloutFinding
from attnsim.findings.sentences import SentencesFinding
from attnsim.findings.separators import SeparatorsFinding

FINDINGS: Dict[str, Type[Finding]] = {
    CSMFinding.name: CSMFinding,
    DistanceFinding.name: DistanceFinding,
    SentencesFinding.name: SentencesFinding,
    AnchorsFinding.name: AnchorsFinding,
    RepetitionFinding.name: RepetitionFinding,
    AttentionRegionsFinding.name: AttentionRegionsFinding,
    SeparatorsFinding.name: SeparatorsFinding,
    NoiseFinding.name: NoiseFinding,
    AttentionMapsFinding.name: AttentionMapsFinding,
    RolloutFinding.name: RolloutFinding,
    GradientMapsFinding.name: GradientMapsFinding,
}
