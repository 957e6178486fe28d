"""Vision Transformers on the model side: the image size a model takes, its forward's inputs, its extra tokens.

The token layout (extra tokens and patch grid) is the corpus's
(:mod:`attnsim.data.layout`); this module checks it, and the image size,
against the model.

Image size: the patch grid comes from the processed images' height and width
(the model input), which may differ from ``config.image_size`` when the
model's image processor resizes to another size. :func:`check_image_size`
refuses, before any weights load, a size the model cannot take, and
:func:`vision_inputs` asks ViT and DeiT to resample their position embeddings
(``interpolate_pos_encoding=True``) when the size differs; DINOv2 always
resamples them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Sequence, Tuple

import torch

from attnsim.capture.architectures import Architecture
from attnsim.capture.load import BUILD
from attnsim.data.layout import PatchLabeler, TokenLayout, as_hw
from attnsim.errors import ConfigError, ModelError

if TYPE_CHECKING:
    from attnsim.data.images import ImageCorpus


def check_image_size(config, arch: Architecture, image: Sequence[int]) -> None:  # noqa: ANN001 - a transformers PretrainedConfig
    """Refuse, before any weights load, an image size that the model's forward cannot take.

    Images of ``config.image_size`` always work. Another size works when the model resamples its
    position embeddings to the new patch grid (``arch.interpolation`` ``argument`` or ``always``,
    see :class:`~attnsim.capture.architectures.Architecture`): transformers resamples them
    (bicubic) from a square grid only, so the config's own grid must be square. DINOv2 resamples
    for every non-square image, so a DINOv2 config with a non-square grid cannot run at all.

    Args:
        config: the model's transformers config (``image_size``, ``patch_size``, ``model_type``).
        arch: its :class:`~attnsim.capture.architectures.Architecture`.
        image: (height, width) in pixels of the processed images (the model input).

    Raises:
        ModelError: naming the image size, the model's size and the fix.
    """
    native, patch = as_hw(config.image_size), as_hw(config.patch_size)
    height, width = int(image[0]), int(image[1])
    rows, cols = native[0] // patch[0], native[1] // patch[1]
    if arch.interpolation == "always" and rows != cols:
        raise ModelError(
            f"Model type '{config.model_type}' resamples its position embeddings for every image, and transformers can resample them only "
            f"from a square grid of patches, but its config.image_size {native[0]}x{native[1]} gives {rows}x{cols} patches. Use a model whose config.image_size is square."
        )
    if (height, width) == native:
        return
    fix = (
        f'Make the images {native[0]}x{native[1]}: set "size" in the model\'s preprocessor_config.json to {{"height": {native[0]}, "width": {native[1]}}}, '
        "or remove that file so that attnsim resizes every image to config.image_size."
    )
    if arch.interpolation == "none":
        raise ModelError(
            f"The image processor makes images of {height}x{width} pixels, but model type '{config.model_type}' takes only its config.image_size {native[0]}x{native[1]}: it cannot resample its position embeddings. {fix}"
        )
    if rows != cols:
        raise ModelError(
            f"The image processor makes images of {height}x{width} pixels, not the model's config.image_size {native[0]}x{native[1]}, and transformers can resample "
            f"position embeddings only from a square grid of patches (this model has {rows}x{cols}). {fix}"
        )


def vision_inputs(pixel_values: torch.Tensor, config, arch: Architecture) -> Dict[str, Any]:  # noqa: ANN001
    """The keyword arguments of a Vision Transformer's forward for a batch of images.

    Args:
        pixel_values: (batch, channels, height, width) model input.
        config: the model's transformers config.
        arch: its :class:`~attnsim.capture.architectures.Architecture`.

    Returns:
        ``{"pixel_values": ...}``, plus ``interpolate_pos_encoding=True`` when the images are not
        ``config.image_size`` and the model takes that argument (ViT, DeiT): their position
        embeddings are then resampled to the images' patch grid (DINOv2 always does it). At
        ``config.image_size`` the argument is left out, so the embeddings are used as trained.
    """
    inputs: Dict[str, Any] = {"pixel_values": pixel_values}
    if arch.interpolation == "argument" and tuple(pixel_values.shape[-2:]) != as_hw(config.image_size):
        inputs["interpolate_pos_encoding"] = True
    return inputs


def check_layout(model: torch.nn.Module, layout: TokenLayout) -> None:
    """Check the layout against the loaded model's embedding parameters (cls, distillation and register tokens).

    Raises:
        ModelError: the model's embeddings hold a different number of extra tokens than its config says.
    """
    embeddings = getattr(model.base_model, "embeddings", None)
    if embeddings is None:
        return
    found = 0
    for name in ("cls_token", "distillation_token", "register_tokens"):
        param = getattr(embeddings, name, None)
        if isinstance(param, torch.Tensor):
            found += int(param.shape[1])
    if found and found != layout.n_extra:
        raise ModelError(
            f"The model's embeddings add {found} extra tokens but its config implies {layout.n_extra} ({', '.join(layout.extra)}); "
            "attnsim cannot place the patch grid. Check the model's config.json."
        )


def prepare_images(info, cfg) -> Tuple[PatchLabeler, "ImageCorpus"]:  # noqa: ANN001 - ModelInfo, run config
    """The image corpus of a run and its token labeler, after checking that model and corpus match.

    Raises:
        ConfigError: images with a text model, or a Vision Transformer with a text corpus.
        CorpusError, ModelError: see :func:`attnsim.data.images.build_image_corpus`.
        ModelError: the processed images have a size the model cannot take (:func:`check_image_size`).
    """
    from attnsim.data.images import build_image_corpus

    if not info.arch.vision:
        raise ConfigError(
            f"corpus.source=images needs a Vision Transformer (model types vit, deit, dinov2, dinov2_with_registers); model '{info.name}' is '{info.model_type}'. Set model.path to a ViT directory, or use a text corpus."
        )
    if cfg.corpus.source != "images":
        raise ConfigError(
            f"Model '{info.name}' is a Vision Transformer ('{info.model_type}'); it needs corpus.source=images (corpus.path: an image file or directory, or empty for scikit-image's sample photographs)."
        )
    c = cfg.corpus
    corpus = build_image_corpus(None if info.path == BUILD else info.path, info.config, c.path, c.limit, c.shuffle, cfg.seed)
    check_image_size(info.config, info.arch, corpus.layout.image)  # before any weights load
    return corpus.labeler, corpus


__all__ = ["check_image_size", "vision_inputs", "check_layout", "prepare_images"]
