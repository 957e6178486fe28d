"""One Lightning callback per finding, built on :mod:`attnsim.stats`.

The names below are imported on first use, so that ``attnsim.findings.registry``
(finding names, used by config validation) loads without torch.
"""

from attnsim.lazy import lazy_attributes

_LAZY = {
    "Finding": "attnsim.findings.base",
    "Summary": "attnsim.findings.base",
    "ExampleRecorder": "attnsim.findings.examples",
    "Examples": "attnsim.findings.examples",
    "FINDINGS": "attnsim.findings.registry",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)

__all__ = ["Finding", "Summary", "ExampleRecorder", "Examples", "FINDINGS"]
