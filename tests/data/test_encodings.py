"""Text and JSON Lines files that are not UTF-8."""

from __future__ import annotations

import codecs
import json
import logging

import pytest

from attnsim.config import load_config
from attnsim.data.sources import read_documents
from attnsim.errors import ConfigError, CorpusError

WESTERN = "It\u2019s \u201cdone\u201d \u2013 the caf\u00e9 charged \u20ac5 for a cr\u00e8me br\u00fbl\u00e9e.\nNa\u00efve, but fine."
LATIN = "Se\u00f1or M\u00fcller ate a cr\u00e8me br\u00fbl\u00e9e in the caf\u00e9 na\u00efvely.\n"
JAPANESE = "\u3053\u308c\u306f\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002\u4eca\u65e5\u306f\u3044\u3044\u5929\u6c17\u3067\u3059\u306d\u3002\n"


def read_one(path, encoding=None) -> str:
    docs = read_documents("text", str(path), encoding=encoding)
    assert len(docs) == 1
    return docs[0].text


@pytest.mark.parametrize(
    "name, data, expected",
    [
        ("cp1252", WESTERN.encode("cp1252"), WESTERN),
        ("latin1", LATIN.encode("latin-1"), LATIN),
        ("shift_jis", JAPANESE.encode("shift_jis"), JAPANESE),
        ("utf8", WESTERN.encode("utf-8"), WESTERN),
        # a UTF-8 byte-order mark is removed, not cleaned to a space (offsets start at the text)
        ("utf8bom", codecs.BOM_UTF8 + WESTERN.encode("utf-8"), WESTERN),
        ("utf16le_bom", WESTERN.encode("utf-16"), WESTERN),
        ("utf16be_bom", codecs.BOM_UTF16_BE + WESTERN.encode("utf-16-be"), WESTERN),
        ("utf32_bom", WESTERN.encode("utf-32"), WESTERN),
        # BOM-less UTF-16 holds NUL bytes but is text
        ("utf16le", WESTERN.encode("utf-16-le"), WESTERN),
    ],
)
def test_detected_encodings_keep_every_character(tmp_path, name, data, expected):
    path = tmp_path / f"{name}.txt"
    path.write_bytes(data)
    assert read_one(path) == expected


def test_detected_encoding_is_logged_as_a_guess(tmp_path, caplog):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.txt").write_bytes(WESTERN.encode("cp1252"))
    (folder / "b.txt").write_bytes(LATIN.encode("utf-8"))
    with caplog.at_level(logging.WARNING):
        docs = read_documents("text", str(folder))
    assert [d.text for d in docs] == [WESTERN, LATIN]
    assert "1 file(s) of the .txt files under" in caplog.text and "a.txt (cp1252)" in caplog.text


def test_given_encoding_is_used(tmp_path, caplog):
    path = tmp_path / "w.txt"
    path.write_bytes(WESTERN.encode("cp1252"))
    assert read_one(path, "cp1252") == WESTERN
    # Latin-1 for a Windows-1252 file decodes (every byte is Latin-1) but warns about the C1 controls it yields
    with caplog.at_level(logging.WARNING):
        text = read_one(path, "latin-1")
    assert text == WESTERN.encode("cp1252").decode("latin-1").translate({c: " " for c in range(0x80, 0xA0)})
    assert "C1 control characters" in caplog.text and "w.txt (iso8859-1: 5)" in caplog.text
    # a UTF-16 file without a byte-order mark, read with the codec named
    path16 = tmp_path / "u.txt"
    path16.write_bytes(LATIN.encode("utf-16-be"))
    assert read_one(path16, "utf-16-be") == LATIN


def test_undecodable_file_names_file_and_encoding(tmp_path):
    path = tmp_path / "w.txt"
    path.write_bytes(WESTERN.encode("cp1252"))
    with pytest.raises(CorpusError, match=r"Corpus file '.*w\.txt' cannot be read as utf-8 \(corpus.encoding\): byte 2 \(92 73 20 93\) invalid start byte"):
        read_one(path, "utf-8")
    bad16 = tmp_path / "odd.txt"
    bad16.write_bytes(codecs.BOM_UTF16_LE + "ab".encode("utf-16-le") + b"c")  # odd length
    with pytest.raises(CorpusError, match=r"'.*odd\.txt' cannot be read as utf-16 \(the file starts with a UTF-16 byte-order mark\)"):
        read_one(bad16)
    with pytest.raises(CorpusError, match="corpus.encoding='klingon' is not a text encoding"):
        read_one(path, "klingon")
    with pytest.raises(CorpusError, match="corpus.encoding='base64' is not a text encoding"):
        read_one(path, "base64")


def test_binary_and_stray_nul_kept_apart(tmp_path):
    blob = tmp_path / "blob.txt"
    blob.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(CorpusError, match="holds binary data"):
        read_one(blob)
    with pytest.raises(CorpusError, match="holds binary data"):
        read_one(blob, "latin-1")  # decodes, but into NUL characters
    nul = tmp_path / "nul.txt"
    nul.write_bytes("caf\u00e9\x00 ok".encode("utf-8"))
    assert read_one(nul) == "caf\u00e9  ok"  # a UTF-8 text with a stray NUL is text, cleaned


def test_jsonl_in_other_encodings(tmp_path):
    records = [{"text": WESTERN, "label": "caf\u00e9"}, {"text": LATIN}]
    body = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\r\n"
    for encoding, data in (("cp1252", body.encode("cp1252")), ("utf-16", body.encode("utf-16")), ("utf-8-sig", codecs.BOM_UTF8 + body.encode("utf-8"))):
        path = tmp_path / f"{encoding}.jsonl"
        path.write_bytes(data)
        docs = read_documents("jsonl", str(path))
        assert [(d.text, d.label) for d in docs] == [(WESTERN, "caf\u00e9"), (LATIN, None)], encoding
        assert [d.doc_id for d in docs] == [f"{encoding}.jsonl:1", f"{encoding}.jsonl:2"]
    path = tmp_path / "given.jsonl"
    path.write_bytes(body.encode("cp1252"))
    with pytest.raises(CorpusError, match=r"'.*given\.jsonl' cannot be read as utf-8"):
        read_documents("jsonl", str(path), encoding="utf-8")


def test_config_key_is_checked_before_anything_loads(tmp_path):
    cfg = load_config("csm", ["corpus=text", f"corpus.path={tmp_path}", "corpus.encoding=cp1252"])
    assert cfg.corpus.encoding == "cp1252"
    assert load_config("csm", ["corpus=text", f"corpus.path={tmp_path}"]).corpus.encoding is None
    with pytest.raises(ConfigError, match="Config key 'corpus.encoding' is 'utf-9', not a text encoding"):
        load_config("csm", ["corpus=text", f"corpus.path={tmp_path}", "corpus.encoding=utf-9"])
    with pytest.raises(ConfigError, match="Config key 'corpus.encoding' is 'rot13', not a text encoding"):
        load_config("csm", ["corpus=text", f"corpus.path={tmp_path}", "corpus.encoding=rot13"])
    assert load_config("csm", ["corpus=jsonl", f"corpus.path={tmp_path}", "corpus.encoding=utf-16"]).corpus.encoding == "utf-16"
    with pytest.raises(ConfigError, match="Config key 'corpus.encoding' is set but corpus.source=bbc"):
        load_config("csm", ["corpus.encoding=cp1252"])
