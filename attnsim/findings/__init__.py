"""One Lightning callback per finding, built on :mod:`attnsim.stats`."""

from attnsim.findings.base import Finding, Summary
from attnsim.findings.examples import ExampleRecorder, Examples
from attnsim.findings.registry import FINDINGS

__all__ = ["Finding", "Summary", "ExampleRecorder", "Examples", "FINDINGS"]
