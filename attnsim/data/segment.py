"""Sentence segmentation: sentencex (Wikimedia's maintained multilingual segmenter) plus two rules.

The rules (also stated in the README, "Windows"):

1. **Line breaks.** A line break ends a sentence when the line before it does not end in
   sentence-final punctuation -- ``. ! ? … ‽ : ;`` (and their CJK/full-width forms), possibly followed
   by closing quotes (a closing bracket does not count: ``(twice.)`` at the end of a line ends the
   sentence) -- and the next line does not start with a lowercase letter (which continues a
   hard-wrapped sentence). Titles, headlines and list items thus end their sentence. A
   paragraph break (a blank line) always ends a sentence. A line that ends in such punctuation
   (an abbreviation such as ``Dr.`` included) is left to sentencex.
2. **Numbered references.** ``Vol. 3``, ``Ch. 2``, ``Eq. 4``, ``pp. 3`` ... on one line are one sentence:
   where sentencex ends a sentence right after one of :data:`NUMBERED_ABBREVIATIONS` and the next
   sentence starts on the same line with a number (digits or a Roman numeral), the two are joined.
"""

from __future__ import annotations

import re
from typing import List, Sequence, Tuple

import sentencex

#: Abbreviations that precede a number (``Vol. 3``, ``pp. 12``); lowercase, without the final dot.
NUMBERED_ABBREVIATIONS = frozenset("vol vols no nos nr p pp ch chap sec sect art fig figs eq eqs tab pt pts para ref refs suppl op".split())

#: Characters that end a sentence at the end of a line (the line break is then left to sentencex).
SENTENCE_FINAL = frozenset(".!?…‽⁇⁈⁉:;。！？．｡︒﹒：；")
#: Closing quotes that may follow the final punctuation (``He said "Yes."``).
CLOSERS = frozenset("\"'”’»›」』")

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ABBREVIATION_END = re.compile(r"(?<![\w.])([^\W\d_]+)\.$")
_NUMBER_START = re.compile(r"(?:\d|[IVXLC]+\b)")


def _line_ends_sentence(line: str) -> bool:
    """Whether ``line`` (stripped) ends in sentence-final punctuation, closing quotes allowed after it."""
    end = len(line)
    while end and line[end - 1] in CLOSERS:
        end -= 1
    return end > 0 and line[end - 1] in SENTENCE_FINAL


def line_boundaries(text: str) -> List[int]:
    """Character positions of the line breaks of ``text`` that end a sentence (rule 1 of the module docstring).

    Returns:
        Sorted indices of line-break characters (``\\n``, or ``\\r`` of ``\\r\\n``/``\\r``) in ``text``.
    """
    cuts: List[int] = []
    line_start = 0
    matches = list(_LINE_BREAK.finditer(text))
    for i, match in enumerate(matches):
        line = text[line_start : match.start()].strip()
        next_end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        following = text[match.end() : next_end].strip()
        line_start = match.end()
        if not line:
            continue  # a blank line: the break before it (if any) was already counted
        if not following:
            cuts.append(match.start())  # paragraph break (or the end of the text)
        elif not _line_ends_sentence(line) and not following[0].islower():
            cuts.append(match.start())
    return cuts


def _trimmed(text: str, start: int, end: int) -> Tuple[int, int]:
    segment = text[start:end]
    stripped = segment.strip()
    if not stripped:
        return start, start
    start += len(segment) - len(segment.lstrip())
    return start, start + len(stripped)


def _join_numbered_references(text: str, spans: Sequence[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Join a span ending in a numbered-reference abbreviation with the next when that starts with a number on the same line."""
    joined: List[Tuple[int, int]] = []
    for start, end in spans:
        if joined:
            prev_start, prev_end = joined[-1]
            gap = text[prev_end:start]
            if text[prev_end - 1] == "." and "\n" not in gap and "\r" not in gap and _NUMBER_START.match(text, start):
                word = _ABBREVIATION_END.search(text[max(prev_start, prev_end - 8) : prev_end])
                if word and word.group(1).lower() in NUMBERED_ABBREVIATIONS:
                    joined[-1] = (prev_start, end)
                    continue
        joined.append((start, end))
    return joined


def sentence_spans(text: str, language: str = "en") -> List[Tuple[int, int]]:
    """Character spans ``[start, end)`` of the sentences of ``text``, in order.

    sentencex's boundaries (``language``: an ISO 639 code sentencex knows; others fall back to its
    generic rules), with numbered references joined and line-break boundaries added (module
    docstring). Whitespace-only segments are dropped; leading and trailing whitespace is trimmed
    from each span. Spans never overlap.
    """
    raw: List[Tuple[int, int]] = []
    for part in sentencex.get_sentence_boundaries(language, text):
        start, end = _trimmed(text, int(part["start_index"]), int(part["end_index"]))
        if raw and start < raw[-1][1]:
            start = raw[-1][1]
        if start < end:
            raw.append((start, end))
    cuts = line_boundaries(text)
    spans: List[Tuple[int, int]] = []
    c = 0
    for start, end in _join_numbered_references(text, raw):
        while c < len(cuts) and cuts[c] <= start:
            c += 1
        while c < len(cuts) and cuts[c] < end:
            piece = _trimmed(text, start, cuts[c])
            if piece[0] < piece[1]:
                spans.append(piece)
            start = cuts[c]
            c += 1
        piece = _trimmed(text, start, end)
        if piece[0] < piece[1]:
            spans.append(piece)
    return spans
