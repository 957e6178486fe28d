"""Package attributes imported on first use (PEP 562), so that importing a package loads none of its heavy modules.

``attnsim.capture``, ``attnsim.data`` and ``attnsim.findings`` publish names whose modules import torch, Lightning
or transformers; their light submodules (``capture.locate``, ``data.locate``, ``findings.registry``) must stay
importable without those, for the checks that run before the heavy imports. Standard library only.
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable, Dict, List, Tuple


def lazy_attributes(package: str, names: Dict[str, str]) -> Tuple[Callable[[str], object], Callable[[], List[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` for ``names`` (attribute -> module that defines it).

    Raises (from ``__getattr__``):
        AttributeError: a name the package does not publish, as Python words it.
    """

    def __getattr__(name: str) -> object:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
