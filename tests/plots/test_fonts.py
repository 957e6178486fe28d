"""Figures draw CJK, Arabic, Cyrillic, Greek and Devanagari text without missing glyphs; without the CJK font
(the extra ``attnsim[cjk]``) the first CJK token label logs one warning naming the extra."""

from __future__ import annotations

import logging
import sys
import warnings

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

import attnsim.plots  # noqa: F401 - sets the fonts
from attnsim.plots import fonts

SAMPLES = {
    "Chinese": "中文",
    "Arabic": "العربية",
    "Cyrillic": "Кириллица",
    "Greek": "Ελληνικά",
    "Devanagari": "देवनागरी",
    "Japanese": "ひらがな",
    "Korean": "한국어",
}


def _glyph_warnings(draw) -> list:
    """Messages of every "Glyph ... missing" warning (warnings module or logging) while ``draw()`` runs."""
    records: list = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Collect(level=logging.DEBUG)
    logger = logging.getLogger("matplotlib")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            draw()
    finally:
        logger.removeHandler(handler)
    messages = [str(w.message) for w in caught] + records
    return [m for m in messages if "Glyph" in m and "missing" in m]


def _draw_labels() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from attnsim.plots.common import matrix_grid

    labels = list(SAMPLES.values()) + ["plain", "##s"]
    fig = matrix_grid(
        np.random.default_rng(0).random((2, len(labels), len(labels))), ["中文 head 0", "देवनागरी head 1"], "Ελληνικά / Кириллица / العربية", 32, labels=labels
    )
    try:
        FigureCanvasAgg(fig).draw()
    finally:
        plt.close(fig)


def test_font_list_is_dejavu_then_noto_fallbacks():
    assert fonts.use_fonts() == ["DejaVu Sans", "Noto Sans CJK SC", "Noto Sans Arabic", "Noto Sans Devanagari"]
    assert matplotlib.rcParams["font.family"] == ["DejaVu Sans", "Noto Sans CJK SC", "Noto Sans Arabic", "Noto Sans Devanagari"]


def test_some_font_of_the_list_has_every_character():
    """Every code point of the samples is in the cmap of a font that matplotlib resolves for a family of the list."""
    from fontTools.ttLib import TTFont
    from matplotlib import font_manager

    cmaps = {}
    for family in matplotlib.rcParams["font.family"]:
        found = font_manager.fontManager.findfont(font_manager.FontProperties(family=family), fallback_to_default=False)
        path, index = (found.path, found.face_index) if hasattr(found, "face_index") else (found, 0)
        font = TTFont(path, fontNumber=index, lazy=True)
        assert font["name"].getBestFamilyName() == family  # resolved to the family itself, not a stand-in
        cmaps[family] = set(font.getBestCmap())
    assert not any(ord(c) in cmaps["DejaVu Sans"] for c in "中दひ한")  # the fallbacks are needed (DejaVu Sans has Arabic letters itself)
    for script, text in SAMPLES.items():
        for char in text:
            covering = [family for family, cmap in cmaps.items() if ord(char) in cmap]
            assert covering, f"{script}: no font of the list has {char!r} (U+{ord(char):04X})"
    assert all(ord(c) in cmaps["DejaVu Sans"] for c in SAMPLES["Cyrillic"] + SAMPLES["Greek"])  # from DejaVu Sans itself


def test_figure_with_non_latin_labels_emits_no_glyph_warning():
    assert _glyph_warnings(_draw_labels) == []


def test_dejavu_alone_would_warn(monkeypatch):
    """Control: the same figure with matplotlib's default font alone warns about missing glyphs."""
    monkeypatch.setitem(matplotlib.rcParams, "font.family", ["DejaVu Sans"])
    missing = _glyph_warnings(_draw_labels)
    assert any("CJK UNIFIED IDEOGRAPH-4E2D" in m for m in missing) and any("DEVANAGARI" in m for m in missing)


def test_missing_font_package_is_left_out_with_the_fix(monkeypatch, caplog):
    def gone():
        raise ImportError("No module named 'fontpkg'")

    arabic = ("Noto Sans Arabic", "fontpkg-noto-sans-arabic", gone)
    monkeypatch.setattr(fonts, "FALLBACKS", (fonts.FALLBACKS[0], arabic, fonts.FALLBACKS[2]))
    with caplog.at_level(logging.WARNING, logger="attnsim.plots.fonts"):
        found = [family for family, _ in fonts.font_files()]
    assert found == ["Noto Sans CJK SC", "Noto Sans Devanagari"]
    assert "pip install fontpkg-noto-sans-arabic" in caplog.text and "Noto Sans Arabic" in caplog.text


def test_cjk_ranges_hold_the_cjk_samples_only():
    def cjk(char):
        return any(low <= ord(char) <= high for low, high in fonts.CJK_RANGES)

    assert all(cjk(char) for script in ("Chinese", "Japanese", "Korean") for char in SAMPLES[script])
    assert not any(cjk(char) for script in ("Arabic", "Cyrillic", "Greek", "Devanagari") for char in SAMPLES[script] + "plain ##s")


def test_without_the_cjk_extra_the_first_cjk_label_warns_once_naming_it(monkeypatch, caplog):
    from attnsim.plots.common import short_label

    monkeypatch.setitem(sys.modules, "noto_cjk_sans_otc", None)  # its import raises ImportError, as when not installed
    monkeypatch.setattr(fonts, "_absent", {})
    with caplog.at_level(logging.DEBUG, logger="attnsim.plots.fonts"):
        found = [family for family, _ in fonts.font_files()]
    assert found == ["Noto Sans Arabic", "Noto Sans Devanagari"]
    assert [r.levelname for r in caplog.records] == ["DEBUG"]  # left out quietly: a run without CJK text warns nothing
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnsim.plots.fonts"):
        assert [short_label(text) for text in ("plain", "देवनागरी", "##s")] == ["plain", "देवनागरी", "##s"]
        assert caplog.records == []
        assert short_label("日本語のテキストです。") == "日本語のテキストです。"
        short_label("한국어")
    assert [r.getMessage() for r in caplog.records] == [
        "Figures draw '日' (U+65E5) and the rest of its script as boxes: its font, Noto Sans CJK SC, is the extra attnsim[cjk]. Run: pip install 'attnsim[cjk]'"
    ]


@pytest.mark.e2e
def test_attention_maps_run_on_chinese_text_has_no_glyph_warning(tiny_bert, tmp_path, tracking_uri):
    from attnsim.workflows.run import run
    from tests.helpers.runs import runs_of

    text = tmp_path / "zh.txt"
    text.write_text("自然语言处理是人工智能的一个重要领域，研究人与计算机之间用自然语言进行有效通信的各种理论和方法。\n", encoding="utf-8")
    results = []
    missing = _glyph_warnings(
        lambda: results.append(
            run(
                "attention_maps",
                [
                    f"model.path={tiny_bert}",
                    "corpus=text",
                    f"corpus.path={text}",
                    "corpus.limit=4",
                    "corpus.seq_len=32",
                    "trainer.progress_bar=false",
                    "plots.examples=1",
                ],
            )
        )
    )
    assert missing == []
    client, runs = runs_of(tracking_uri)
    (logged,) = runs
    assert logged.info.run_id == results[0].run_id and logged.info.status == "FINISHED"
    assert any(a.path.endswith(".png") for a in client.list_artifacts(logged.info.run_id, "figures/attention_maps"))
