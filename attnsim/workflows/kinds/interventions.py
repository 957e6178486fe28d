"""Intervention runs (``ablation``, ``patching``): the model with its head, several passes per batch.

The checks and modules are :mod:`attnsim.workflows.interventions`'; this kind says when each runs.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from attnsim.workflows.kinds.base import MeasurementKind


class InterventionRun(MeasurementKind):
    """An ablation on the inner kind's windows, or activation patching on prompt pairs.

    Args:
        inner: the kind whose inputs an ablation measures (:class:`~attnsim.workflows.kinds.text.TextRun`;
            an image run is refused by :meth:`prepare`).
        patching: the run patches (its corpus is the prompt pairs of ``interventions.pairs``), not ablates.
    """

    name = "interventions"
    examples = False  # its batches are not the capture's

    def __init__(self, inner: MeasurementKind, patching: bool = False):
        self.inner = inner
        self.patching = patching

    def inputs(self, cfg: Any, info: Any) -> Tuple[Any, Any]:
        """The inner kind's tokenizer and corpus; for patching the tokenizer only (the prompt pairs are the corpus)."""
        if self.patching:
            from attnsim.capture.load import load_tokenizer

            return load_tokenizer(info, cfg.corpus.seq_len), None
        return self.inner.inputs(cfg, info)

    def prepare(self, cfg: Any, info: Any, tokenizer: Any, corpus: Any, tracker: Any, finding_types: Sequence[type]) -> Tuple[Optional[Any], Any]:
        """The intervention's inputs (prompt pairs, heads of an earlier run; :func:`~attnsim.workflows.interventions.prepare_interventions`).

        Returns:
            ``(InterventionSetup, corpus)``: the corpus is the prompt pairs of a patching run.
        """
        from attnsim.workflows.interventions import prepare_interventions

        setup = prepare_interventions(cfg, info, tokenizer, corpus, tracker, finding_types)
        return setup, setup.pairs if setup.pairs is not None else corpus

    def load(self, prepared: Any, findings: List[Any]) -> Tuple[Any, Dict[str, str]]:
        """The model with its head in the intervention module of the run's finding."""
        from attnsim.workflows.interventions import build_intervention_module

        return build_intervention_module(prepared, findings)

    def predict(self, predict: Callable[[], Any], module: Any) -> None:
        """Predict once, or twice for mean ablation (the first pass sums each head's Z)."""
        from attnsim.workflows.interventions import predict_all

        predict_all(predict, module)

    def __repr__(self) -> str:
        return f"InterventionRun({self.inner!r}, patching={self.patching})"


__all__ = ["InterventionRun"]
