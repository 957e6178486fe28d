"""Where ``corpus.path`` points, checked without reading the corpus or importing torch.

:func:`locate_corpus` refuses a path that can hold no corpus of its source (missing, a folder where one
file is needed, a folder without a file the source reads, an empty file) before anything heavy is
imported: the command line calls it before torch, Lightning, transformers and MLflow load
(:mod:`attnsim.workflows.preflight`), and the readers (:func:`attnsim.data.sources.read_documents`,
:func:`attnsim.data.images.file_images`, :func:`attnsim.data.translation.read_pairs`) call it too, so
both give the same message. Standard library only.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from attnsim.errors import CorpusError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
"""File suffixes ``corpus.source=images`` reads from a folder (any case)."""

_ONE_FILE = {
    "jsonl": "one .jsonl file",
    "translation": "one JSON Lines file with 'source' and 'target' fields on each line",
}
_WHAT = {
    "text": "an existing file or directory",
    "jsonl": "a JSON Lines file (one object with a text field per line)",
    "images": "an image file or a directory of images, or leave it empty for scikit-image's sample photographs",
    "translation": 'a JSON Lines file of sentence pairs (one {"source": ..., "target": ...} object per line), or null for the bundled example',
}


def text_files(folder: Path) -> List[Path]:
    """Every ``*.txt`` file under ``folder`` (recursively), sorted: the documents of ``corpus.source=text``."""
    return sorted(p for p in folder.rglob("*.txt") if p.is_file())


def image_files(folder: Path) -> List[Path]:
    """Every image file under ``folder`` (recursively; suffixes :data:`IMAGE_EXTENSIONS`), sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)


def locate_corpus(source: str, path: Optional[str]) -> Optional[Path]:
    """The checked path of a corpus source that reads files; None for one that reads none (``bbc``,
    ``repeated_tokens``, and ``images``/``translation`` without a path: their bundled samples).

    Args:
        source: ``corpus.source`` (``bbc``, ``text``, ``jsonl``, ``images``, ``repeated_tokens``, ``translation``).
        path: ``corpus.path``.

    Raises:
        CorpusError: ``text``/``jsonl`` without a path; the path does not exist; a directory for a source that
            reads one file (``jsonl``, ``translation``); a directory without a ``.txt`` file (``text``) or an image
            (``images``); an empty (0-byte) file. Each message names the path and what to give instead.
    """
    if source in ("bbc", "repeated_tokens"):
        return None
    if not path:
        if source in ("images", "translation"):
            return None
        raise CorpusError(f"corpus.source={source} needs corpus.path (a file or directory).")
    p = Path(path).expanduser()
    if not p.exists():
        what = _WHAT.get(source, "an existing file or directory")
        raise CorpusError(f"Corpus path '{path}' does not exist. Set corpus.path to {what}.")
    if p.is_dir():
        if source in _ONE_FILE:
            raise CorpusError(f"Corpus path '{path}' is a directory; corpus.source={source} needs {_ONE_FILE[source]}.")
        if source == "text" and not text_files(p):
            raise CorpusError(f"Directory {p} holds no .txt files. Put one document per .txt file there, or point corpus.path at a text file.")
        if source == "images" and not image_files(p):
            raise CorpusError(f"Directory {p} holds no images ({', '.join(IMAGE_EXTENSIONS)}). Put image files there or point corpus.path at one image.")
    elif p.stat().st_size == 0:
        raise CorpusError(f"Corpus file '{p}' is empty (0 bytes). Point corpus.path at a file that holds the corpus.")
    return p
