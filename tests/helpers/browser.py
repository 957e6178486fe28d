"""Headless Chromium for the tests that render pages (explorer, MLflow UI): Debian's package, which
.ci/run installs; elsewhere those tests skip with the reason."""

from __future__ import annotations

import os
import shutil

import pytest

# no background traffic: this machine's network is closed, and Chromium would retry its own services
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def chromium() -> str:
    """Path of the Chromium binary; fails under CI (which must install it), skips elsewhere."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (.ci/run does: apt-get install -y chromium)")
        pytest.skip("headless Chromium is not installed here (Debian package 'chromium'); .ci/run installs it in CI")
    return found
