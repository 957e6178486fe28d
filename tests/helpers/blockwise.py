"""The blockwise path's test bench: a seeded tiny BERT loaded eager and with the recording SDPA, BBC windows, captures, `paper` findings."""

from __future__ import annotations

import copy

import torch

from attnsim.capture.queries import register

PAPER = ["csm", "distance", "sentences", "anchors", "repetition", "attention_regions", "separators", "noise"]


def bert_pair(vocab: int):
    """The same seeded tiny BERT (512 positions) loaded eager (dense path) and with the recording SDPA."""
    from transformers import AutoModel, BertConfig

    config = BertConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=512, initializer_range=0.3
    )
    torch.manual_seed(0)
    eager = AutoModel.from_config(copy.deepcopy(config), attn_implementation="eager").eval()
    blockwise = AutoModel.from_config(copy.deepcopy(config), attn_implementation=register()).eval()
    blockwise.load_state_dict(eager.state_dict())
    return eager, blockwise


def windows_batch(tokenizer, seq_len: int, windows: int):
    from attnsim.data.module import collate_windows
    from attnsim.data.sources import read_documents
    from attnsim.data.windows import build_corpus

    documents = read_documents("bbc")[:40]
    corpus = build_corpus(documents, tokenizer, seq_len, limit=windows, shuffle=False)
    items = list(enumerate(corpus.windows))
    # the last window padded: a document tail shorter than the window
    return collate_windows(items, corpus.unk_token_id)


def capture_batch(model, batch, path):
    from attnsim.capture.architectures import architecture_for
    from attnsim.capture.hooks import forward_with_capture

    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.no_grad():
        return forward_with_capture(model, architecture_for("bert"), 4, inputs, attention=path == "dense", queries=path == "blockwise")[1]


def paper_findings(seq_len: int, tokenizer):
    from omegaconf import OmegaConf

    from attnsim.config import StatsConfig
    from attnsim.findings.base import FindingContext
    from attnsim.findings.registry import FINDINGS

    stats = OmegaConf.structured(StatsConfig)
    context = FindingContext(tokenizer=tokenizer, vocab_size=len(tokenizer))
    return [FINDINGS[name](2, 4, seq_len, stats, context) for name in PAPER], stats
