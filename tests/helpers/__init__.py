"""Helpers the tests import: tiny models, reference recomputations, hand-built views, run helpers, a browser.

Fixtures live in ``tests/conftest.py``; everything a test imports lives here.
"""
