"""Text runs: windows of documents (or of repeated random tokens) through the plain capture."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from attnsim.workflows.kinds.base import MeasurementKind, plain_module


class TextRun(MeasurementKind):
    """Windows of text measured by the plain capture (encoders and decoder-only language models).

    Args:
        validation: keep only the validation documents of ``attnsim finetune``'s split
            (``interventions.split=validation``).
    """

    name = "text"

    def __init__(self, validation: bool = False):
        self.validation = validation

    def inputs(self, cfg: Any, info: Any) -> Tuple[Any, Any]:
        """The model's tokenizer and the windows: seeded repeated tokens (``corpus.source=repeated_tokens``) or documents."""
        from attnsim.capture.load import load_tokenizer

        c = cfg.corpus
        tokenizer = load_tokenizer(info, c.seq_len)
        if c.source == "repeated_tokens":  # seeded random tokens repeated (induction heads), no documents
            from attnsim.data.repeated import repeated_corpus

            return tokenizer, repeated_corpus(tokenizer, c.seq_len, c.limit, c.repeat_length, c.repeats, cfg.seed)
        from attnsim.data.sources import read_documents
        from attnsim.data.windows import build_corpus

        documents = read_documents(c.source, c.path, c.text_field, list(c.categories), c.encoding)
        if self.validation:
            from attnsim.workflows.interventions import validation_documents

            documents = validation_documents(cfg, documents)
        # drawn windows keep their text for labels
        return tokenizer, build_corpus(
            documents, tokenizer, c.seq_len, c.limit, c.drop_short, c.min_tokens, c.shuffle, cfg.seed, c.language, keep_text=cfg.plots.examples
        )

    def load(self, prepared: Any, findings: List[Any]) -> Tuple[Any, Dict[str, str]]:
        """The plain capture on the run's capture path (:func:`~attnsim.workflows.kinds.base.plain_module`)."""
        module, tags, model = plain_module(prepared, findings)
        self.check_model(model, prepared.corpus)
        return module, tags

    def __repr__(self) -> str:
        return f"TextRun(validation={self.validation})"


__all__ = ["TextRun"]
