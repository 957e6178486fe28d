"""Shared fixtures: offline Hugging Face, tiny models built here, temporary tracking stores."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from attnsim.capture.load import resolve_model_path  # noqa: E402

BUNDLED = resolve_model_path("bundled")


def save_tiny_model(path: Path, kind: str = "bert", layers: int = 2, heads: int = 4, hidden: int = 32, seed: int = 0) -> Path:
    """A randomly initialised encoder of ``kind`` with the bundled MiniLM tokenizer, saved to ``path``."""
    from transformers import AutoTokenizer, BertConfig, BertModel, DistilBertConfig, DistilBertModel, RobertaConfig, RobertaModel

    tokenizer = AutoTokenizer.from_pretrained(BUNDLED)
    vocab = len(tokenizer)
    torch.manual_seed(seed)
    if kind == "bert":
        model = BertModel(BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=2 * hidden, max_position_embeddings=256))
    elif kind == "distilbert":
        model = DistilBertModel(DistilBertConfig(vocab_size=vocab, dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=2 * hidden, max_position_embeddings=256))
    elif kind == "roberta":
        model = RobertaModel(RobertaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=2 * hidden, max_position_embeddings=258, pad_token_id=tokenizer.pad_token_id))
    else:
        raise ValueError(kind)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny_bert"), "bert")


@pytest.fixture
def tracking_uri(tmp_path, monkeypatch) -> str:
    """A fresh SQLite tracking store, also set as $MLFLOW_TRACKING_URI."""
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.fixture
def text_dir(tmp_path) -> Path:
    """Three small documents of several sentences each, built here."""
    folder = tmp_path / "texts"
    folder.mkdir()
    sentences = [
        "The river rose after three days of rain. Farmers moved their cattle to higher ground. The town council met on Friday.",
        "A new library opened in the old station. Children read there every afternoon. The mayor praised the volunteers who built it.",
        "Scientists measured the temperature of the lake. It was colder than last year. They will return in the spring to measure again.",
    ]
    for i, text in enumerate(sentences):
        (folder / f"doc{i}.txt").write_text((text + " ") * 6)
    return folder


def runs_of(uri: str):
    """All runs in every experiment of a store."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    return client, (client.search_runs(ids) if ids else [])
