"""``attnsim.report``: the reproduction report's Python API, callable as ``attnsim.report(run_ids, ...)``.

The report itself is :mod:`attnsim.analysis.report`; this module re-exports its API and is
callable, so that ``attnsim.report(...)`` is :func:`~attnsim.analysis.report.report` even once
``import attnsim.report`` has made ``attnsim.report`` name this module.
"""

from __future__ import annotations

import sys
import types

from attnsim.analysis.report import ReportError, ReportResult, report, write_report

__all__ = ["report", "ReportResult", "ReportError", "write_report"]


class _CallableModule(types.ModuleType):
    """This module, callable: ``attnsim.report(...)`` is :func:`report` even once ``attnsim.report``
    names the module (importing a submodule sets the package attribute of the same name)."""

    def __call__(self, *args, **kwargs) -> ReportResult:
        return report(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
