"""The blockwise path's test bench: a seeded tiny BERT loaded eager and with the recording SDPA, BBC windows, captures, `paper` findings."""

from __future__ import annotations

import copy

import torch

from attnsim.capture.queries import register


def blockwise_findings() -> list:
    """Every registered finding with a blockwise form (``Finding.blockwise``), in registry order: the invariant tests
    (dense = blockwise, merge order, padding) run each, so that a new statistic is in them without an edit here."""
    from attnsim.findings.registry import FINDINGS

    return [name for name in FINDINGS if FINDINGS[name].blockwise]


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


def blockwise_finding_objects(seq_len: int, tokenizer):
    """One of each :func:`blockwise_findings` for 2 layers x 4 heads at ``seq_len`` tokens, with the default stats config."""
    from omegaconf import OmegaConf

    from attnsim.config import StatsConfig
    from attnsim.findings.base import FindingContext
    from attnsim.findings.registry import FINDINGS

    stats = OmegaConf.structured(StatsConfig)
    context = FindingContext(tokenizer=tokenizer, vocab_size=len(tokenizer))
    return [FINDINGS[name](2, 4, seq_len, stats, context) for name in blockwise_findings()], stats


def dense_and_blockwise(capture, batch, seq_len: int, tokenizer) -> list:
    """The dense view (T x T maps recomputed whole from the recorded queries and keys) and the blockwise
    view of one capture, each folded into a fresh set of :func:`blockwise_finding_objects`: ``[(findings, view)]``,
    dense first."""
    from attnsim.capture.hooks import BatchCapture
    from attnsim.findings.base import view_factory
    from attnsim.stats.pairs.scores import attention_rows

    maps = tuple(attention_rows(qk, 0, seq_len) for qk in capture.query_keys)  # L x (B, H, T, T)
    out = []
    for path, raw in (("dense", BatchCapture(capture.z_layers, maps, "z")), ("blockwise", BatchCapture(capture.z_layers, None, "z", capture.query_keys))):
        findings, stats = blockwise_finding_objects(seq_len, tokenizer)
        view = view_factory(findings, stats, path, block_rows=96)(raw, batch)
        for finding in findings:
            finding.update(view)
            assert finding.error is None, (path, finding.name, finding.error)
        out.append((findings, view))
    return out
