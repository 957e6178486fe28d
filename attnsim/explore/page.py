"""The one front end of the live page and the notebook view: ``static/explore.js`` and ``static/explore.css``, inlined.

Both the served page (:mod:`attnsim.explore.server`) and the notebook view (:mod:`attnsim.explore.notebook`)
are this module's HTML: the script and style are read from the package's ``static/`` folder (package data)
and inlined, with the view's start-up data as JSON. The served page fetches each text's maps from the
server; the notebook view embeds them. Nothing is loaded from the network.
"""

from __future__ import annotations

import html
import json
import uuid
from functools import cache
from importlib import resources
from typing import Any, Dict


@cache
def asset(name: str) -> str:
    """The text of ``static/<name>`` (``explore.js`` or ``explore.css``)."""
    return resources.files("attnsim.explore").joinpath("static", name).read_text(encoding="utf-8")


def _json(value: Any) -> str:
    """JSON safe inside a <script> element (no ``</`` can close it early)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def fragment(boot: Dict[str, Any]) -> str:
    """A self-contained HTML fragment (style, a root element, script) that mounts the explorer with ``boot``.

    Args:
        boot: ``live`` (bool: fetch from the server), ``api`` (the server's base path), ``info``
            (:meth:`~attnsim.explore.session.Explorer.describe`), ``initial`` (``text``, ``layer``, ``head``, ``off``,
            ``mode``), ``data`` (an :meth:`~attnsim.explore.session.Explorer.analyse` payload, embedded views),
            ``context`` (:func:`~attnsim.explore.context.corpus_context` or None), ``context_error``, ``error``.
    """
    root = f"attnsim-explore-{uuid.uuid4().hex[:8]}"
    return (
        f"<style>{asset('explore.css')}</style>\n"
        f'<div id="{root}" class="attnsim-explore"></div>\n'
        f"<script>{asset('explore.js')}</script>\n"
        f"<script>AttnsimExplore.mount(document.getElementById({json.dumps(root)}), {_json(boot)});</script>\n"
    )


def page(boot: Dict[str, Any], title: str) -> str:
    """A whole HTML document around :func:`fragment`."""
    return f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>\n<body>\n{fragment(boot)}</body></html>\n'


__all__ = ["asset", "fragment", "page"]
