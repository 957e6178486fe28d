"""Bundled experiments: one YAML per experiment, ``_base.yaml`` holding what they share.

In the source tree this is the top-level ``experiments/`` folder; installed (wheel or
editable), it is the package ``attnsim.experiments`` (``[tool.setuptools] package-dir``
in ``pyproject.toml``), read through :mod:`importlib.resources`.
"""
