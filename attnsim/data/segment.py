"""Sentence segmentation with sentencex (Wikimedia's maintained multilingual segmenter)."""

from __future__ import annotations

from typing import List, Tuple

import sentencex


def sentence_spans(text: str, language: str = "en") -> List[Tuple[int, int]]:
    """Character spans ``[start, end)`` of the sentences of ``text``, in order.

    Whitespace-only segments (paragraph breaks) are dropped; leading and
    trailing whitespace is trimmed from each span. Spans never overlap.
    """
    spans: List[Tuple[int, int]] = []
    for part in sentencex.get_sentence_boundaries(language, text):
        start, end = int(part["start_index"]), int(part["end_index"])
        segment = text[start:end]
        stripped = segment.strip()
        if not stripped:
            continue
        start += len(segment) - len(segment.lstrip())
        end = start + len(stripped)
        if spans and start < spans[-1][1]:
            start = spans[-1][1]
        if start < end:
            spans.append((start, end))
    return spans
