"""Sentence boundaries at line breaks and numbered references."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from attnsim.data.segment import line_boundaries, sentence_spans
from attnsim.data.sources import Document
from attnsim.data.windows import build_corpus
from tests.helpers.models import BUNDLED


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(BUNDLED)


def sentences(text: str) -> list:
    return [text[s:e] for s, e in sentence_spans(text)]


def test_headline_without_punctuation_ends_at_line_break():
    text = "Markets rally\nShares in London rose sharply on Monday."
    assert sentence_spans(text) == [(0, 13), (14, 54)]
    assert line_boundaries(text) == [13]


@pytest.mark.parametrize(
    "text, expected",
    [
        # titles, list items, a comma at the end of a line, Windows and old-Mac line ends
        ("Weather\nRain later. Sun tomorrow.", ["Weather", "Rain later.", "Sun tomorrow."]),
        ("Shopping list\nMilk\nEggs\nBread", ["Shopping list", "Milk", "Eggs", "Bread"]),
        ("Dear Anna,\nThanks for the book.", ["Dear Anna,", "Thanks for the book."]),
        ("Results 2024\r\nProfits rose.\rCosts fell", ["Results 2024", "Profits rose.", "Costs fell"]),
        # a paragraph break always ends a sentence, whatever ends the line
        ("He said:\n\nthe end came.", ["He said:", "the end came."]),
        ("Part one\n\n\n  part two", ["Part one", "part two"]),
        # sentence-final punctuation (closing quotes after it) leaves the break to sentencex
        ("He said:\nthe end came.", ["He said:\nthe end came."]),
        ("Wait\u2026\nNobody came.", ["Wait\u2026\nNobody came."]),
        ("He said \u201cNo.\u201d\nNobody answered", ["He said \u201cNo.\u201d", "Nobody answered"]),
        # a closing bracket is not sentence-final punctuation: the line break ends the sentence
        ("She asked (twice.)\nNobody answered", ["She asked (twice.)", "Nobody answered"]),
        # a lowercase next line continues a hard-wrapped sentence
        ("The quick brown fox\njumps over the lazy dog.", ["The quick brown fox\njumps over the lazy dog."]),
        # an abbreviation ending a line: sentencex's decision, as before
        ("Dr.\nSmith came.", ["Dr.\nSmith came."]),
        ("See Vol.\n3 for details.", ["See Vol.", "3 for details."]),
    ],
)
def test_line_break_rule(text, expected):
    assert sentences(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("See Vol. 3 for details. Next one.", ["See Vol. 3 for details.", "Next one."]),
        ("Read vol. 3, pp. 4-5. Then ch. 2 and Eq. 7.", ["Read vol. 3, pp. 4-5.", "Then ch. 2 and Eq. 7."]),
        ("See Vol. II for details.", ["See Vol. II for details."]),
        ("It is in Tab. 4 and Suppl. 2. Done.", ["It is in Tab. 4 and Suppl. 2.", "Done."]),
        # not a numbered reference: the boundary stays
        ("He played modern jazz. 3 people left.", ["He played modern jazz.", "3 people left."]),
    ],
)
def test_numbered_references_do_not_split(text, expected):
    assert sentences(text) == expected


def test_sentence_ids_of_tokens_follow_line_breaks(tokenizer):
    text = "Markets rally\nShares in London rose sharply on Monday.\nSee Vol. 3 now."
    corpus = build_corpus([Document("d", text)], tokenizer, seq_len=32, min_tokens=2, shuffle=False)
    w = corpus.windows[0]
    n = int(w.attention_mask.sum())
    tokens = tokenizer.convert_ids_to_tokens(w.input_ids[:n].tolist())
    assert tokens == [
        "[CLS]",
        "markets",
        "rally",
        "shares",
        "in",
        "london",
        "rose",
        "sharply",
        "on",
        "monday",
        ".",
        "see",
        "vol",
        ".",
        "3",
        "now",
        ".",
        "[SEP]",
    ]
    assert w.sentence_ids[:n].tolist() == [-1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, -1]
