"""Figures a reader can read: heads.png with layer and head tick labels, a value colour bar per panel
and text of at least 9 points; token labels of at least 8 points that do not overlap; no PNG over
400 KB, the 6 x 12-head example figures included."""

from __future__ import annotations

import io
import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text
from PIL import Image

import attnsim.plots  # noqa: F401 - sets the fonts
from attnsim.findings.examples import Examples
from attnsim.findings.registry import FINDINGS
from attnsim.plots.common import layer_head_heatmap, matrix_grid
from attnsim.plots.heads import scalar_mosaic
from attnsim.tracking.png import PNG_LIMIT, png_bytes


def _draw(fig, dpi: int = 100):
    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas


def _texts(fig) -> list:
    """Every visible, non-empty text of a drawn figure."""
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _panels(fig) -> list:
    """(axes, image) of each heatmap drawn with a matplotlib colour bar."""
    return [(ax, ax.images[0]) for ax in fig.axes if ax.images and ax.images[0].colorbar is not None]


def _overlap(boxes) -> bool:
    boxes = sorted(boxes, key=lambda b: (b.y0, b.x0))
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


def _scalars(finding: str, layers: int = 6, heads: int = 12) -> dict:
    generator = torch.Generator().manual_seed(0)
    return {stat: torch.rand(layers, heads, generator=generator) * (i + 1) for i, stat in enumerate(FINDINGS[finding].statistics)}


def _role(fig, gid: str) -> list:
    """Texts of ``fig`` whose gid is ``gid`` (heads.png names each text's role: ``<stat>:head`` ...)."""
    return [t for t in _texts(fig) if t.get_gid() == gid]


@pytest.mark.parametrize("finding", ["separators", "csm", "anchors"])
def test_heads_png_has_tick_labels_value_colour_bars_and_9pt_text(finding):
    scalars = _scalars(finding)
    scalars[next(iter(scalars))][2, 3] = math.nan  # an undefined head
    fig = scalar_mosaic(scalars, finding)
    try:
        canvas = _draw(fig)
        renderer = canvas.get_renderer()
        shown = [s for s in scalars if not s.endswith("_chance")]
        images = {image.get_gid(): image for image in fig.axes[0].images}
        assert set(images) == {f"{s}:{kind}" for s in shown for kind in ("panel", "bar")}  # a colour bar per statistic
        for stat in shown:
            heads, layers = _role(fig, f"{stat}:head"), _role(fig, f"{stat}:layer")
            assert [t.get_text() for t in heads] == [str(h) for h in range(12)]
            assert [t.get_text() for t in layers] == [str(layer) for layer in range(6)]
            assert [t.get_text() for t in _role(fig, f"{stat}:axis")] == ["head", "layer"] and _role(fig, f"{stat}:title")[0].get_text().startswith(stat)
            # head labels left to right under the panel's columns, layer labels top to bottom beside its rows
            panel = images[f"{stat}:panel"].get_window_extent(renderer)
            xs = [t.get_window_extent(renderer).x0 for t in heads]
            ys = [t.get_window_extent(renderer).y0 for t in layers]
            assert xs == sorted(xs) and panel.x0 <= xs[0] and xs[-1] <= panel.x1 and ys == sorted(ys, reverse=True)
            values = scalars[stat].double().numpy()
            assert images[f"{stat}:panel"].get_clim() == pytest.approx((np.nanmin(values), np.nanmax(values)))  # colours are the panel's values
            ticks = [float(t.get_text().replace("−", "-")) for t in _role(fig, f"{stat}:bar")]
            assert len(ticks) >= 3 and np.nanmin(values) <= min(ticks) and max(ticks) <= np.nanmax(values)  # labelled values
            bar = images[f"{stat}:bar"].get_window_extent(renderer)
            for value, text in zip(ticks, _role(fig, f"{stat}:bar")):  # each value label at its colour's height
                y = (text.get_window_extent(renderer).y0 + text.get_window_extent(renderer).y1) / 2
                assert y == pytest.approx(bar.y0 + (bar.y1 - bar.y0) * (value - np.nanmin(values)) / (np.nanmax(values) - np.nanmin(values)), abs=1.5)
        assert images[f"{shown[0]}:panel"].get_array().mask[2, 3]  # the undefined head is masked (drawn white)
        sizes = [t.get_fontsize() for t in _texts(fig)]
        assert min(sizes) >= 9, sorted(set(sizes))
    finally:
        plt.close(fig)


def test_a_constant_panel_says_constant_without_a_colour_bar():
    """A statistic with one value everywhere (csm/degenerate on a model without degenerate heads: all 0) is not drawn
    in a mid colour beside a made-up ±0.5 colour bar: the panel is grey and says its value."""
    scalars = {"degenerate": torch.zeros(6, 12), "mean": torch.rand(6, 12)}
    scalars["degenerate"][1, 2] = math.nan  # an undefined head stays white
    fig = scalar_mosaic(scalars, "csm")
    try:
        _draw(fig)
        images = {image.get_gid() for image in fig.axes[0].images}
        assert images == {"degenerate:panel", "mean:panel", "mean:bar"}
        assert [t.get_text() for t in _role(fig, "degenerate:constant")] == ["constant\n0"] and _role(fig, "degenerate:bar") == []
        assert len(_role(fig, "mean:bar")) >= 3 and _role(fig, "mean:constant") == []
    finally:
        plt.close(fig)


def test_heads_png_of_a_large_model_labels_every_index_without_overlap():
    scalars = {"a": torch.rand(24, 16), "b": torch.rand(24, 16)}
    fig = scalar_mosaic(scalars, "big")
    try:
        canvas = _draw(fig)
        renderer = canvas.get_renderer()
        for stat in scalars:
            for role, count in (("head", 16), ("layer", 24)):
                labels = _role(fig, f"{stat}:{role}")
                assert len(labels) == count and not _overlap([t.get_window_extent(renderer) for t in labels])
        assert min(t.get_fontsize() for t in _texts(fig)) >= 9
    finally:
        plt.close(fig)


def test_single_statistic_heatmap_text_is_9pt_with_a_named_colour_bar():
    fig = layer_head_heatmap(torch.rand(6, 12), "repetition/repetition_score", chance=torch.tensor(1.0), annotate=12)
    try:
        _draw(fig)
        ((ax, image),) = _panels(fig)
        assert image.colorbar.ax.get_ylabel() == "repetition_score"
        assert [t.get_text() for t in ax.get_xticklabels()] == [str(h) for h in range(12)]
        assert min(t.get_fontsize() for t in _texts(fig)) >= 9
    finally:
        plt.close(fig)


def _token_texts(fig, labels) -> list:
    return [t for t in _texts(fig) if t.get_text() in labels or t.get_text().endswith("…")]


def test_token_labels_are_8pt_and_do_not_overlap():
    tokens = [f"tok{i}" for i in range(128)]
    tokens[5] = "extraordinarily-long-token"
    fig = matrix_grid(np.random.default_rng(0).random((72, 128, 128)), None, "every head", 64, tokens, cols=12, panel_inches=1.3, max_labels=16)
    try:
        canvas = _draw(fig)
        texts = _token_texts(fig, set(tokens))
        assert texts and min(t.get_fontsize() for t in texts) >= 8
        assert max(len(t.get_text()) for t in texts) <= 12  # long tokens cut, ending in "…"
        rows = [t for t in texts if t.get_rotation() == 0]
        columns = [t for t in texts if t.get_rotation() == 90]
        assert len(rows) == len(columns) >= 8  # pooled cells of 2 tokens, every k-th labelled
        renderer = canvas.get_renderer()
        assert not _overlap([t.get_window_extent(renderer) for t in rows]) and not _overlap([t.get_window_extent(renderer) for t in columns])
    finally:
        plt.close(fig)


def test_token_strip_labels_are_8pt_and_do_not_overlap():
    from attnsim.plots.maps import token_strip

    tokens = [f"word{i}" for i in range(64)]
    fig = token_strip(np.random.default_rng(0).random((6, 64)), tokens, [f"layer {i}" for i in range(6)], "rollout", 64)
    try:
        canvas = _draw(fig)
        labels = fig.axes[0].get_xticklabels()
        assert len(labels) >= 32 and min(t.get_fontsize() for t in labels) >= 8
        assert not _overlap([t.get_window_extent(canvas.get_renderer()) for t in labels])
    finally:
        plt.close(fig)


def _png(fig, dpi: int = 100) -> tuple:
    """What the run's sink writes for ``fig``: (PNG bytes, drawn size in pixels)."""
    try:
        pixels = np.asarray(_draw(fig, dpi).buffer_rgba())
    finally:
        plt.close(fig)
    return png_bytes(pixels, dpi), pixels.shape[1::-1]


def _examples(layers: int = 6, heads: int = 12, length: int = 128) -> Examples:
    """One window of 128 tokens with the CSM of random head outputs (as noisy as a CSM gets) and attention."""
    generator = torch.Generator().manual_seed(0)
    z = torch.randn(layers, 1, heads, length, 32, generator=generator)
    csm = z @ z.transpose(-1, -2)
    attention = torch.softmax(torch.randn(layers, 1, heads, length, length, generator=generator), -1)
    return Examples(
        csm=csm,
        attention=attention,
        tokens=[[f"t{i}" for i in range(length)]],
        sentence_ids=(torch.arange(length) // 20)[None],
        valid=torch.ones(1, length, dtype=torch.bool),
        doc_ids=["bbc/business/351"],
        labels=["bbc/business/351 #0"],
    )


def test_the_largest_default_figures_fit_400kb_without_shrinking():
    """The every-head CSM figures of a 6 x 12 model at T = 128 were 1.0 to 1.2 MB; the attention example
    of a layer and the distance profiles stay below too."""
    from attnsim.plots import csm as csm_plots
    from attnsim.plots import maps

    examples = _examples()
    figures = [fig for _, fig in csm_plots.example_csms(examples, 64)]
    figures += [next(iter(csm_plots.mean_matrices(examples.csm[:, 0], 64)))[1]]
    figures += [next(iter(maps.example_attention(examples, 64, "attention_maps")))[1]]
    figures += [csm_plots.distance_profiles(torch.rand(6, 12, 128), torch.rand(6, 12, 128) * 3)]
    for fig in figures:
        data, drawn = _png(fig)
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "PNG" and image.size == drawn  # fits at full size (palette at most)
        assert len(data) <= PNG_LIMIT, len(data)


def test_png_bytes_lossless_when_small_palette_then_smaller_when_large():
    small = np.zeros((60, 80, 4), np.uint8)
    small[..., :3] = np.random.default_rng(0).integers(0, 255, (60, 80, 3), dtype=np.uint8)
    with Image.open(io.BytesIO(png_bytes(small, 100))) as image:
        assert image.mode == "RGB" and np.array_equal(np.asarray(image), small[..., :3])  # exact
    noise = np.random.default_rng(1).integers(0, 255, (1100, 1500, 3), dtype=np.uint8)  # incompressible
    data = png_bytes(noise, 100)
    with Image.open(io.BytesIO(data)) as image:
        assert len(data) <= PNG_LIMIT and image.mode == "P" and image.width < 1500  # palette, then shrunk to fit


def test_png_bytes_skips_only_lossless_encodings_that_cannot_fit(monkeypatch):
    """The estimate that skips the lossless try changes no file: each image gives the same bytes as when
    lossless is always tried (a noisy image far too large for it, a line figure that fits, one just over the limit, tried)."""
    from attnsim.tracking import png

    rng = np.random.default_rng(2)
    heatmap = np.repeat(np.repeat(rng.integers(0, 255, (450, 850, 3), dtype=np.uint8), 2, axis=0), 2, axis=1)
    lines = np.full((900, 1700, 3), 255, np.uint8)
    lines[::37] = 0
    lines[:, ::53] = (30, 90, 200)
    near = np.repeat(rng.integers(0, 255, (360, 400, 3), dtype=np.uint8), 2, axis=1)  # about the limit losslessly
    skipped = {}
    for name, pixels in (("heatmap", heatmap), ("lines", lines), ("near", near)):
        monkeypatch.setattr(png, "LOSSLESS_SKIP", 1.5)
        fast = png.png_bytes(pixels, 100)
        monkeypatch.setattr(png, "LOSSLESS_SKIP", float("inf"))
        assert png.png_bytes(pixels, 100) == fast, name
        with Image.open(io.BytesIO(fast)) as image:
            skipped[name] = image.mode
    assert skipped == {"heatmap": "P", "lines": "RGB", "near": "P"}


def test_the_sink_writes_figures_within_the_limit(tracking_uri, tmp_path):
    from attnsim.plots import csm as csm_plots
    from attnsim.tracking.store import Tracker

    tracker = Tracker(tracking_uri)
    with tracker.run("figures") as sink:
        for path, fig in csm_plots.example_csms(_examples(), 64):
            sink.log_figure(fig, path, 100)
        fig, ax = plt.subplots()  # a figure saved with bbox_inches="tight" goes through the same encoder
        ax.imshow(np.random.default_rng(0).random((900, 900)))
        sink.log_figure(fig, "figures/noise.png", 300)
        run_id = sink.run_id
    for path in ("figures/examples/window0_csm.png", "figures/noise.png"):
        local = tracker.client.download_artifacts(run_id, path, str(tmp_path))
        with open(local, "rb") as handle:
            assert len(handle.read()) <= PNG_LIMIT, path
