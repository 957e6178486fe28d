"""The notebook view: :func:`view` returns an object whose ``_repr_html_`` draws the explorer inline, with no server.

The view is the live page's front end (:mod:`attnsim.explore.page`) with one text's analysis embedded: the chosen
head's maps at full precision (float32), every other head's attention and CSM and every layer's rollout at one
byte a cell (scaled within each map), so that clicking another head or pressing the arrow keys redraws without
a server. Loaded models are kept per (model.path, overrides): a second ``view`` of the same model does not load it again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

_LOADED: Dict[Tuple[str, ...], Any] = {}


class View:
    """One text's explorer, drawn inline by Jupyter (``_repr_html_``) or written to a file (:meth:`save`).

    Attributes:
        data: the embedded :meth:`~attnsim.explore.session.Explorer.analyse` payload (with ``all_maps``).
        info: the model's :meth:`~attnsim.explore.session.Explorer.describe`.
        context: a logged run's per-head corpus statistics, or None.
    """

    def __init__(self, boot: Dict[str, Any]):
        self.boot = boot
        self.data = boot["data"]
        self.info = boot["info"]
        self.context = boot.get("context")

    def _repr_html_(self) -> str:
        from attnsim.explore.page import fragment

        return fragment(self.boot)

    def html(self) -> str:
        """A whole, self-contained HTML document of the view."""
        from attnsim.explore.page import page

        return page(self.boot, f"attnsim view — {self.info['model']}")

    def save(self, path: Union[str, Path]) -> Path:
        """Write :meth:`html` to ``path`` (UTF-8) and return it; it opens from disk, offline."""
        target = Path(path)
        target.write_text(self.html(), encoding="utf-8")
        return target


def explorer_for(model: str = "bundled", overrides: Sequence[str] = ()) -> Any:
    """The loaded :class:`~attnsim.explore.session.Explorer` of ``model`` (a ``model.path``) and config overrides, loaded once per process."""
    from attnsim.explore.session import Explorer

    key = (str(model), *overrides)
    if key not in _LOADED:
        _LOADED[key] = Explorer.load([f"model.path={model}", *overrides])
    return _LOADED[key]


def view(
    text: str,
    model: str = "bundled",
    run: Optional[str] = None,
    layer: int = 0,
    head: int = 0,
    off: Sequence[Tuple[int, int]] = (),
    mode: Optional[str] = None,
    overrides: Sequence[str] = (),
    uri: Optional[str] = None,
) -> View:
    """The explorer of one text, inline in a notebook (as bertviz's views are): no server.

    Args:
        text: the text (cut after ``corpus.seq_len`` tokens, default 256; the view says what was cut).
        model: any ``model.path`` attnsim supports (``bundled``, ``smollm2``, a folder, a .gguf file).
        run: a logged run of the same model whose per-head corpus statistics stand beside the maps.
        layer: the layer of the head drawn first (0-indexed).
        head: the head drawn first, in ``layer`` (0-indexed).
        off: heads switched off, (layer, head) pairs.
        mode: how ``off`` heads are switched off, ``zero`` or ``mean`` (default ``interventions.mode``).
        overrides: more config overrides (``corpus.seq_len=128``, ``stats.normalise=cosine``).
        uri: the tracking store of ``run``.

    Returns:
        A :class:`View`; ``.save("x.html")`` writes it to a file.

    Raises:
        AttnsimError: a bad model, text, head or run (the message names the fix).
    """
    from attnsim.explore.context import corpus_context

    explorer = explorer_for(model, overrides)
    data = explorer.analyse(text, layer, head, off, mode, every_head=True)
    info = explorer.describe()
    context = corpus_context(run, explorer.info, uri) if run else None
    boot = {
        "live": False,
        "api": "",
        "info": info,
        "context": context,
        "data": data,
        "initial": {
            "text": text,
            "layer": layer,
            "head": head,
            "off": [list(p) for p in off],
            "mode": (data.get("ablation") or {}).get("mode") or info["mode"],
        },
    }
    return View(boot)


__all__ = ["View", "view", "explorer_for"]
