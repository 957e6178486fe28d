"""Bundled config groups: ``model/``, ``corpus/``, ``trainer/``, ``tracking/``, one YAML per option.

In the source tree this is the top-level ``configs/`` folder; installed (wheel or
editable), it is the package ``attnsim.configs`` (``[tool.setuptools] package-dir``
in ``pyproject.toml``), read through :mod:`importlib.resources`.
"""
