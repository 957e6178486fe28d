"""Matplotlib figures drawn from summaries (Agg backend; no display needed)."""

import matplotlib

matplotlib.use("Agg")
