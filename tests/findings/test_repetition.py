"""Repetition statistics (identical-token pairs), worked by hand on an 8-token window."""

from __future__ import annotations
