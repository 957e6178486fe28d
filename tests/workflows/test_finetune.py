"""`attnsim finetune`: split by document, config checks, a short fit on a tiny model, failure handling."""

from __future__ import annotations

import json
import re

import pytest

from attnsim.cli import main
from attnsim.config import load_config
from attnsim.data.sources import Document
from attnsim.errors import ConfigError, CorpusError
from attnsim.training.data import label_names, split_documents
from attnsim.training.module import warmup_linear
from attnsim.workflows.finetune import finetune, prepare_finetune, validate_finetune
from tests.helpers.runs import runs_of, tiny_fit


def test_split_by_document_stratified_and_seeded():
    docs = [Document(f"{label}/{i}", "text", label) for label in ("a", "b", "c") for i in range(10)]
    train, val = split_documents(docs, 0.2, seed=0)
    assert len(val) == 6 and len(train) == 24
    assert {d.label: sum(x.label == d.label for x in val) for d in val} == {"a": 2, "b": 2, "c": 2}
    assert not {d.doc_id for d in train} & {d.doc_id for d in val}
    assert split_documents(docs, 0.2, seed=0) == (train, val)
    assert split_documents(docs, 0.2, seed=1)[1] != val
    # a label with two documents keeps one on each side
    pair = [Document("x/0", "t", "x"), Document("x/1", "t", "x"), Document("y/0", "t", "y"), Document("y/1", "t", "y")]
    train, val = split_documents(pair, 0.01, seed=0)
    assert sorted(d.label for d in val) == ["x", "y"]


def test_labels_are_required():
    with pytest.raises(CorpusError, match="label on every document"):
        label_names([Document("a", "text", "x"), Document("b", "text")])
    with pytest.raises(CorpusError, match="at least two labels"):
        label_names([Document("a", "text", "x")])


def test_warmup_then_linear_decay():
    factor = warmup_linear(2, 10)
    assert [factor(s) for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]


@pytest.mark.parametrize(
    "override, key",
    [
        ("trainer.max_steps=0", "trainer.max_steps"),
        ("checkpoint.every_n_steps=0", "checkpoint.every_n_steps"),
        ("trainer.val_fraction=1.0", "trainer.val_fraction"),
        ("trainer.learning_rate=0", "trainer.learning_rate"),
        ("trainer.warmup_steps=500", "trainer.warmup_steps"),
    ],
)
def test_bad_fit_settings_are_refused(override, key):
    with pytest.raises(ConfigError, match=key):
        validate_finetune(load_config("finetune_bbc", [override]))


def test_used_checkpoint_dir_and_unlabelled_corpus_refused_before_any_run(tiny_bert, tracking_uri, tmp_path, text_dir, capsys):
    used = tmp_path / "used"
    (used / "step-000002").mkdir(parents=True)
    with pytest.raises(ConfigError, match="already holds checkpoints"):
        prepare_finetune(load_config("finetune_bbc", [f"checkpoint.dir={used}"]))
    assert main(["finetune", f"model.path={tiny_bert}", "corpus=text", f"corpus.path={text_dir}"]) == 2
    assert "needs a label on every document" in capsys.readouterr().err
    assert runs_of(tracking_uri)[1] == []


def test_finetune_cli_logs_per_step_and_saves_loadable_checkpoints(tiny_bert, tracking_uri, tmp_path, capsys):
    from transformers import AutoModel, AutoModelForSequenceClassification

    directory = tmp_path / "ckpt"
    assert main(["finetune", *tiny_fit(tiny_bert, directory)]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint directory: {directory}" in out
    # how few documents and categories the windows came from (corpus.limit=24 windows of 32 tokens)
    found = re.search(
        r"trained on 24 training windows \((\d+) documents?, (\d+) of 5 categories\) / (\d+) validation windows \((\d+) documents?, (\d+) of 5 categories\)",
        out,
    )
    assert found, out
    train_docs, train_cats, _, val_docs, val_cats = map(int, found.groups())
    assert 1 <= train_cats <= min(5, train_docs) and 1 <= val_cats <= min(5, val_docs)
    client, runs = runs_of(tracking_uri)
    (run,) = runs
    assert f"run id: {run.info.run_id}" in out
    assert run.info.status == "FINISHED"
    tags, params = run.data.tags, run.data.params
    assert tags["attnsim.kind"] == "finetune" and tags["attnsim.checkpoint_dir"] == str(directory)
    assert tags["attnsim.labels"] == "business,entertainment,politics,sports,tech"
    assert len(tags["attnsim.corpus_hash"]) == 64 and tags["attnsim.corpus_hash"] != tags["attnsim.val_corpus_hash"]
    assert params["trainer.max_steps"] == "4" and params["checkpoint.every_n_steps"] == "2"
    # only what a fit reads: no measurement, map, figure or intervention keys
    assert not {key.split(".")[0] for key in params} & {"stats", "maps", "plots", "interventions", "capture", "findings"}
    assert run.info.run_name.endswith(f" · {tags['attnsim.model']}")

    def steps(key):
        return [m.step for m in client.get_metric_history(run.info.run_id, key)]

    assert steps("train/loss") == steps("train/accuracy") == steps("train/lr") == [1, 2, 3, 4]
    assert steps("val/accuracy") == steps("val/loss") == [2, 4]
    assert steps("checkpoint/step") == [2, 4]
    assert all(m.value > 0 for m in client.get_metric_history(run.info.run_id, "train/lr"))
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "checkpoints.json"} <= artifacts

    assert sorted(p.name for p in directory.iterdir()) == ["step-000002", "step-000004"]
    meta = json.loads((directory / "step-000004" / "attnsim_checkpoint.json").read_text())
    assert meta["global_step"] == 4 and meta["run_id"] == run.info.run_id and meta["base_model"] == str(tiny_bert)
    classifier = AutoModelForSequenceClassification.from_pretrained(directory / "step-000004")
    assert classifier.config.id2label == {0: "business", 1: "entertainment", 2: "politics", 3: "sports", 4: "tech"}
    encoder = AutoModel.from_pretrained(directory / "step-000004")
    assert encoder.config.num_hidden_layers == 2


def test_failed_fit_ends_failed_and_keeps_logs_and_checkpoints(tiny_bert, tracking_uri, tmp_path, monkeypatch):
    from attnsim.training.module import ClassifierModule

    original = ClassifierModule.training_step

    def breaks_on_third(self, batch, batch_idx):
        if batch_idx == 2:
            raise RuntimeError("simulated failure in the third step")
        return original(self, batch, batch_idx)

    monkeypatch.setattr(ClassifierModule, "training_step", breaks_on_third)
    directory = tmp_path / "ckpt"
    with pytest.raises(RuntimeError, match="simulated failure"):
        finetune(overrides=tiny_fit(tiny_bert, directory, steps=4, every=1))
    client, (run,) = runs_of(tracking_uri)
    assert run.info.status == "FAILED"
    assert "simulated failure" in run.data.tags["attnsim.error"]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")] == [1, 2]
    assert sorted(p.name for p in directory.iterdir()) == ["step-000001", "step-000002"]
