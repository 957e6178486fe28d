"""Names of the findings an experiment can list under ``findings``.

:data:`FINDINGS` maps a finding's name to its class. It knows the names
without importing the classes (which import torch, Lightning and matplotlib):
listing, ``in`` and ``sorted(FINDINGS)`` stay light, so that ``attnsim show``
and config validation do not load torch; ``FINDINGS[name]`` imports that one
finding's module on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Dict, Iterator, Type, Union

if TYPE_CHECKING:  # pragma: no cover - typing only
    from attnsim.findings.base import Finding

# name -> "module:class"; the class's ``name`` attribute equals the key (tests check it)
_CLASSES: Dict[str, str] = {
    "csm": "attnsim.findings.csm:CSMFinding",
    "distance": "attnsim.findings.distance:DistanceFinding",
    "sentences": "attnsim.findings.sentences:SentencesFinding",
    "anchors": "attnsim.findings.anchors:AnchorsFinding",
    "repetition": "attnsim.findings.repetition:RepetitionFinding",
    "attention_regions": "attnsim.findings.attention_regions:AttentionRegionsFinding",
    "separators": "attnsim.findings.separators:SeparatorsFinding",
    "noise": "attnsim.findings.noise:NoiseFinding",
    "attention_maps": "attnsim.findings.attention_maps:AttentionMapsFinding",
    "rollout": "attnsim.findings.rollout:RolloutFinding",
    "gradient_maps": "attnsim.findings.gradient_maps:GradientMapsFinding",
    "induction": "attnsim.findings.induction:InductionFinding",
    # encoder–decoder findings (corpus.source=translation, T5/BART/Marian)
    "alignment": "attnsim.findings.alignment:AlignmentFinding",
    # residual-stream findings of causal LMs (attnsim.capture.residual): the capture record and the model's readout
    "dla": "attnsim.findings.dla:DLAFinding",
    "logit_lens": "attnsim.findings.logit_lens:LogitLensFinding",
    # interventions (head ablation, activation patching): runs of their own module (attnsim.capture.interventions), not the capture's view
    "ablation": "attnsim.findings.ablation:AblationFinding",
    "patching": "attnsim.findings.patching:PatchingFinding",
}

#: Names of the bundled findings, in registry order (no import of any finding).
NAMES = tuple(_CLASSES)


class FindingRegistry(MutableMapping):
    """Finding name -> :class:`~attnsim.findings.base.Finding` subclass, each class imported on first lookup.

    Values are classes or ``"module:Class"`` references; a reference is imported and
    replaced by its class when first read. Iteration, ``len`` and ``in`` never import.
    Assigning a class registers an extra finding (tests do this).
    """

    def __init__(self, entries: Dict[str, Union[str, type]]):
        self._entries: Dict[str, Union[str, type]] = dict(entries)

    def __getitem__(self, name: str) -> "Type[Finding]":
        value = self._entries[name]
        if isinstance(value, str):
            module, attribute = value.split(":")
            value = self._entries[name] = getattr(importlib.import_module(module), attribute)
        return value

    def __setitem__(self, name: str, value: "Type[Finding]") -> None:
        self._entries[name] = value

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"FindingRegistry({list(self._entries)})"


FINDINGS = FindingRegistry(_CLASSES)

__all__ = ["FINDINGS", "NAMES", "FindingRegistry"]
