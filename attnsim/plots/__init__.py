"""Matplotlib figures drawn from summaries (Agg backend; no display needed).

Importing the package sets the fonts of every figure (:func:`attnsim.plots.fonts.use_fonts`):
DejaVu Sans with Noto fallbacks for CJK, Arabic and Devanagari text.
"""

import matplotlib

matplotlib.use("Agg")

from attnsim.plots.fonts import use_fonts  # noqa: E402

use_fonts()
