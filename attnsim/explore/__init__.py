"""The live explorer: type a text, see every head now, switch heads off (``attnsim explore``, :func:`attnsim.view`).

Modules: :mod:`~attnsim.explore.session` (one loaded model, one text's maps and numbers),
:mod:`~attnsim.explore.context` (a logged run's per-head corpus statistics), :mod:`~attnsim.explore.page`
(the one front end: ``static/explore.js`` and ``explore.css``), :mod:`~attnsim.explore.server` (FastAPI app and
uvicorn), :mod:`~attnsim.explore.notebook` (the inline view, no server).
"""

from __future__ import annotations

__all__ = ["view"]


def view(*args, **kwargs):
    """See :func:`attnsim.explore.notebook.view`."""
    from attnsim.explore.notebook import view as _view

    return _view(*args, **kwargs)
