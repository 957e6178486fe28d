"""Signal and noise: shares of high-CSM pairs explained by simple rules, worked by hand."""

from __future__ import annotations
