"""Gradient runs (``gradient_maps``): a classifier (a causal LM: its LM head) under the gradient capture."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from attnsim.keys import Tag
from attnsim.workflows.kinds.base import MeasurementKind


class GradientRun(MeasurementKind):
    """The inputs of a text or image run, measured by :class:`~attnsim.capture.gradients.GradientModule` with gradients on.

    Args:
        inner: the kind whose inputs and model check are used (:class:`~attnsim.workflows.kinds.text.TextRun`
            or :class:`~attnsim.workflows.kinds.images.ImageRun`).
    """

    name = "gradients"
    inference_mode = False  # predict_step enables gradients (under no_grad, not inference_mode)

    def __init__(self, inner: MeasurementKind):
        self.inner = inner

    def inputs(self, cfg: Any, info: Any) -> Tuple[Any, Any]:
        """The inner kind's tokenizer and corpus."""
        return self.inner.inputs(cfg, info)

    def load(self, prepared: Any, findings: List[Any]) -> Tuple[Any, Dict[str, str]]:
        """Load the classifier (with a seeded head of ``maps.num_labels`` classes where it has none) and wrap it.

        Raises:
            ConfigError: ``maps.target_class`` is not a class of the classifier.
            ModelError: the weights cannot be loaded or do not match the image token layout.
        """
        import torch

        from attnsim.capture.gradients import GradientModule, classes, load_classifier
        from attnsim.errors import ConfigError
        from attnsim.findings.base import view_factory
        from attnsim.stats.pairs.kernels import path_name as statistics_path

        cfg, info = prepared.cfg, prepared.info
        model, model_tags = load_classifier(info, cfg.model.init, cfg.seed, cfg.maps.num_labels, getattr(torch, cfg.model.dtype))
        target, n_classes = cfg.maps.target_class, classes(model, info)
        if target is not None and target >= n_classes:
            what = "token ids in the vocabulary of the causal LM" if info.causal else "classes"
            raise ConfigError(f"Config key 'maps.target_class' is {target} but the classifier has {n_classes} {what} (0..{n_classes - 1}).")
        model_tags[Tag.TARGET_CLASS.value] = "predicted" if target is None else str(target)
        module = GradientModule(model, info, cfg.model.vector, view_factory(findings, cfg.stats), target)
        model_tags[Tag.STATISTICS_PATH.value] = statistics_path()
        self.inner.check_model(model, prepared.corpus)
        return module, model_tags

    def __repr__(self) -> str:
        return f"GradientRun({self.inner!r})"


__all__ = ["GradientRun"]
