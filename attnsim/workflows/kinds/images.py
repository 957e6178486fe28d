"""Image runs: a Vision Transformer's patches through the plain capture."""

from __future__ import annotations

from typing import Any, Tuple

from attnsim.workflows.kinds.text import TextRun


class ImageRun(TextRun):
    """Images measured by the plain capture; token "ids" are positions, labels come from the patch grid."""

    name = "images"

    def __init__(self) -> None:
        super().__init__(validation=False)

    def inputs(self, cfg: Any, info: Any) -> Tuple[Any, Any]:
        """The patch labeler and the :class:`~attnsim.data.images.ImageCorpus`, after checking that model and corpus match.

        Raises:
            ConfigError: images with a text model, or a Vision Transformer with a text corpus.
        """
        from attnsim.capture.vision import prepare_images

        return prepare_images(info, cfg)

    def check_model(self, model: Any, corpus: Any) -> None:
        """Refuse a model whose embeddings do not match the images' token layout (:func:`~attnsim.capture.vision.check_layout`)."""
        from attnsim.capture.vision import check_layout

        check_layout(model, corpus.layout)

    def __repr__(self) -> str:
        return "ImageRun()"


__all__ = ["ImageRun"]
