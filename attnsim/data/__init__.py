"""Corpus sources, sentence segmentation, fixed-length windows and the DataModule.

The names below are imported on first use (PEP 562), so that importing a light submodule
(:mod:`attnsim.data.sources`) loads neither torch nor Lightning: the command line's checks of
``corpus.path`` run before the heavy imports (:mod:`attnsim.workflows.preflight`).
"""

import importlib as _importlib

_LAZY = {
    "WindowDataModule": "attnsim.data.module",
    "collate_windows": "attnsim.data.module",
    "Document": "attnsim.data.sources",
    "read_documents": "attnsim.data.sources",
    "Corpus": "attnsim.data.windows",
    "Window": "attnsim.data.windows",
    "build_corpus": "attnsim.data.windows",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(_importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = list(_LAZY)
