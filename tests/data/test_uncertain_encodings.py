"""Files whose encoding rests on too few bytes to guess: refused, naming ``corpus.encoding`` and how the likeliest
guess would read them, never measured mis-decoded; files with enough bytes are still guessed."""

from __future__ import annotations

import json
import logging

import pytest

from attnsim.cli import main
from attnsim.data.sources import MIN_GUESS_BYTES, read_documents
from attnsim.errors import CorpusError
from tests.helpers.runs import runs_of

# UTF-8 "Ř" (c5 98), then Latin-2 / cp1250 "ř" (f8): guessed as cp1252, it was measured as "Å˜eka pøed mostem"
MIXED = b"\xc5\x98eka p\xf8ed mostem"
TINY = ["corpus.seq_len=32", "tracking.figures=false", "plots.examples=0"]


def test_a_one_line_file_of_mixed_encodings_is_refused_before_any_run(tiny_bert, tmp_path, tracking_uri, monkeypatch, capsys):
    import attnsim.workflows.run as runner

    path = tmp_path / "reka.txt"
    path.write_bytes(MIXED)
    monkeypatch.setattr(runner, "build_module", lambda *a, **k: pytest.fail("model loaded for a text that cannot be decoded"))
    assert main(["run", "csm", f"model.path={tiny_bert}", *TINY, "corpus=text", f"corpus.path={path}"]) == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line == (
        f"error: Corpus file '{path}' is not UTF-8, and too little of it tells its encoding: only 1 byte(s) break UTF-8 "
        "(the first, 0xf8, at byte 7), beside 1 valid UTF-8 character(s) (so it may be UTF-8 with a damaged byte), and every "
        'single-byte code page reads them as other letters. The likeliest guess, cp1252, reads "\u00c5\u02dceka p\u00f8ed mostem". '
        "Set corpus.encoding to the file's encoding: corpus.encoding=cp1252 if that reading is right, else e.g. cp1250 "
        "(Central European) or cp1251 (Cyrillic); or repair the bytes to UTF-8 (iconv -f ENCODING -t utf-8)."
    )
    assert runs_of(tracking_uri)[1] == []  # no run, not even a failed one
    # the fix the message names: the file's real encoding, here a repaired file in cp1250
    path.write_bytes("\u0158eka p\u0159ed mostem".encode("cp1250"))
    assert read_documents("text", str(path), encoding="cp1250")[0].text == "\u0158eka p\u0159ed mostem"


@pytest.mark.parametrize(
    "raw, count, first",
    [
        (b"p\xf8ed", 1, "0xf8, at byte 1"),  # cp1250 "před", cp1252 "pøed"
        ("Un caf\u00e9, s'il vous pla\u00eet.".encode("cp1252"), 2, "0xe9, at byte 6"),
        (b"a \xa315.8m signing from Parma", 1, "0xa3, at byte 2"),  # cp1252 "£", cp1250 "Ł"
        ("\u0158\u00e1d \u0161".encode("cp1250"), 3, "0xd8, at byte 0"),  # cp1250 "Řád š", cp1252 "Øád š"
    ],
)
def test_fewer_bytes_than_a_guess_needs_are_refused(tmp_path, raw, count, first):
    path = tmp_path / "short.txt"
    path.write_bytes(raw)
    with pytest.raises(CorpusError) as refused:
        read_documents("text", str(path))
    message = str(refused.value)
    assert f"too little of it tells its encoding: only {count} byte(s) break UTF-8 (the first, {first}), and every" in message
    assert "corpus.encoding=cp1252 if that reading is right" in message and "beside" not in message
    assert read_documents("text", str(path), encoding="cp1252")[0].text == raw.decode("cp1252")  # the fix it names


def test_as_many_bytes_as_a_guess_needs_are_guessed(tmp_path, caplog):
    text = "Se\u00f1or M\u00fcller, cr\u00e8me br\u00fbler."  # 4 bytes outside ASCII in cp1252
    assert MIN_GUESS_BYTES == 4 and len([b for b in text.encode("cp1252") if b > 127]) == 4
    path = tmp_path / "four.txt"
    path.write_bytes(text.encode("cp1252"))
    with caplog.at_level(logging.WARNING):
        assert read_documents("text", str(path))[0].text == text
    assert "four.txt (cp1252)" in caplog.text  # a guess, logged as one


def test_in_a_folder_or_a_jsonl_file_the_short_file_is_named(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("Plain ASCII text.", encoding="utf-8")
    (folder / "b.txt").write_bytes(MIXED)
    with pytest.raises(CorpusError, match=r"Corpus file '.*docs/b\.txt' is not UTF-8, and too little of it tells its encoding"):
        read_documents("text", str(folder))
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_bytes(json.dumps({"text": "plain"}).encode() + b"\n" + b'{"text": "p\xf8ed mostem"}\n')
    with pytest.raises(CorpusError, match=r"'.*docs\.jsonl' is not UTF-8, and too little .*corpus.encoding"):
        read_documents("jsonl", str(jsonl))
    assert read_documents("jsonl", str(jsonl), encoding="cp1250")[1].text == "p\u0159ed mostem"


def test_the_bundled_corpus_reads_its_one_windows_1252_article():
    (article,) = [d for d in read_documents("bbc", categories=["sports"]) if d.doc_id == "bbc/sports/199"]
    assert "a \u00a315.8m signing from Parma" in article.text
