"""Names of the findings an experiment can list under ``findings``."""

from __future__ import annotations

from typing import Dict, Type

from attnsim.findings.base import Finding
from attnsim.findings.csm import CSMFinding

FINDINGS: Dict[str, Type[Finding]] = {
    CSMFinding.name: CSMFinding,
}
