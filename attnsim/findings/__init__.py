"""One Lightning callback per finding, built on :mod:`attnsim.stats`.

The names below are imported on first use, so that ``attnsim.findings.registry``
(finding names, used by config validation) loads without torch.
"""

import importlib

_LAZY = {
    "Finding": "attnsim.findings.base",
    "Summary": "attnsim.findings.base",
    "ExampleRecorder": "attnsim.findings.examples",
    "Examples": "attnsim.findings.examples",
    "FINDINGS": "attnsim.findings.registry",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnsim.findings' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["Finding", "Summary", "ExampleRecorder", "Examples", "FINDINGS"]
