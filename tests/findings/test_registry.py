"""attnsim.findings.registry: its functions on hand-worked inputs."""

from __future__ import annotations

from attnsim.findings.base import Finding
from attnsim.findings.registry import FINDINGS


def test_declarations_are_on_every_finding_with_their_types():
    for name in FINDINGS:
        kind = FINDINGS[name]
        assert issubclass(kind, Finding) and kind.name == name
        for flag in ("needs_attention", "needs_gradients", "blockwise", "needs_interventions", "encoder_decoder"):
            assert isinstance(getattr(kind, flag), bool), (name, flag)
        assert isinstance(kind.config_keys, tuple) and all(isinstance(key, str) and key for key in kind.config_keys)
