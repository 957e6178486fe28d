"""MkDocs hook: adds the generated reference pages (docs/gen_reference.py) to the site at build time.

Nothing is written into docs/: each page is a generated file of the build, made from the code it
documents, so that `mkdocs build --strict` (`make docs`) always shows the current schema, metric
keys, experiments and command line.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.structure.files import File

_spec = importlib.util.spec_from_file_location("gen_reference", Path(__file__).with_name("gen_reference.py"))
gen_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_reference)


def on_files(files, config):  # noqa: ANN001 - MkDocs' hook signature
    for page, make in gen_reference.PAGES.items():
        existing = files.get_file_from_path(page)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, page, content=make()))
    return files
