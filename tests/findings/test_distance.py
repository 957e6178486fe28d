"""Distance statistics of high-CSM pairs, worked by hand."""

from __future__ import annotations
