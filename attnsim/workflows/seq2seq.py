"""The encoder–decoder path of a measurement run: translation pairs → teacher-forced capture → seq2seq findings.

:func:`attnsim.workflows.kinds.choose_kind` calls :func:`is_seq2seq` for every run, and
:class:`~attnsim.workflows.kinds.encoder_decoder.EncoderDecoderRun` the rest when the model is an
encoder–decoder (T5, BART, Marian); the rest of the run (tracking, summaries, logging) is shared.
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from attnsim.errors import ConfigError


def is_seq2seq(info: Any, cfg: Any, finding_types: Sequence[type]) -> bool:
    """Whether a run takes the encoder–decoder path, after checking that model, corpus and findings agree.

    Raises:
        ConfigError: an encoder–decoder model without ``corpus.source=translation``, a translation corpus with
        a model that is not one, or findings of one kind run on the other (each message names the fix).
    """
    model = info.arch.seq2seq
    corpus = cfg.corpus.source == "translation"
    pair_findings = [k.name for k in finding_types if k.encoder_decoder]
    other_findings = [k.name for k in finding_types if not k.encoder_decoder]
    if model and not corpus:
        raise ConfigError(
            f"Model '{info.name}' is an encoder–decoder ({info.model_type}); attnsim measures it on sentence pairs. "
            f"Set corpus.source=translation (corpus.path: a JSON Lines file with 'source' and 'target' fields, or null for the bundled example), e.g. `attnsim run alignment model.path={info.name}`."
        )
    if corpus and not model:
        raise ConfigError(
            f"corpus.source=translation reads sentence pairs for an encoder–decoder model (t5, bart, marian), but model '{info.name}' is a {info.model_type}. "
            "attnsim bundles no encoder–decoder: set model.path to a local T5, BART or Marian directory (e.g. attnsim run alignment model.path=/models/opus-mt-en-de), or use another corpus.source."
        )
    if model and other_findings:
        raise ConfigError(
            f"Finding(s) {', '.join(other_findings)} measure single-stream models; on an encoder–decoder ({info.model_type}) run the alignment finding (experiment 'alignment') instead."
        )
    if model and cfg.model.vector != "z":
        raise ConfigError(
            f"model.vector={cfg.model.vector} is not available for encoder–decoder models; their CSM reads the heads' outputs Z before W_O. Set model.vector=z."
        )
    if pair_findings and not model:
        raise ConfigError(
            f"Finding(s) {', '.join(pair_findings)} need an encoder–decoder model (t5, bart, marian) and corpus.source=translation; model '{info.name}' is a {info.model_type}."
        )
    return model


def prepare_pairs(info: Any, cfg: Any) -> Tuple[Any, Any]:
    """The tokenizer and the :class:`~attnsim.data.translation.PairCorpus` of a translation run (no weights loaded).

    Raises:
        ConfigError: ``corpus.target_len`` exceeds the model's positions, or a length exceeds the tokenizer's limit.
        ModelError, CorpusError: no tokenizer; a bad pairs file or a pair longer than its fixed length.
    """
    from attnsim.capture.seq2seq import load_pair_tokenizer
    from attnsim.data.translation import build_pairs, read_pairs

    c = cfg.corpus
    target_len = c.target_len or c.seq_len
    if info.max_length and target_len > info.max_length:
        raise ConfigError(
            f"corpus.target_len={target_len} is larger than the {info.max_length} tokens model '{info.name}' accepts. Set corpus.target_len to at most {info.max_length}."
        )
    tokenizer = load_pair_tokenizer(info, max(c.seq_len, target_len))  # fast, or slow for Marian (no offsets)
    pairs = read_pairs(c.path, c.encoding)
    return tokenizer, build_pairs(pairs, tokenizer, c.seq_len, target_len, c.limit, c.shuffle, cfg.seed)


def build_seq2seq_module(info: Any, cfg: Any, findings: List[Any]) -> Tuple[Any, dict]:
    """Load the encoder–decoder and wrap it in :class:`~attnsim.capture.seq2seq.Seq2SeqCaptureModule`.

    Returns:
        (module, model tags).
    """
    from attnsim.capture.load import load_model
    from attnsim.capture.seq2seq import Seq2SeqCaptureModule

    needs_attention = any(f.needs_attention for f in findings)
    model, tags = load_model(info, cfg.model.init, cfg.seed, cfg.model.attn_implementation, needs_attention, cfg.model.dtype)
    return Seq2SeqCaptureModule(model, info, needs_attention), tags


__all__ = ["build_seq2seq_module", "is_seq2seq", "prepare_pairs"]
