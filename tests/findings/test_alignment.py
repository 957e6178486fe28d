"""End to end: `attnsim run alignment` on a tiny T5 and a tiny BART finishes with finite metrics;
the encoder–decoder path refuses mismatched models, corpora and findings before any model loads."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

import attnsim.workflows.run as runner
from attnsim.config import StatsConfig, load_config
from attnsim.errors import ConfigError
from attnsim.findings.registry import FINDINGS
from tests.helpers.runs import runs_of
from tests.helpers.tiny_models import save_tiny

LAYERS, HEADS = 2, 4
SMALL = ["corpus.limit=5", "trainer.batch_size=2", "trainer.progress_bar=false", "plots.examples=2"]


@pytest.fixture(scope="module", params=["t5", "bart"])
def tiny_seq2seq(request, tmp_path_factory):
    return request.param, save_tiny(tmp_path_factory.mktemp(request.param), request.param)


@pytest.mark.e2e
def test_alignment_run_finishes_with_finite_metrics(tiny_seq2seq, tracking_uri):
    family, path = tiny_seq2seq
    figures = family == "t5"  # figures and the explorer are drawn once (they take most of a tiny run's time)
    result = runner.run("alignment", [f"model.path={path}", *SMALL, f"tracking.figures={str(figures).lower()}"])
    client, (run,) = runs_of(tracking_uri)
    assert run.info.status == "FINISHED" and result.windows == 5
    metrics = run.data.metrics
    for stat in FINDINGS["alignment"].statistics:
        assert math.isfinite(metrics[f"alignment/{stat}"]), stat
        assert all(math.isfinite(metrics[f"alignment/{stat}/L{layer:02d}"]) for layer in range(LAYERS)), stat
    for stat in ("band_mass", "band_excess", "self_mean", "cross_mean"):  # experiments/alignment.yaml's per_head
        assert all(f"alignment/{stat}/L{layer:02d}/H{head:02d}" in metrics for layer in range(LAYERS) for head in range(HEADS))
    summary = result.summaries["alignment"]
    mass, chance = summary.scalars["band_mass"], summary.scalars["band_mass_chance"]
    assert ((mass >= 0) & (mass <= 1 + 1e-6)).all() and 0 < float(chance[0, 0]) < 1 and (chance == chance[0, 0]).all()  # chance: lengths only
    assert summary.scalars["self_mean"].shape == (LAYERS, HEADS) and not summary.scalars["self_mean"].equal(summary.scalars["cross_mean"])
    table = pd.read_csv(client.download_artifacts(run.info.run_id, "tables/alignment_heads.csv"))
    assert len(table) == LAYERS * HEADS and {"band_mass", "band_mass_chance", "self_mean", "cross_std"} <= set(table.columns)
    assert run.data.tags["attnsim.corpus"] == "translation:translation_en_de.jsonl"
    if not figures:
        return
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "figures/alignment")}
    assert {"figures/alignment/corpus_cross_attention.png", "figures/alignment/example_00_cross_attention.png", "figures/alignment/heads.png"} <= artifacts
    page = open(client.download_artifacts(run.info.run_id, "explorer_alignment.html"), encoding="utf-8").read()
    assert "en-de-00" in page and "tgt " in page and "src " in page


def test_mismatches_are_refused_before_the_model_loads(tiny_seq2seq, tiny_bert, tracking_uri, monkeypatch):
    _, path = tiny_seq2seq

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(runner, "build_module", no_load)
    with pytest.raises(ConfigError, match="encoder–decoder.*corpus.source=translation"):
        runner.run("csm", [f"model.path={path}", "corpus.limit=2"])
    with pytest.raises(ConfigError, match="csm measure single-stream models"):
        runner.run("alignment", [f"model.path={path}", "findings=[csm]"])
    with pytest.raises(ConfigError, match="corpus.source=translation reads sentence pairs"):
        runner.run("alignment", [f"model.path={tiny_bert}"])
    with pytest.raises(ConfigError, match="model.vector=result is not available"):
        runner.run("alignment", [f"model.path={path}", "model.vector=result"])
    assert runs_of(tracking_uri)[1] == []


def test_too_long_pairs_are_refused_before_the_model_loads(tiny_seq2seq, tmp_path, monkeypatch):
    from attnsim.errors import CorpusError

    _, path = tiny_seq2seq
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"source": "The minister said the plan would cost much more than expected.", "target": "Kurz."}\n', encoding="utf-8")
    monkeypatch.setattr(runner, "build_module", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(CorpusError, match=r"line 1 .*source has \d+ tokens > 8.*corpus.seq_len="):
        runner.prepare(load_config("alignment", [f"model.path={path}", f"corpus.path={pairs}", "corpus.seq_len=8"]))


def test_band_width_and_target_len_are_range_checked():
    with pytest.raises(ConfigError, match="'stats.band_width' is 0.0"):
        StatsConfig(band_width=0.0).check()
    with pytest.raises(ConfigError, match="'corpus.target_len' is 16"):
        load_config("csm", ["corpus.target_len=16"])
    cfg = load_config("alignment")
    assert cfg.corpus.source == "translation" and cfg.corpus.path is None and cfg.findings == ["alignment"]


def save_marian_sentencepiece(path):
    """A tiny Marian whose tokenizer is Marian's own (slow): SentencePiece source and target models trained here."""
    import json

    import sentencepiece as spm
    from transformers import AutoModelForSeq2SeqLM, MarianTokenizer

    from attnsim.data.translation import read_pairs
    from tests.helpers.tiny_models import tiny_config, training_texts

    path.mkdir(parents=True, exist_ok=True)
    lines = [line for text in training_texts() for line in text.splitlines() if line.strip()]
    pairs = read_pairs(None)
    pieces = {}
    for name, extra in (("source", [p.source for p in pairs]), ("target", [p.target for p in pairs])):
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines + extra),
            model_prefix=str(path / name),
            vocab_size=300,
            character_coverage=1.0,
            pad_id=-1,
            bos_id=-1,
            eos_id=-1,
            unk_id=0,
            minloglevel=2,
        )
        (path / f"{name}.model").rename(path / f"{name}.spm")
        processor = spm.SentencePieceProcessor(model_file=str(path / f"{name}.spm"))
        pieces.update({processor.id_to_piece(i): None for i in range(processor.get_piece_size())})
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    (path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = MarianTokenizer(str(path / "source.spm"), str(path / "target.spm"), str(path / "vocab.json"))
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    pad = vocab["<pad>"]
    model = AutoModelForSeq2SeqLM.from_config(
        tiny_config("marian", len(vocab), pad_token_id=pad, eos_token_id=0, bos_token_id=None, decoder_start_token_id=pad)
    )
    model.save_pretrained(path)
    return path


@pytest.mark.e2e
def test_marian_with_its_own_slow_sentencepiece_tokenizer(tmp_path, tracking_uri):
    """Marian's tokenizer has no fast version: pairs are tokenised by it (target side with the target model), labels are its pieces."""
    path = save_marian_sentencepiece(tmp_path / "marian")
    prepared = runner.prepare(load_config("alignment", [f"model.path={path}", *SMALL, "tracking.figures=false"]))
    tokenizer, corpus = prepared.tokenizer, prepared.corpus
    assert type(tokenizer).__name__ == "MarianTokenizer" and not tokenizer.is_fast
    first = corpus.pairs[0]
    assert corpus.target_ids[0, : corpus.target_mask[0].sum()].tolist() == tokenizer(text_target=first.target)["input_ids"]
    assert tokenizer(text_target=first.target)["input_ids"] != tokenizer(first.target)["input_ids"]  # the target SentencePiece model
    assert corpus.source_ids[0, corpus.source_mask[0].sum() - 1] == tokenizer.eos_token_id and not corpus.source_offsets.any()
    result = runner.execute(prepared)
    assert all(math.isfinite(result.metrics[f"alignment/{stat}"]) for stat in FINDINGS["alignment"].statistics)
    labels = result.summaries["alignment"].examples[0]["source_labels"]
    # pieces read as text (data.windows.readable_tokens): no "▁" shown, a whitespace-only piece is "␣"
    assert labels[-1] == "</s>" and not any("▁" in label for label in labels)
    assert "".join(labels[:-1]).replace("␣", "") == first.source.replace(" ", "")


def test_explorer_page_places_the_blocks_of_source_then_target():
    """The explorer's attention panel over [source; target]: encoder block top left, cross block (target rows x source
    columns) bottom left, causal decoder block bottom right, nothing top right."""
    import base64
    import json
    import re
    from types import SimpleNamespace

    import numpy as np

    from attnsim.findings.alignment import AlignmentFinding
    from attnsim.results import Summary

    cross = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])  # 3 target x 2 source
    decoder = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    encoder = torch.tensor([[0.6, 0.4], [0.3, 0.7]])
    example = {
        "doc_id": "p0",
        "source_labels": ["a", "</s>"],
        "target_labels": ["x", "y", "</s>"],
        "cross": cross[None, None],
        "decoder": decoder[None, None],
        "encoder": encoder[None, None],
    }
    finding = AlignmentFinding(1, 1, 3, StatsConfig())
    ((path, page),) = finding.pages(Summary("alignment", {}, examples=[example]), SimpleNamespace(max_tokens=64), "t")
    assert path == "explorer_alignment.html" and 'id="attention"' in page and 'id="csm"' not in page
    data = json.loads(re.search(r'id="explorer-data">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    entry = data["examples"][0]
    assert entry["length"] == 5 and entry["labels"][0] == "src a [0]" and entry["labels"][2] == "tgt x [2]"
    codes = np.frombuffer(base64.b64decode(entry["attention"]["codes"]), np.uint8).reshape(5, 5)
    low, high = entry["attention"]["ranges"][0][0]
    values = np.where(codes == 255, np.nan, low + (high - low) * codes / 253)
    assert np.isnan(values[:2, 2:]).all()  # source rows never attend to the target
    np.testing.assert_allclose(values[2:, :2], cross.numpy(), atol=(high - low) / 253)
    np.testing.assert_allclose(values[2:, 2:], decoder.numpy(), atol=(high - low) / 253)
    np.testing.assert_allclose(values[:2, :2], encoder.numpy(), atol=(high - low) / 253)
