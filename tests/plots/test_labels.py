"""Token labels of figures and the explorer come from the original text."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from transformers import AutoTokenizer

from attnsim.data.module import collate_windows
from attnsim.data.sources import Document
from attnsim.data.windows import batch_labels, build_corpus, text_span, token_labels
from tests.helpers.models import BUNDLED

TEXT = "A, naïve café 😃😃 Mask test."
# the bundled tokenizer (uncased) reads: [CLS] a , naive cafe [UNK] mask test . [SEP]
LABELS = ["[CLS]", "A", ",", "naïve", "café", "😃😃", "Mask", "test", ".", "[SEP]"]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(BUNDLED)


def test_labels_are_the_original_text(tokenizer):
    corpus = build_corpus([Document("d", TEXT)], tokenizer, seq_len=16, min_tokens=2, shuffle=False)
    w = corpus.windows[0]
    assert tokenizer.convert_ids_to_tokens(w.input_ids[:10].tolist()) == ["[CLS]", "a", ",", "naive", "cafe", "[UNK]", "mask", "test", ".", "[SEP]"]
    assert w.text == TEXT and text_span(w.offsets, w.special_mask) == (0, len(TEXT))
    # padding keeps the tokenizer's token
    assert token_labels(tokenizer, w.input_ids, w.offsets, w.special_mask, w.text) == LABELS + ["[PAD]"] * 6
    batch = collate_windows([(0, w), (1, w)])
    assert batch["texts"] == [TEXT, TEXT]
    assert batch_labels(tokenizer, batch, 1, 10) == LABELS
    # no text kept: the tokenizer's tokens, as before
    assert token_labels(tokenizer, w.input_ids[:4], w.offsets[:4], w.special_mask[:4], None) == ["[CLS]", "a", ",", "naive"]


def test_only_drawn_windows_keep_text_and_it_is_their_slice(tokenizer):
    body = " ".join(f"Étape {i}: Zoë’s café № {i}." for i in range(12))
    doc = Document("d", "  " + body)
    kept = build_corpus([doc], tokenizer, seq_len=24, min_tokens=2, shuffle=False, keep_text=2)
    assert len(kept) > 3
    assert [w.text is not None for w in kept.windows] == [True, True] + [False] * (len(kept) - 2)
    for w in kept.windows[:2]:
        start, end = text_span(w.offsets, w.special_mask)
        assert w.text == doc.text[start:end] and not w.text[0].isspace()
        labels = token_labels(tokenizer, w.input_ids, w.offsets, w.special_mask, w.text)
        n = int(w.attention_mask.sum())
        expected = [doc.text[s:e] for s, e in w.offsets[1 : n - 1].tolist()]
        assert labels[1 : n - 1] == expected and labels[0] == "[CLS]" and labels[n - 1] == "[SEP]"
    # the second window starts inside the document: offsets are read relative to its text
    second = token_labels(tokenizer, kept.windows[1].input_ids, kept.windows[1].offsets, kept.windows[1].special_mask, kept.windows[1].text)
    assert "Étape" in second or "Zoë" in second
    # windows beyond keep_text label with tokens; the default keeps every window's text
    third = collate_windows([(2, kept.windows[2])])
    assert batch_labels(tokenizer, third, 0, 3) == tokenizer.convert_ids_to_tokens(kept.windows[2].input_ids[:3].tolist())
    every = build_corpus([doc], tokenizer, seq_len=24, min_tokens=2, shuffle=False)
    assert all(w.text is not None for w in every.windows)
    assert [w.input_ids.tolist() for w in every.windows] == [w.input_ids.tolist() for w in kept.windows]


def test_whitespace_or_empty_spans_fall_back_to_tokens(tokenizer):
    ids = np.array(tokenizer.convert_tokens_to_ids(["[CLS]", "a", "b", "c", "[SEP]"]))
    offsets = np.array([[0, 0], [10, 11], [11, 13], [13, 13], [0, 0]])
    special = np.array([True, False, False, False, True])
    # the text starts at the first token's start (10): "x" then a whitespace-only span, then an empty one
    assert token_labels(tokenizer, ids, offsets, special, "x \n") == ["[CLS]", "x", "b", "c", "[SEP]"]


def test_run_figures_and_explorer_carry_original_labels(tiny_bert, tmp_path):
    """One tiny rollout run: the recorded examples, the rollout example, its flow table and figure, and explorer.html."""
    import matplotlib

    matplotlib.use("Agg")
    from mlflow import MlflowClient

    from attnsim.workflows.run import run

    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "a.txt").write_text(TEXT, encoding="utf-8")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = run(
        "rollout",
        [
            f"model.path={tiny_bert}",
            "corpus=text",
            f"corpus.path={texts}",
            "corpus.seq_len=16",
            "corpus.min_tokens=2",
            "plots.examples=1",
            "trainer.progress_bar=false",
            f"tracking.uri={uri}",
        ],
    )
    summary = result.summaries["rollout"]
    example = summary.examples[0]
    assert example["labels"] == LABELS
    client = MlflowClient(uri)
    table = client.download_artifacts(result.run_id, "tables/rollout_flow_window0.csv", str(tmp_path))
    import pandas as pd

    assert pd.read_csv(table)["token"].tolist() == LABELS
    page = open(client.download_artifacts(result.run_id, "explorer.html", str(tmp_path)), encoding="utf-8").read()
    data = json.loads(re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', page, re.S).group(1))
    # repeated labels stay apart by their position
    assert data["examples"][0]["labels"] == [f"{label} [{i}]" for i, label in enumerate(LABELS)]
    # the example's readout strip (as the run draws it from these labels) names its tokens by the original text
    from attnsim.plots import maps as plots

    figure = plots.token_strip(example["readout"], example["labels"], ["after layer 0", "after layer 1"], "t", 64, unit="share")
    drawn = {t.get_text() for ax in figure.axes for t in ax.get_xticklabels() + ax.texts}
    assert {"naïve", "café", "😃😃"} <= drawn


def test_a_run_keeps_text_only_in_its_drawn_windows(tiny_bert, tmp_path):
    from attnsim.config import load_config
    from attnsim.workflows.run import prepare

    texts = tmp_path / "texts"
    texts.mkdir()
    (texts / "a.txt").write_text(" ".join(f"Line {i} of the café story." for i in range(30)), encoding="utf-8")
    cfg = load_config(
        "csm",
        [
            f"model.path={tiny_bert}",
            "corpus=text",
            f"corpus.path={texts}",
            "corpus.seq_len=16",
            "corpus.limit=5",
            "plots.examples=2",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        ],
    )
    windows = prepare(cfg).corpus.windows
    assert len(windows) == 5
    assert [w.text is not None for w in windows] == [True, True, False, False, False]


# -- byte-level BPE and SentencePiece tokenizers ----------------------------------
MULTI = "The naïve café 😃 日本 x"


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def trained(request):
    from tests.helpers.tiny_models import train_tokenizer

    return request.param, train_tokenizer(request.param)


def test_byte_level_and_sentencepiece_labels_are_the_text(trained):
    family, tok = trained
    corpus = build_corpus([Document("d", MULTI)], tok, seq_len=40, min_tokens=2, shuffle=False)
    w = corpus.windows[0]
    n = int(w.attention_mask.sum())
    raw = tok.convert_ids_to_tokens(w.input_ids[:n].tolist())
    # the raw tokens are unreadable: GPT-2's byte symbols (Ã¯ for ï) or SentencePiece byte pieces
    assert ("Ã" in raw and "Ġ" in raw) if family == "gpt2" else ("<0xC3>" in raw and "▁" in raw)
    labels = token_labels(tok, w.input_ids, w.offsets, w.special_mask, w.text)[:n]
    bos = ["<s>"] if family == "llama" else []
    # every byte piece of a multi-byte character shows that character; a lone space is ␣
    expected = bos + [
        "T",
        "he",
        "n",
        "a",
        "ï",
        "ï",
        "ve",
        "c",
        "a",
        "f",
        "é",
        "é",
        "␣",
        "😃",
        "😃",
        "😃",
        "😃",
        "␣",
        "日",
        "日",
        "日",
        "本",
        "本",
        "本",
        "␣",
        "x",
    ]
    if family == "llama":
        expected[1:3] = ["The"]
    assert labels == expected
    # without the text (a window that kept none), the tokens decoded give the same labels
    assert token_labels(tok, w.input_ids[:n], w.offsets[:n], w.special_mask[:n], None) == expected
    batch = collate_windows([(0, w)])
    assert batch_labels(tok, batch, 0, n) == expected
    assert not any(ch in label for label in labels for ch in "ÃĠ▁") and not any("<0x" in label for label in labels)


def test_readable_tokens_mark_bytes_that_form_no_character(trained):
    from attnsim.data.windows import readable_tokens

    _, tok = trained
    ids = tok("é", add_special_tokens=False)["input_ids"]
    pieces = [i for i in ids if tok.convert_ids_to_tokens(i) not in ("▁", "Ġ")]
    assert len(pieces) == 2  # 0xC3 0xA9, each a token of its own in these small vocabularies
    assert readable_tokens(tok, pieces) == ["é", "é"]
    assert readable_tokens(tok, pieces[:1]) == ["<0xC3>"]  # half a character: its byte, never Ã
    assert readable_tokens(tok, pieces[::-1]) == ["<0xA9>", "<0xC3>"]
    assert readable_tokens(tok, [tok.bos_token_id]) == ["<s>"]
    assert readable_tokens(None, [5, 7]) == ["5", "7"]


def test_wordpiece_labels_unchanged_and_whitespace_tokens_visible(tokenizer):
    from attnsim.data.windows import readable_tokens, visible_whitespace

    ids = tokenizer.convert_tokens_to_ids(["[CLS]", "play", "##ing", "[UNK]", "[SEP]"])
    assert readable_tokens(tokenizer, ids) == ["[CLS]", "play", "##ing", "[UNK]", "[SEP]"]
    assert visible_whitespace(" \n\t") == "␣↵⇥"
