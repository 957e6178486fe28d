"""Corpus sources, sentence segmentation, fixed-length windows and the DataModule.

The names below are imported on first use (PEP 562), so that importing a light submodule
(:mod:`attnsim.data.sources`) loads neither torch nor Lightning: the command line's checks of
``corpus.path`` run before the heavy imports (:mod:`attnsim.workflows.preflight`).
"""

from attnsim.lazy import lazy_attributes

_LAZY = {
    "WindowDataModule": "attnsim.data.module",
    "collate_windows": "attnsim.data.module",
    "Document": "attnsim.data.sources",
    "read_documents": "attnsim.data.sources",
    "Corpus": "attnsim.data.windows",
    "Window": "attnsim.data.windows",
    "build_corpus": "attnsim.data.windows",
}


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)

__all__ = list(_LAZY)
