"""One object per kind of measurement run, chosen once (:func:`choose_kind`), before any weights load.

==================  =========================================================================================
kind                what differs
==================  =========================================================================================
``text``            windows of documents or repeated tokens, plain capture (:class:`TextRun`)
``images``          a Vision Transformer's patches, plain capture and a layout check (:class:`ImageRun`)
``gradients``       a text or image run's inputs, the gradient capture, predict with gradients (:class:`GradientRun`)
``encoder_decoder`` sentence pairs, the teacher-forced capture, no example windows (:class:`EncoderDecoderRun`)
``interventions``   an ablation's windows or patching's prompt pairs, several passes per batch (:class:`InterventionRun`)
``residual``        a causal LM's windows, its residual stream and readout (``dla``, ``logit_lens``; :class:`ResidualRun`)
==================  =========================================================================================

The kind follows from what the model declares (:class:`~attnsim.capture.architectures.ModelKind`), what the
findings declare (:class:`~attnsim.findings.base.Needs`) and the corpus source; the workflow
(:mod:`attnsim.workflows.run`) calls the same hooks (:class:`MeasurementKind`) whatever the kind.
"""

from __future__ import annotations

from typing import Any, Sequence

from attnsim.workflows.kinds.base import MeasurementKind
from attnsim.workflows.kinds.encoder_decoder import EncoderDecoderRun
from attnsim.workflows.kinds.gradients import GradientRun
from attnsim.workflows.kinds.images import ImageRun
from attnsim.workflows.kinds.interventions import InterventionRun
from attnsim.workflows.kinds.residual import ResidualRun, check_residual
from attnsim.workflows.kinds.text import TextRun


def choose_kind(cfg: Any, info: Any, finding_types: Sequence[type]) -> MeasurementKind:
    """The kind of a measurement run, after checking that model, corpus and findings agree.

    Args:
        cfg: the resolved config.
        info: the inspected model (:class:`~attnsim.capture.load.ModelInfo`).
        finding_types: the classes of the run's findings.

    Raises:
        ConfigError: an intervention finding beside other findings or in several processes; an encoder–decoder
            without a translation corpus or with single-stream findings, and the converse (each message names the fix).
    """
    from attnsim.capture.architectures import ModelKind
    from attnsim.findings.base import Needs
    from attnsim.workflows.interventions import check_findings
    from attnsim.workflows.seq2seq import is_seq2seq

    needs = Needs.of(finding_types)
    if needs.interventions:
        check_findings(cfg, finding_types)
    if is_seq2seq(info, cfg, finding_types):  # encoder–decoder: sentence pairs, not windows
        return EncoderDecoderRun()
    if info.kind is ModelKind.VISION or cfg.corpus.source == "images":  # a mismatch of the two is refused by its inputs
        inputs: MeasurementKind = ImageRun()
    else:
        inputs = TextRun(validation=needs.interventions and cfg.interventions.split == "validation")
    if needs.interventions:
        return InterventionRun(inputs, patching="patching" in cfg.findings)
    if needs.residual:
        check_residual(info, finding_types)
        return ResidualRun(inputs, needs.residual)
    if needs.gradients:
        return GradientRun(inputs)
    return inputs


__all__ = ["EncoderDecoderRun", "GradientRun", "ImageRun", "InterventionRun", "MeasurementKind", "ResidualRun", "TextRun", "choose_kind"]
