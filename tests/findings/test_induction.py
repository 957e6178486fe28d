"""Induction and previous-token heads, worked by hand; the repeated_tokens corpus; a tiny end-to-end run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnsim.stats.induction import InductionAccumulator, earlier_occurrences, earlier_positions
from attnsim.stats.pairs import PairView
from tests.helpers.findings import CLS, PAD, SEP, batch_of, symmetric, view_from_csm

# [CLS] a b c a b c [SEP]: the earlier occurrence of 4, 5, 6 is 1, 2, 3; the induction targets 2, 3, 4
IDS = torch.tensor([[CLS, 5, 6, 7, 5, 6, 7, SEP]])
T = 8


def _spread(row: torch.Tensor, key: int, value: float, allowed: int) -> None:
    """Row with ``value`` at ``key`` and the rest spread evenly over the other allowed keys 0..allowed-1."""
    row[:allowed] = (1 - value) / (allowed - 1)
    row[key] = value


def _attention(causal: bool) -> torch.Tensor:
    """(layer 1, batch 1, head 2, T, T): head 0 an induction head, head 1 a previous-token head."""
    att = torch.zeros(1, 1, 2, T, T)
    for i in range(T):
        allowed = i + 1 if causal else T
        att[0, 0, 0, i, :allowed] = 1.0 / allowed
        att[0, 0, 1, i, :allowed] = 1.0 / allowed
    for i, target, value in ((4, 2, 0.6), (5, 3, 0.3), (6, 4, 0.9)):
        _spread(att[0, 0, 0, i], target, value, i + 1 if causal else T)
    for i in range(1, T):
        _spread(att[0, 0, 1, i], i - 1, 1.0, i + 1 if causal else T)
    return att


def _scores(attention: torch.Tensor, batch: dict) -> dict:
    view = PairView(torch.randn(1, batch["input_ids"].shape[0], 2, attention.shape[-1], 4), batch, attention)
    acc = InductionAccumulator(1, 2)
    acc.update(view)
    return {k: v[0].tolist() for k, v in acc.compute().items()}


def test_induction_and_previous_token_scores_by_hand_encoder():
    out = _scores(_attention(causal=False), batch_of(IDS))
    # head 0: (0.6 + 0.3 + 0.9) / 3 queries; head 1 puts nothing on the targets (A[4, 2] = 0 ...)
    assert out["induction_score"] == pytest.approx([0.6, 0.0], abs=1e-6)
    assert out["induction_score_chance"] == pytest.approx([1 / 8, 1 / 8], abs=1e-6)  # one target of 8 real keys
    # previous-token queries 1..7 ([SEP] too: stats.include_special); head 0: rows 1, 2, 3, 7 uniform,
    # rows 4, 5, 6 spread their rest (0.4, 0.7, 0.1) over 7 keys
    assert out["prev_token_score"] == pytest.approx([(4 / 8 + (0.4 + 0.7 + 0.1) / 7) / 7, 1.0], abs=1e-6)
    assert out["prev_token_score_chance"] == pytest.approx([1 / 8, 1 / 8], abs=1e-6)


def test_causal_heads_get_the_causal_chance():
    out = _scores(_attention(causal=True), batch_of(IDS))
    assert out["induction_score"] == pytest.approx([0.6, 0.0], abs=1e-6)
    # row i of a causal head allows keys 0..i: chance 1 / (i + 1), read from the attention (zeros after i)
    assert out["induction_score_chance"] == pytest.approx([(1 / 5 + 1 / 6 + 1 / 7) / 3] * 2, abs=1e-6)
    assert out["prev_token_score_chance"] == pytest.approx([sum(1 / (i + 1) for i in range(1, 8)) / 7] * 2, abs=1e-6)
    assert out["prev_token_score"][1] == pytest.approx(1.0, abs=1e-6)
    # row 1 of head 0 is uniform over keys 0, 1; rows 4..6 spread their rest over i other keys
    expected = (1 / 2 + 1 / 3 + 1 / 4 + 1 / 8 + 0.4 / 4 + 0.7 / 5 + 0.1 / 6) / 7
    assert out["prev_token_score"][0] == pytest.approx(expected, abs=1e-6)


def test_padding_and_windows_without_repeats():
    # a second window, padded, without a repeated token: no induction query, 4 previous-token queries
    ids = torch.cat([IDS, torch.tensor([[CLS, 8, 9, SEP, PAD, PAD, PAD, PAD]])])
    att = torch.cat([_attention(False), torch.zeros(1, 1, 2, T, T)], 1)
    att[0, 1, :, :, :4] = 0.25
    att[0, 1, :, 4:, :] = 7.0  # garbage in padded rows: never read
    out = _scores(att, batch_of(ids))
    assert out["induction_score"] == pytest.approx([0.6, 0.0], abs=1e-6)
    # head 1: 7 queries at 1.0 in window 0, 3 at 0.25 in window 1 (queries 1, 2, 3 of 4 real tokens)
    assert out["prev_token_score"][1] == pytest.approx((7 + 3 * 0.25) / 10, abs=1e-6)
    assert out["prev_token_score_chance"][1] == pytest.approx((7 / 8 + 3 / 4) / 10, abs=1e-6)


def test_csm_at_earlier_occurrence_by_hand():
    csm = symmetric(T, {(1, 4): 4.0, (2, 5): 2.0, (3, 6): 0.0}, fill=1.0)[None, None, None]
    acc = InductionAccumulator(1, 1)
    acc.update(view_from_csm(csm, batch_of(IDS), attention=_attention(False)[:, :, :1]))
    out = {k: float(v) for k, v in acc.compute().items()}
    assert out["earlier_csm_mean"] == pytest.approx((4 + 2 + 0) / 3, rel=1e-6)
    # rows 4, 5, 6 over their 7 partners: (4 + 6) / 7, (2 + 6) / 7, (0 + 6) / 7
    assert out["earlier_csm_chance"] == pytest.approx((10 + 8 + 6) / 21, rel=1e-6)
    assert out["earlier_csm_ratio"] == pytest.approx(2 / (24 / 21), rel=1e-6)
    # without special tokens each row has 5 partners and the CSM chance changes with them
    acc = InductionAccumulator(1, 1)
    acc.update(view_from_csm(csm, batch_of(IDS), attention=_attention(False)[:, :, :1], include_special=False))
    assert float(acc.compute()["earlier_csm_chance"]) == pytest.approx((8 + 6 + 4) / 15, rel=1e-6)


def test_earlier_positions_and_every_earlier_occurrence():
    ids = torch.tensor([[CLS, 5, 6, 5, 6, 5, 6, SEP]])
    content = torch.tensor([[False] + [True] * 6 + [False]])
    earlier = earlier_positions(ids, content)
    assert earlier.tolist() == [[-1, -1, -1, 1, 2, 3, 4, -1]]
    found = earlier_occurrences(earlier)[0]
    assert found[5].nonzero().flatten().tolist() == [1, 3] and found[6].nonzero().flatten().tolist() == [2, 4]
    assert found[:3].sum() == 0
    # three copies: the induction targets of position 5 are 2 and 4 (after 1 and 3); chance 2 / 8
    att = torch.full((1, 1, 1, T, T), 1 / 8)
    att[0, 0, 0, 5] = 0.0
    att[0, 0, 0, 5, [2, 4]] = 0.5
    batch = batch_of(ids)
    view = PairView(torch.randn(1, 1, 1, T, 4), batch, att)
    acc = InductionAccumulator(1, 1)
    acc.update(view)
    out = {k: float(v) for k, v in acc.compute().items()}
    # queries 3, 4, 5, 6 with 1, 1, 2, 2 targets: uniform rows give 1/8, 1/8, -, 2/8; row 5 gives 1.0
    assert out["induction_score"] == pytest.approx((1 / 8 + 1 / 8 + 1.0 + 2 / 8) / 4, rel=1e-6)
    assert out["induction_score_chance"] == pytest.approx((1 + 1 + 2 + 2) / 8 / 4, rel=1e-6)
    # the batch's own earlier_position wins over the ids (here: only 5 -> 3 and 6 -> 4 link back, so
    # the targets are 4 (A[5, 4] = 0.5) and 5 (uniform 1/8))
    batch["earlier_position"] = torch.tensor([[-1, -1, -1, -1, -1, 3, 4, -1]])
    acc = InductionAccumulator(1, 1)
    acc.update(PairView(torch.randn(1, 1, 1, T, 4), batch, att))
    assert float(acc.compute()["induction_score"]) == pytest.approx((0.5 + 1 / 8) / 2, rel=1e-6)


def test_no_repeats_is_undefined_and_merge_is_exact():
    ids = torch.tensor([[CLS, 5, 6, 7, SEP]])
    att = torch.full((1, 1, 1, 5, 5), 0.2)
    acc = InductionAccumulator(1, 1)
    acc.update(PairView(torch.randn(1, 1, 1, 5, 3), batch_of(ids), att))
    out = acc.compute()
    assert math.isnan(float(out["induction_score"])) and math.isnan(float(out["earlier_csm_mean"]))
    assert float(out["prev_token_score"]) == pytest.approx(0.2)
    whole, first, second = InductionAccumulator(1, 2), InductionAccumulator(1, 2), InductionAccumulator(1, 2)
    att = _attention(False)
    z = torch.randn(1, 2, 2, T, 4)
    ids2 = torch.cat([IDS, IDS.roll(1, -1)])
    whole.update(PairView(z, batch_of(ids2), torch.cat([att, att], 1)))
    first.update(PairView(z[:, :1], batch_of(ids2[:1]), att))
    second.update(PairView(z[:, 1:], batch_of(ids2[1:]), att))
    merged = first.merge(second).compute()
    for key, value in whole.compute().items():
        torch.testing.assert_close(merged[key], value, equal_nan=True)


# -- the repeated_tokens corpus ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert_tokenizer():
    from transformers import AutoTokenizer

    from tests.helpers.models import BUNDLED

    return AutoTokenizer.from_pretrained(BUNDLED)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def decoder_tokenizer(request):
    from tests.helpers.tiny_models import train_tokenizer

    return request.param, train_tokenizer(request.param)


def test_repeated_tokens_windows(bert_tokenizer):
    from attnsim.data.module import collate_windows
    from attnsim.data.repeated import ordinary_vocabulary, repeated_corpus

    corpus = repeated_corpus(bert_tokenizer, seq_len=40, windows=3, repeat_length=12, repeats=3, seed=7)
    assert len(corpus) == 3 and corpus.seq_len == 40
    ordinary = set(ordinary_vocabulary(bert_tokenizer).tolist())
    for w in corpus.windows:
        assert w.input_ids.shape == (40,)
        assert w.input_ids[0] == bert_tokenizer.cls_token_id and w.input_ids[37] == bert_tokenizer.sep_token_id
        body = w.input_ids[1:37]
        copies = body.reshape(3, 12)
        assert (copies == copies[0]).all() and len(set(copies[0].tolist())) == 12  # exact repeats of distinct tokens
        assert set(copies[0].tolist()) <= ordinary
        assert w.attention_mask.tolist() == [1] * 38 + [0] * 2 and w.special_mask[[0, 37]].all() and w.special_mask[1:37].sum() == 0
        assert w.sentence_ids.tolist() == [-1] + [0] * 12 + [1] * 12 + [2] * 12 + [-1] * 3
        assert w.earlier_position.tolist() == [-1] * 13 + list(range(1, 25)) + [-1] * 3
    # the ids give the same earlier positions as the corpus
    batch = collate_windows(list(enumerate(corpus.windows)))
    content = batch["attention_mask"].bool() & ~batch["special_mask"]
    assert torch.equal(earlier_positions(batch["input_ids"], content), batch["earlier_position"])
    # seeded: the same seed gives the same windows, whatever the number of windows; another seed others
    again = repeated_corpus(bert_tokenizer, seq_len=40, windows=2, repeat_length=12, repeats=3, seed=7)
    assert [w.input_ids.tolist() for w in again.windows] == [w.input_ids.tolist() for w in corpus.windows[:2]]
    other = repeated_corpus(bert_tokenizer, seq_len=40, windows=2, repeat_length=12, repeats=3, seed=8)
    assert other.content_hash != again.content_hash
    assert corpus.windows[0].input_ids.tolist() != corpus.windows[1].input_ids.tolist()


def test_ordinary_vocabulary_leaves_out_specials_bytes_and_whitespace(bert_tokenizer, decoder_tokenizer):
    from attnsim.data.repeated import ordinary_vocabulary, repeated_corpus
    from attnsim.data.windows import readable_tokens

    ordinary = set(ordinary_vocabulary(bert_tokenizer).tolist())
    for token in ("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]", "[unused0]"):
        assert bert_tokenizer.convert_tokens_to_ids(token) not in ordinary
    assert bert_tokenizer.convert_tokens_to_ids("the") in ordinary
    family, tok = decoder_tokenizer
    ordinary = ordinary_vocabulary(tok)
    names = tok.convert_ids_to_tokens(ordinary.tolist())
    assert not set(tok.all_special_ids) & set(ordinary.tolist())
    assert not any(n.startswith("<0x") for n in names) and "Ġ" not in names and "▁" not in names and "Ã" not in names
    labels = readable_tokens(tok, ordinary.tolist())
    assert all(label.strip() and "<0x" not in label for label in labels)
    # the tokenizer's own specials wrap each window: <s> for the Llama-style one, none for GPT-2's
    w = repeated_corpus(tok, seq_len=24, windows=1, repeat_length=10, repeats=2).windows[0]
    if family == "llama":
        assert w.input_ids[0] == tok.bos_token_id and w.earlier_position.tolist()[:12] == [-1] * 11 + [1]
        assert int(w.attention_mask.sum()) == 21
    else:
        assert w.special_mask.sum() == 0 and w.earlier_position.tolist()[:11] == [-1] * 10 + [0]
        assert int(w.attention_mask.sum()) == 20


def test_repeated_tokens_errors(bert_tokenizer):
    from attnsim.config import CorpusConfig
    from attnsim.data.repeated import repeated_corpus
    from attnsim.errors import ConfigError, CorpusError

    # 2 x 20 tokens fit 40 but not with [CLS] and [SEP]: refused when the tokenizer is known, before any model
    with pytest.raises(CorpusError, match=r"corpus.seq_len=40.*at least 42"):
        repeated_corpus(bert_tokenizer, seq_len=40, windows=1, repeat_length=20, repeats=2)
    with pytest.raises(CorpusError, match="fewer than corpus.repeat_length"):
        repeated_corpus(_TinyVocab(bert_tokenizer), seq_len=64, windows=1, repeat_length=20, repeats=2)
    for fields, message in (
        (dict(repeat_length=50, repeats=3, seq_len=128), "more than corpus.seq_len=128"),
        (dict(repeat_length=1, repeats=2), "at least 2 tokens"),
        (dict(repeats=1), "at least 2 copies"),
        (dict(path="/tmp/x"), "corpus.path"),
        (dict(limit=None), "corpus.limit"),
    ):
        with pytest.raises(ConfigError, match=message):
            CorpusConfig(source="repeated_tokens", **fields).check()
    CorpusConfig(source="repeated_tokens").check()  # defaults: 50 x 2 in 128
    # a workflow that reads documents (attnsim finetune) is told what the source is for
    from attnsim.data.sources import read_documents

    with pytest.raises(CorpusError, match="random token windows.*corpus.source=bbc, text or jsonl"):
        read_documents("repeated_tokens")


class _TinyVocab:
    """A tokenizer whose ordinary vocabulary is 10 tokens."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self.tokenizer(*args, **kwargs)

    def __len__(self) -> int:
        return 1010  # ids 0..1009: specials, [unused] markers and about 10 ordinary tokens


def test_induction_end_to_end_on_tiny_bert(tiny_bert, tmp_path):
    from mlflow import MlflowClient

    from attnsim.workflows.run import run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = [
        f"model.path={tiny_bert}",
        "corpus.limit=3",
        "corpus.seq_len=24",
        "corpus.repeat_length=10",
        "corpus.repeats=2",
        "trainer.batch_size=2",
        "trainer.progress_bar=false",
        f"tracking.uri={uri}",
        "plots.explorer=false",
        "plots.examples=1",
    ]
    result = run("induction", overrides)
    client = MlflowClient(uri)
    data = client.get_run(result.run_id).data
    assert data.tags["attnsim.corpus"] == "repeated_tokens:10x2"
    for stat in (
        "induction_score",
        "induction_score_chance",
        "prev_token_score",
        "prev_token_score_chance",
        "earlier_csm_mean",
        "earlier_csm_chance",
        "earlier_csm_ratio",
    ):
        assert np.isfinite(data.metrics[f"induction/{stat}"]), stat
    assert "induction/induction_score/L01/H03" in data.metrics
    # encoder rows see every real key: 1 target of the 22 real tokens ([CLS] 2 x 10 [SEP])
    assert data.metrics["induction/induction_score_chance"] == pytest.approx(1 / 22, rel=1e-6)
    assert data.metrics["induction/prev_token_score_chance"] == pytest.approx(1 / 22, rel=1e-6)
    assert 0 <= data.metrics["induction/induction_score"] <= 1
    artifacts = {a.path for a in client.list_artifacts(result.run_id, "figures/induction")}
    assert {"figures/induction/induction_score.png", "figures/induction/prev_token_score.png"} <= artifacts
    tables = {a.path for a in client.list_artifacts(result.run_id, "tables")}
    assert "tables/induction_heads.csv" in tables


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_induction_end_to_end_on_tiny_decoders(family, tmp_path):
    """On two decoder families of the architecture table; the causal chance is read from the attention."""
    from mlflow import MlflowClient

    from attnsim.data.windows import special_template
    from attnsim.workflows.run import run
    from tests.helpers.tiny_models import save_tiny, train_tokenizer

    model = save_tiny(tmp_path / family, family)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = [
        f"model.path={model}",
        "corpus.limit=3",
        "corpus.seq_len=24",
        "corpus.repeat_length=10",
        "corpus.repeats=2",
        "trainer.batch_size=2",
        "trainer.progress_bar=false",
        f"tracking.uri={uri}",
        "plots.explorer=false",
        "plots.examples=1",
    ]
    result = run("induction", overrides)
    metrics = MlflowClient(uri).get_run(result.run_id).data.metrics
    for stat in (
        "induction_score",
        "induction_score_chance",
        "prev_token_score",
        "prev_token_score_chance",
        "earlier_csm_mean",
        "earlier_csm_chance",
        "earlier_csm_ratio",
    ):
        assert np.isfinite(metrics[f"induction/{stat}"]), stat
    prefix, suffix = special_template(train_tokenizer(family))
    start, real = len(prefix), len(prefix) + 20 + len(suffix)
    # causal rows: query i allows keys 0..i (one target each in the second copy)
    second_copy = range(start + 10, start + 20)
    assert metrics["induction/induction_score_chance"] == pytest.approx(np.mean([1 / (i + 1) for i in second_copy]), rel=1e-5)
    assert metrics["induction/prev_token_score_chance"] == pytest.approx(np.mean([1 / (i + 1) for i in range(1, real)]), rel=1e-5)


def test_too_long_copies_are_refused_before_any_model_or_run(tiny_bert, tmp_path, monkeypatch):
    import attnsim.workflows.run as workflow
    from attnsim.errors import CorpusError

    def no_model(*args, **kwargs):
        raise AssertionError("the model must not load")

    monkeypatch.setattr(workflow, "build_module", no_model)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(CorpusError, match=r"plus the tokenizer's 2 special token\(s\) are 42 tokens"):
        workflow.run("induction", [f"model.path={tiny_bert}", "corpus.seq_len=40", "corpus.repeat_length=20", f"tracking.uri={uri}"])
    assert not (tmp_path / "mlflow.db").exists()  # the store is not even opened: no run
