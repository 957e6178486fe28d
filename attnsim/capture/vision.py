"""Token layout of Vision Transformers: extra tokens and the patch grid.

A ViT turns an image of H x W pixels into a grid of ``(H / patch) x (W /
patch)`` patches, row by row, and puts its *extra tokens* in front of them:
[CLS] for every family, a distillation token for DeiT, and
``config.num_register_tokens`` register tokens for DINOv2 with registers.
The number of extra tokens is read from the model's config and architecture
(its model type and its embedding parameters), never from the square root of
the sequence length: a sequence of 1 + 196 tokens and one of 2 + 196 tokens
have the same grid.

Image size: the patch grid comes from the processed images' height and width
(the model input), which may differ from ``config.image_size`` when the
model's image processor resizes to another size. :func:`check_image_size`
refuses, before any weights load, a size the model cannot take, and
:func:`vision_inputs` asks ViT and DeiT to resample their position embeddings
(``interpolate_pos_encoding=True``) when the size differs; DINOv2 always
resamples them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import torch

from attnsim.capture.architectures import Architecture
from attnsim.errors import ModelError

# model types whose embeddings add a distillation token after [CLS]
_DISTILLED = ("deit",)


def _pair(value) -> Tuple[int, int]:  # noqa: ANN001 - int or (h, w)
    if isinstance(value, (list, tuple)):
        return int(value[0]), int(value[1])
    return int(value), int(value)


@dataclass(frozen=True)
class TokenLayout:
    """Where each token of a ViT sequence comes from.

    Attributes:
        extra: names of the extra tokens, in sequence order before the patches (e.g. ``[CLS]``, ``[DIST]``, ``[REG0]``).
        grid: (rows, cols) of the patch grid.
        patch: (height, width) of a patch in pixels.
        image: (height, width) of the model input in pixels.
    """

    extra: Tuple[str, ...]
    grid: Tuple[int, int]
    patch: Tuple[int, int]
    image: Tuple[int, int]

    @property
    def n_extra(self) -> int:
        return len(self.extra)

    @property
    def seq_len(self) -> int:
        """T = extra tokens + rows x cols patches."""
        return self.n_extra + self.grid[0] * self.grid[1]

    def labels(self) -> List[str]:
        """T token labels: the extra tokens' names, then ``r<row>c<col>`` per patch (0-indexed)."""
        return list(self.extra) + [f"r{r}c{c}" for r in range(self.grid[0]) for c in range(self.grid[1])]

    def positions(self) -> torch.Tensor:
        """(T, 2) float32 (row, col) of each token on the patch grid, in patches; NaN for extra tokens."""
        rows, cols = torch.meshgrid(torch.arange(self.grid[0]), torch.arange(self.grid[1]), indexing="ij")
        grid = torch.stack([rows.reshape(-1), cols.reshape(-1)], -1).float()  # (rows*cols, 2)
        return torch.cat([torch.full((self.n_extra, 2), float("nan")), grid])

    def special_mask(self) -> torch.Tensor:
        """(T,) bool, True for extra tokens."""
        mask = torch.zeros(self.seq_len, dtype=torch.bool)
        mask[: self.n_extra] = True
        return mask


def extra_token_names(config) -> Tuple[str, ...]:  # noqa: ANN001 - a transformers PretrainedConfig
    """Names of the extra tokens a ViT-family model puts before its patches, from its config.

    [CLS] always; ``[DIST]`` for DeiT (distillation token); ``[REG0]`` .. for
    ``config.num_register_tokens`` register tokens (DINOv2 with registers).
    """
    names = ["[CLS]"]
    if config.model_type in _DISTILLED:
        names.append("[DIST]")
    names += [f"[REG{i}]" for i in range(int(getattr(config, "num_register_tokens", 0) or 0))]
    return tuple(names)


def token_layout(config, image_size: Sequence[int] | None = None) -> TokenLayout:  # noqa: ANN001
    """The :class:`TokenLayout` of a ViT-family model for input images of ``image_size`` (default ``config.image_size``).

    Raises:
        ModelError: the config has no image or patch size, or the image is not a whole number of patches.
    """
    if not hasattr(config, "patch_size") or not hasattr(config, "image_size"):
        raise ModelError(f"Model type '{config.model_type}' has no image_size/patch_size in its config; it is not a Vision Transformer attnsim can lay out.")
    patch = _pair(config.patch_size)
    image = _pair(image_size if image_size is not None else config.image_size)
    if image[0] % patch[0] or image[1] % patch[1]:
        raise ModelError(f"Images of {image[0]}x{image[1]} pixels are not a whole number of {patch[0]}x{patch[1]} patches; resize them to a multiple of the patch size.")
    return TokenLayout(extra_token_names(config), (image[0] // patch[0], image[1] // patch[1]), patch, image)


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
    native, patch = _pair(config.image_size), _pair(config.patch_size)
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
        f"Make the images {native[0]}x{native[1]}: set \"size\" in the model's preprocessor_config.json to {{\"height\": {native[0]}, \"width\": {native[1]}}}, "
        "or remove that file so that attnsim resizes every image to config.image_size."
    )
    if arch.interpolation == "none":
        raise ModelError(f"The image processor makes images of {height}x{width} pixels, but model type '{config.model_type}' takes only its config.image_size {native[0]}x{native[1]}: it cannot resample its position embeddings. {fix}")
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
    if arch.interpolation == "argument" and tuple(pixel_values.shape[-2:]) != _pair(config.image_size):
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


class PatchLabeler:
    """Tokenizer stand-in for images: token "ids" are positions 0..T-1 and labels come from the layout.

    It offers what the findings and the example recorder ask of a tokenizer:
    ``convert_ids_to_tokens`` and ``len()``.
    """

    is_fast = False

    def __init__(self, layout: TokenLayout):
        self.layout = layout
        self._labels = layout.labels()

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> List[str]:
        return [self._labels[int(i)] for i in ids]

    def __len__(self) -> int:
        return len(self._labels)


def grid_distance(positions: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Distance on the patch grid of token pairs, for CSM distance statistics on images.

    Args:
        positions: (T, 2) (row, col) per token in patches, NaN for tokens without a grid position.
        rows, cols: (P,) token indices of each pair.

    Returns:
        (P,) int64: Euclidean distance in patches rounded to the nearest integer (half up),
        -1 where either token has no grid position (extra tokens).
    """
    delta = positions[rows] - positions[cols]  # (P, 2)
    distance = delta.pow(2).sum(-1).sqrt()
    out = torch.floor(distance + 0.5)
    return torch.where(torch.isnan(out), torch.full_like(out, -1), out).long()


__all__ = ["TokenLayout", "extra_token_names", "token_layout", "check_image_size", "vision_inputs", "check_layout", "PatchLabeler", "grid_distance"]
