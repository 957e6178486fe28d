"""Fonts of every figure: DejaVu Sans, then Noto fonts for the scripts it lacks.

Token labels, titles and example texts can be in any script. Matplotlib's
default font, DejaVu Sans, covers Latin, Greek and Cyrillic but has no CJK,
Arabic or Devanagari glyphs: such a label was drawn as boxes, with one
"Glyph … missing from font(s) DejaVu Sans" warning per character.

:func:`use_fonts` (called when :mod:`attnsim.plots` is imported) registers
fonts shipped by Python packages, so that a fresh install needs no system font:

===========================  ============================  ======================================================
family                       scripts                       package (licence)
===========================  ============================  ======================================================
DejaVu Sans                  Latin, Greek, Cyrillic, ...   matplotlib (bundled; Bitstream Vera)
Noto Sans CJK SC             Chinese, Japanese, Korean     ``noto-cjk-sans-otc`` (OFL-1.1), extra ``attnsim[cjk]``
Noto Sans Arabic             Arabic                        ``fontpkg-noto-sans-arabic`` (OFL-1.1)
Noto Sans Devanagari         Devanagari                    ``fontpkg-noto-sans-devanagari`` (OFL-1.1)
===========================  ============================  ======================================================

and sets ``rcParams["font.family"]`` to that list. Matplotlib looks each
character up in the families in order (per-glyph fallback), so Latin
text is drawn in DejaVu Sans exactly as before and a character DejaVu Sans
lacks comes from the first Noto font that has it. The Noto Sans CJK faces
share one glyph set (they differ in regional glyph forms only): the SC face
(Simplified Chinese forms) covers Japanese kana and Korean Hangul too.
Scripts outside this list (Thai, Hebrew, Bengali, ...) still fall back to
boxes, with matplotlib's warning.

The CJK font (a 16 MB wheel) is an extra: without ``attnsim[cjk]`` figures draw
CJK characters as boxes, and the first token label with such a character
(:func:`check_text`, called by :func:`attnsim.plots.common.short_label`) logs one
warning naming the extra.

Matplotlib 3.11 or later is needed: it reads the faces of a font collection
(``.ttc``; older versions see only its first face, Noto Sans CJK JP) and
shapes complex scripts with libraqm, so that Arabic is joined and drawn right
to left and Devanagari vowel signs and conjuncts are placed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

log = logging.getLogger(__name__)

BASE = "DejaVu Sans"  # matplotlib's default, always present


def _cjk() -> Path:
    import noto_cjk_sans_otc

    return Path(str(noto_cjk_sans_otc.FONT_PATH))


def _fontpkg(family: str) -> Callable[[], Path]:
    def find() -> Path:
        import fontpkg

        return Path(fontpkg.path(family))

    return find


# (family, package to pip install, finder of its font file), in fallback order after DejaVu Sans
FALLBACKS: Tuple[Tuple[str, str, Callable[[], Path]], ...] = (
    ("Noto Sans CJK SC", "noto-cjk-sans-otc", _cjk),
    ("Noto Sans Arabic", "fontpkg-noto-sans-arabic", _fontpkg("Noto Sans Arabic")),
    ("Noto Sans Devanagari", "fontpkg-noto-sans-devanagari", _fontpkg("Noto Sans Devanagari")),
)

# fallback fonts that come with an extra of attnsim, not with attnsim itself: family -> (extra, the code point
# ranges of its scripts). Without the extra, the family is left out quietly until a label needs it (check_text).
CJK_RANGES = ((0x1100, 0x11FF), (0x2E80, 0x9FFF), (0xA960, 0xA97F), (0xAC00, 0xD7FF), (0xF900, 0xFAFF), (0xFF00, 0xFFEF), (0x20000, 0x3FFFF))
EXTRAS: Dict[str, Tuple[str, Tuple[Tuple[int, int], ...]]] = {"Noto Sans CJK SC": ("cjk", CJK_RANGES)}

_families: Optional[List[str]] = None  # what use_fonts registered, once per process
_absent: Dict[str, str] = {}  # families of EXTRAS not installed -> their extra, until check_text has warned


def font_files() -> List[Tuple[str, Path]]:
    """``(family, font file)`` of each fallback font whose package is installed.

    A missing package is left out, so that matplotlib does not warn "font family not found" on every text:
    one of attnsim's own dependencies with a warning naming the ``pip install`` that fixes it, the font of an
    extra (:data:`EXTRAS`) quietly, remembered for :func:`check_text`.
    """
    found = []
    for family, package, find in FALLBACKS:
        try:
            path = find()
        except Exception as exc:  # noqa: BLE001 - ImportError, or the package lost its file
            if isinstance(exc, ImportError) and family in EXTRAS:
                _absent[family] = EXTRAS[family][0]
                log.debug("%s is not installed (the extra attnsim[%s]): figures draw its scripts as boxes (%s)", package, EXTRAS[family][0], exc)
                continue
            log.warning("Figures cannot draw %s text: the font package %s is missing or broken (%s). Run: pip install %s", family, package, exc, package)
            continue
        if not path.is_file():
            log.warning("Figures cannot draw %s text: %s has no font file %s. Run: pip install --force-reinstall %s", family, package, path, package)
            continue
        found.append((family, path))
    return found


def use_fonts() -> List[str]:
    """Register the fallback fonts with matplotlib and make them the font list of every figure.

    Sets ``rcParams["font.family"]`` to DejaVu Sans followed by the Noto families found (see the
    module docstring); figures created afterwards use it. Registering is done once per process
    (``font_manager.fontManager.addfont``; about 50 ms, most of it reading the CJK collection's faces);
    later calls only set ``font.family`` again.

    Returns:
        The family list now in ``rcParams["font.family"]``.
    """
    global _families
    import matplotlib
    from matplotlib import font_manager

    if _families is None:
        families = [BASE]
        for family, path in font_files():
            font_manager.fontManager.addfont(str(path))
            if family in {entry.name for entry in font_manager.fontManager.ttflist}:
                families.append(family)
            else:  # e.g. a sub-font of a collection (.ttc) with matplotlib < 3.11, which reads only the first
                log.warning(
                    "Figures cannot draw %s text: matplotlib %s did not find that family in %s. Upgrade matplotlib to 3.11 or later.",
                    family,
                    matplotlib.__version__,
                    path,
                )
        _families = families
    matplotlib.rcParams["font.family"] = list(_families)
    return list(_families)


def check_text(text: str) -> None:
    """Warn, once per process and family, when ``text`` has a character whose font is an extra not installed.

    Called on every token label (:func:`attnsim.plots.common.short_label`); costs a scan of ``text`` only
    while such a font is missing (:data:`EXTRAS`, filled by :func:`font_files`).
    """
    for family, extra in list(_absent.items()):
        ranges = EXTRAS[family][1]
        char = next((c for c in text if any(low <= ord(c) <= high for low, high in ranges)), None)
        if char is not None:
            del _absent[family]
            log.warning(
                "Figures draw %r (U+%04X) and the rest of its script as boxes: its font, %s, is the extra attnsim[%s]. Run: pip install 'attnsim[%s]'",
                char,
                ord(char),
                family,
                extra,
                extra,
            )


__all__ = ["BASE", "EXTRAS", "FALLBACKS", "check_text", "font_files", "use_fonts"]
