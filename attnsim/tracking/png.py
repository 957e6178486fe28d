"""PNG encoding of figure artifacts: no figure a run logs is larger than :data:`PNG_LIMIT`.

Tracking owns this (it is how artifacts are stored, not how figures are drawn): the run sink
(:meth:`attnsim.tracking.sink.RunSink.log_figure`) encodes every figure's pixels here.
"""

from __future__ import annotations

import math
import zlib

import numpy as np

PNG_LIMIT = 400_000  # bytes: no figure artifact is larger
LOSSLESS_SKIP = 1.5  # lossless encoding is not tried when its estimated size is over this times the limit


def figure_pixels(figure, dpi: int = 100, fixed_layout: bool = False) -> np.ndarray:
    """Draw a matplotlib figure and return its pixels; the figure is left open.

    A figure laid out by hand (``fixed_layout``: its axes placed in inches) is drawn once on an Agg
    canvas; any other figure is saved with ``bbox_inches="tight"``, which draws it twice (once to
    measure it).

    Args:
        figure: a matplotlib ``Figure``.
        dpi: dots per inch of the drawing.
        fixed_layout: whether the figure was laid out by hand
            (:func:`attnsim.plots.common.has_fixed_layout`; the caller says, so that tracking never
            imports the plots).

    Returns:
        (H, W, 4) uint8 RGBA pixels, a copy that outlives the figure.
    """
    if fixed_layout:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        figure.set_dpi(dpi)
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        return np.array(canvas.buffer_rgba())
    import io

    from PIL import Image

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", pil_kwargs={"compress_level": 0})
    return np.asarray(Image.open(buffer).convert("RGBA"))


def png_bytes(pixels: np.ndarray, dpi: int, limit: int = PNG_LIMIT) -> bytes:
    """A drawn figure's pixels as PNG file bytes, at most ``limit`` bytes.

    The figure is opaque (white background), so the alpha channel is dropped. Then the first of
    these that fits ``limit`` is returned:

    1. lossless RGB (zlib level 1: heatmaps compress little better at higher levels), skipped when
       four times the zlib size of every fourth row is over 1.5 ``limit`` (on the default figures
       the lossless file was 0.75-1.09 times that estimate, so it could not have fitted; the
       estimate takes a tenth of the encoding's time: 0.06-0.07 s saved on each large heatmap);
    2. a 256-colour palette (Pillow's fast octree quantiser, no dithering): a heatmap's pixels
       come from one colour map of 256 entries, so a channel moves by about 14/255 at most, and
       the file is about 3.5 times smaller (a 6 x 12-head example CSM figure: 1.1 MB to 300 KB);
    3. the palette image of the figure shrunk (Lanczos) by the square root of the size ratio
       (times 0.95) until it fits: never needed by the default figures.

    Args:
        pixels: (H, W, 4) or (H, W, 3) uint8, e.g. ``np.asarray(canvas.buffer_rgba())``.
        dpi: recorded in the file (pixels per inch of the drawing).
        limit: largest file size in bytes (default :data:`PNG_LIMIT`, 400 KB).

    Returns:
        The PNG file's bytes.
    """
    import io

    from PIL import Image

    image = Image.fromarray(np.ascontiguousarray(pixels[..., :3]), "RGB")

    def encode(picture, **options) -> bytes:
        buffer = io.BytesIO()
        picture.save(buffer, format="png", dpi=(dpi, dpi), **options)
        return buffer.getvalue()

    rgb = np.asarray(image)
    hopeless = rgb.nbytes > limit and 4 * len(zlib.compress(rgb[::4].tobytes(), 1)) > LOSSLESS_SKIP * limit
    data = b"" if hopeless else encode(image, compress_level=1)
    scale = 1.0
    while not data or len(data) > limit:
        shown = image if scale == 1.0 else image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.Resampling.LANCZOS)
        # max-coverage quantises a little better but takes a minute on an image of many colours
        palette = encode(shown.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE), compress_level=6)
        scale *= 0.95 * math.sqrt(limit / len(palette)) if len(palette) > limit else 1.0
        data = palette
    return data
