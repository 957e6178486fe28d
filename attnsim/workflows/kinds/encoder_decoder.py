"""Encoder–decoder runs (T5, BART, Marian): sentence pairs, teacher-forced capture of three attention blocks."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from attnsim.workflows.kinds.base import MeasurementKind


class EncoderDecoderRun(MeasurementKind):
    """Sentence pairs (``corpus.source=translation``) through :class:`~attnsim.capture.seq2seq.Seq2SeqCaptureModule`."""

    name = "encoder_decoder"
    examples = False  # its findings keep their own example pairs

    def inputs(self, cfg: Any, info: Any) -> Tuple[Any, Any]:
        """The pair tokenizer and the :class:`~attnsim.data.translation.PairCorpus` (:func:`~attnsim.workflows.seq2seq.prepare_pairs`)."""
        from attnsim.workflows.seq2seq import prepare_pairs

        return prepare_pairs(info, cfg)

    def load(self, prepared: Any, findings: List[Any]) -> Tuple[Any, Dict[str, str]]:
        """The encoder–decoder in its capture module (:func:`~attnsim.workflows.seq2seq.build_seq2seq_module`)."""
        from attnsim.workflows.seq2seq import build_seq2seq_module

        return build_seq2seq_module(prepared.info, prepared.cfg, findings)


__all__ = ["EncoderDecoderRun"]
