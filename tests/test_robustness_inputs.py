"""Bad input found in neighbouring tools' bug reports, each refused with the problem and the fix before any run:
text fields that are not text, files that are UTF-8 but for a byte, literal special-token text, experiment names that
cut artifact URIs, overrides after options, an unquoted * in a YAML list."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from attnsim.cli import main
from attnsim.config import load_config
from attnsim.data.sources import read_documents
from attnsim.errors import ConfigError, CorpusError
from tests.helpers.models import BUNDLED
from tests.helpers.runs import runs_of


@pytest.mark.parametrize("value, kind", [(["First sentence.", "Second."], "a list"), (True, "a boolean"), ({"body": "x"}, "an object"), (3, "a number")])
def test_jsonl_text_that_is_not_text_is_refused(tmp_path, value, kind):
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"text": "A real document."}) + "\n" + json.dumps({"text": value}) + "\n")
    with pytest.raises(CorpusError, match=rf"docs.jsonl:2: field 'text' holds {kind} .*JSON string.*corpus.text_field"):
        read_documents("jsonl", str(path))


def test_jsonl_null_text_is_an_empty_document(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"text": None}) + "\n" + json.dumps({"text": "Kept."}) + "\n")
    assert [d.text for d in read_documents("jsonl", str(path))] == ["", "Kept."]


def test_utf8_but_for_one_byte_is_refused_not_read_as_a_code_page(tmp_path):
    text = "Über die Brücke gehen Müller und Jürgen. Schöne Grüße aus München. " * 3
    raw = bytearray(text.encode("utf-8"))
    raw[40] = 0xFF  # one stray byte
    path = tmp_path / "de.txt"
    path.write_bytes(bytes(raw))
    with pytest.raises(CorpusError, match=r"UTF-8 except for 1 invalid byte\(s\) \(the first, 0xff, at byte 40\).*Repair or remove.*corpus.encoding"):
        read_documents("text", str(path))
    # a short one: two valid characters around one damaged one (was guessed as cp1250)
    short = tmp_path / "short.txt"
    short.write_bytes("Grüße aus ".encode() + b"\xc3" + " München, sagt Jürgen.".encode())
    with pytest.raises(CorpusError, match=r"UTF-8 except for 1 invalid byte"):
        read_documents("text", str(short))
    # a real single-byte file is still read by its guessed code page
    latin = tmp_path / "latin.txt"
    latin.write_bytes(text.encode("cp1252"))
    assert read_documents("text", str(latin))[0].text == text


def test_literal_special_token_text_is_read_as_text(caplog):
    from transformers import AutoTokenizer

    from attnsim.data.sources import Document
    from attnsim.data.windows import build_corpus

    tokenizer = AutoTokenizer.from_pretrained(BUNDLED)
    docs = [Document("a", "The markup [SEP] and [CLS] and [PAD] stay text here. Another sentence follows it.")]
    with caplog.at_level(logging.WARNING):
        corpus = build_corpus(docs, tokenizer, 64, None, False, 2, False, 0)
    window = corpus.windows[0]
    content = np.asarray(window.input_ids)[~np.asarray(window.special_mask) & (np.asarray(window.attention_mask) == 1)]
    assert not set(content.tolist()) & set(tokenizer.all_special_ids)  # no special id inside the text
    assert "'[SEP]' in 1 document(s)" in caplog.text and "tokenized as ordinary text" in caplog.text


@pytest.mark.parametrize("name", ["news #1", "news?x", "news ", " news", "100%"])
def test_experiment_names_that_cut_artifact_uris_are_refused(name, tracking_uri):
    with pytest.raises(ConfigError, match=r"tracking.experiment.*artifact folder"):
        load_config("csm", [f"tracking.experiment={name}"])
    assert main(["run", "csm", f"tracking.experiment={name}"]) == 2
    assert runs_of(tracking_uri)[1] == []  # refused before any run


def test_overrides_after_an_option_are_overrides(tracking_uri, capsys):
    # a misspelt key after --uri reaches the config check (was argparse's "unrecognized arguments")
    assert main(["run", "csm", "--uri", tracking_uri, "corpus.limt=4"]) == 2
    assert "Unknown config key 'corpus.limt'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "csm", "--uri", tracking_uri, "--bogus"])


def test_an_unquoted_star_in_a_list_says_to_quote_it(capsys):
    assert main(["show", "paper", "stats.per_layer=[*]"]) == 2
    err = capsys.readouterr().err
    assert "YAML reads an unquoted * or & as an alias" in err and "stats.per_layer=\"['*']\"" in err
    assert main(["show", "paper", "stats.per_layer=['*']"]) == 0


def test_a_reader_that_closes_early_is_no_traceback():
    """`attnsim list | head -n 1`: when the reader of stdout closes, the command stops quietly with status 0."""
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-m", "attnsim.cli", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line is written
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0 and b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
