"""The ``translation`` corpus source: reading, errors, tokenisation with the tokenizer's own specials."""

from __future__ import annotations

import json

import pytest

from attnsim.data.translation import PairDataset, build_pairs, bundled_pairs_path, collate_pairs, read_pairs
from attnsim.errors import CorpusError
from tests.helpers.tiny_models import train_tokenizer


@pytest.fixture(scope="module")
def tokenizers():
    return {family: train_tokenizer(family) for family in ("t5", "bart")}


def _write(tmp_path, lines):
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return str(path)


def test_bundled_example_has_simple_pairs():
    pairs = read_pairs(None)
    assert bundled_pairs_path().name == "translation_en_de.jsonl"
    assert 30 <= len(pairs) <= 60
    assert pairs[0].source == "The cat sleeps on the sofa." and pairs[0].target == "Die Katze schläft auf dem Sofa."
    assert pairs[0].pair_id == "en-de-00" and pairs[0].line == 1


@pytest.mark.parametrize(
    "lines, match",
    [
        ([{"source": "a b"}], r":1 has no field 'target'"),
        ([{"source": "ok", "target": "ok"}, {"src": "a", "tgt": "b"}], r":2 has no field 'source' or 'target'"),
        ([{"source": "a", "target": ""}], r"field 'target' is empty"),
        ([{"source": 3, "target": "x"}], r"field 'source' is not a string"),
        (["not json"], r":1 is not valid JSON"),
        (["", "  "], r"holds no sentence pair"),
    ],
)
def test_bad_files_are_refused_naming_the_line(tmp_path, lines, match):
    with pytest.raises(CorpusError, match=match):
        read_pairs(_write(tmp_path, lines))


def test_missing_path_and_directory_are_refused(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        read_pairs(str(tmp_path / "nope.jsonl"))
    with pytest.raises(CorpusError, match="is a directory"):
        read_pairs(str(tmp_path))


def test_tokenised_with_the_tokenizers_own_specials_and_padded(tokenizers, tmp_path):
    pairs = read_pairs(
        _write(tmp_path, [{"source": "The minister said.", "target": "Der Minister sagte."}, {"source": "Shares fell.", "target": "Aktien fielen."}])
    )
    for family, tok in tokenizers.items():
        corpus = build_pairs(pairs, tok, seq_len=16, target_len=20)
        assert corpus.source_ids.shape == (2, 16) and corpus.target_ids.shape == (2, 20)
        expected = tok(pairs[0].source)["input_ids"]
        n = len(expected)
        assert corpus.source_ids[0, :n].tolist() == expected and corpus.source_mask[0].sum() == n
        assert (corpus.source_ids[0, n:] == tok.pad_token_id).all()
        assert corpus.target_ids[0, : corpus.target_mask[0].sum()].tolist() == tok(text_target=pairs[0].target)["input_ids"]
        eos = tok.convert_tokens_to_ids("</s>")
        assert corpus.source_ids[0, n - 1] == eos and corpus.source_special[0, n - 1]  # T5 and BART end with </s>
        if family == "bart":
            assert corpus.source_ids[0, 0] == tok.convert_tokens_to_ids("<s>") and corpus.source_special[0, 0]
        else:
            assert not corpus.source_special[0, 0]  # T5 adds no BOS
        assert corpus.source_special[0].sum() == (2 if family == "bart" else 1)
    batch = collate_pairs([PairDataset(corpus)[i] for i in range(2)])
    assert batch["input_ids"].shape == (2, 16) and batch["target_mask"].shape == (2, 20) and batch["doc_ids"] == ["pairs.jsonl:1", "pairs.jsonl:2"]


def test_too_long_lines_are_refused_with_the_lengths_needed(tokenizers, tmp_path):
    long = " ".join(["The minister said the plan would cost more."] * 3)
    pairs = read_pairs(_write(tmp_path, [{"source": "Short.", "target": "Kurz."}, {"source": long, "target": "Kurz."}]))
    need = len(tokenizers["t5"](long)["input_ids"])
    with pytest.raises(CorpusError, match=rf"line 2 \(pairs.jsonl:2\): source has {need} tokens > 16.*corpus.seq_len={need}"):
        build_pairs(pairs, tokenizers["t5"], seq_len=16)
    assert len(build_pairs(pairs, tokenizers["t5"], seq_len=16, limit=1)) == 1  # only the pairs measured are checked


def test_limit_and_seeded_shuffle(tokenizers):
    pairs = read_pairs(None)
    a = build_pairs(pairs, tokenizers["t5"], 32, limit=5, shuffle=True, seed=3)
    b = build_pairs(pairs, tokenizers["t5"], 32, limit=5, shuffle=True, seed=3)
    assert [p.pair_id for p in a.pairs] == [p.pair_id for p in b.pairs] and len(a) == 5 and a.documents_read == len(pairs)
    assert a.content_hash == b.content_hash != build_pairs(pairs, tokenizers["t5"], 32, limit=5).content_hash


def test_labels_are_the_text_under_each_token(tokenizers):
    from attnsim.data.translation import pair_labels

    pairs = read_pairs(None)[:2]
    for tok in tokenizers.values():
        corpus = build_pairs(pairs, tok, 32)
        n = int(corpus.target_mask[0].sum())
        labels = pair_labels(tok, corpus.target_ids[0, :n], corpus.target_offsets[0, :n], corpus.target_special[0, :n], pairs[0].target)
        assert labels[-1] == "</s>" and "Katze" in "".join(labels) and "Sofa" in "".join(labels)
        assert "ä" in "".join(labels) and "Ã" not in "".join(labels)  # the text's characters, never byte symbols
