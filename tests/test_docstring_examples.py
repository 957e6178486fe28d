"""Every example in a docstring of attnsim runs, as a doctest, and prints what it says.

Examples are written as doctests (``>>>``) so that they cannot rot; the runs they make go to a
temporary tracking store in a temporary folder (``MLFLOW_TRACKING_URI``), on a few short windows.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import attnsim


def modules_with_examples():
    """Names of attnsim's modules whose source holds a doctest prompt in a docstring."""
    found = []
    for info in pkgutil.walk_packages(attnsim.__path__, "attnsim."):
        spec = importlib.util.find_spec(info.name)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        with open(spec.origin, encoding="utf-8") as handle:
            source = handle.read()
        if "        >>> " in source or "    >>> " in source:
            found.append(info.name)
    return found


def test_no_example_is_left_unrun():
    """The old ``Example::`` literal blocks are gone: every example is a doctest."""
    for info in pkgutil.walk_packages(attnsim.__path__, "attnsim."):
        spec = importlib.util.find_spec(info.name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            with open(spec.origin, encoding="utf-8") as handle:
                assert "Example::" not in handle.read(), f"{info.name}: write the example as a doctest (>>>)"


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} doctest examples failed (output above)"
