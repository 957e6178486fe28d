"""The hooks a kind of measurement run fills in (:class:`MeasurementKind`), and the plain capture they share.

A run's kind is chosen once, before any weights load (:func:`attnsim.workflows.kinds.choose_kind`);
:mod:`attnsim.workflows.run` then calls the same hooks whatever the kind: :meth:`~MeasurementKind.inputs`
(tokenizer and corpus), :meth:`~MeasurementKind.prepare` (checks that need the tracking store),
:meth:`~MeasurementKind.load` (the model and its LightningModule) and :meth:`~MeasurementKind.predict`.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from attnsim.keys import Tag

log = logging.getLogger(__name__)


class MeasurementKind:
    """One kind of measurement run: how its inputs are read, its model loaded and its predict run.

    Attributes:
        name: ``text``, ``images``, ``gradients``, ``encoder_decoder`` or ``interventions``.
        examples: whether the run draws example windows (``plots.examples``) beside its statistics
            (encoder–decoder findings keep their own example pairs; interventions' batches are not the capture's).
        inference_mode: whether predict runs under ``torch.inference_mode`` (gradient maps need gradients).
    """

    name: str = ""
    examples: bool = True
    inference_mode: bool = True

    def inputs(self, cfg: Any, info: Any) -> Tuple[Any, Any]:
        """The tokenizer (or the images' token labeler) and the corpus, with no weights loaded.

        Returns:
            ``(tokenizer, corpus)``: the corpus a :class:`~attnsim.data.corpus.MeasuredCorpus`, or None where
            :meth:`prepare` makes it.
        """
        raise NotImplementedError

    def prepare(self, cfg: Any, info: Any, tokenizer: Any, corpus: Any, tracker: Any, finding_types: Sequence[type]) -> Tuple[Optional[Any], Any]:
        """Checks and inputs that need the tracking store (an earlier run), still with no weights loaded.

        Returns:
            ``(setup, corpus)``: what :meth:`load` needs beyond the config (None by default) and the corpus measured.
        """
        return None, corpus

    def load(self, prepared: Any, findings: List[Any]) -> Tuple[Any, Dict[str, str]]:
        """Load the model and wrap it in the run's LightningModule.

        Returns:
            ``(module, model tags)``.
        """
        raise NotImplementedError

    def check_model(self, model: Any, corpus: Any) -> None:
        """Refuse a loaded model that does not fit the corpus (nothing to check by default)."""

    def predict(self, predict: Callable[[], Any], module: Any) -> None:
        """Run ``predict`` (``trainer.predict`` over the corpus): once by default."""
        predict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def make_capture_module(model: Any, info: Any, needs_attention: bool, cfg: Any, findings: List[Any], capture_path: str = "dense") -> Any:
    """The plain capture's LightningModule around ``model`` (the one place a :class:`~attnsim.capture.module.CaptureModule` is constructed).

    Args:
        model: the loaded encoder (:func:`~attnsim.capture.load.load_model`).
        info: its :class:`~attnsim.capture.load.ModelInfo`.
        needs_attention: whether a finding reads attention probabilities.
        cfg: the resolved config (``model.vector``, ``stats``).
        findings: the run's findings, whose per-chunk reducers the injected view factory registers
            (:func:`~attnsim.findings.base.view_factory`: one walk per window source per batch).
        capture_path: ``dense``, ``streamed``, ``blockwise`` or ``recomputed`` (:func:`~attnsim.capture.load.choose_capture_path`).
    """
    from attnsim.capture.module import CaptureModule
    from attnsim.findings.base import view_factory

    factory = view_factory(findings, cfg.stats, capture_path, cfg.capture.block_rows, keep=cfg.plots.examples)
    return CaptureModule(model, info, needs_attention, cfg.model.vector, factory, capture_path=capture_path)


def plain_module(prepared: Any, findings: List[Any]) -> Tuple[Any, Dict[str, str], Any]:
    """Load the model on the run's capture path (dense, streamed, blockwise or recomputed) and wrap it in the plain capture.

    Returns:
        ``(module, model tags, model)``.
    """
    from attnsim.capture.load import choose_capture_path, load_model
    from attnsim.findings.base import Needs
    from attnsim.stats.pairs.kernels import path_name as statistics_path

    cfg, info = prepared.cfg, prepared.info
    needs = Needs.of(findings)
    path = choose_capture_path(
        cfg.capture.path,
        prepared.corpus.seq_len,
        cfg.capture.blockwise_above,
        info,
        needs.attention,
        high_rule=cfg.stats.high_rule,
        without_blockwise=list(needs.without_blockwise),
    )
    if path in ("blockwise", "recomputed"):  # SDPA; queries and keys recorded when a finding reads attention
        from attnsim.capture.queries import register

        model, model_tags = load_model(info, cfg.model.init, cfg.seed, register() if needs.attention else "sdpa", False, cfg.model.dtype)
    elif path == "streamed":  # eager attention handing each layer's maps to the batch's view (chosen only when a finding reads attention)
        from attnsim.capture.streaming import register as register_streaming

        model, model_tags = load_model(info, cfg.model.init, cfg.seed, register_streaming(), False, cfg.model.dtype)
        requested = str(cfg.model.attn_implementation)
        if requested not in ("auto", "eager"):  # as the dense path switches it (load_model): said and tagged, not dropped
            log.warning(
                "attention probabilities are needed: switching attn_implementation %s -> eager (capture.path=streamed runs the model's eager attention)",
                requested,
            )
            model_tags[Tag.ATTN_IMPLEMENTATION_SWITCHED.value] = f"{requested}->eager"
    else:
        model, model_tags = load_model(info, cfg.model.init, cfg.seed, cfg.model.attn_implementation, needs.attention, cfg.model.dtype)
    model_tags[Tag.CAPTURE_PATH.value] = path
    module = make_capture_module(model, info, needs.attention, cfg, findings, path)
    model_tags[Tag.STATISTICS_PATH.value] = statistics_path()
    return module, model_tags, model


__all__ = ["MeasurementKind", "make_capture_module", "plain_module"]
