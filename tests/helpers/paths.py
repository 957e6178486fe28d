"""Where things are."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
