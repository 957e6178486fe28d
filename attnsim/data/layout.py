"""Token layout of Vision Transformers: extra tokens and the patch grid.

A ViT turns an image of H x W pixels into a grid of ``(H / patch) x (W /
patch)`` patches, row by row, and puts its *extra tokens* in front of them:
[CLS] for every family, a distillation token for DeiT, and
``config.num_register_tokens`` register tokens for DINOv2 with registers.
The number of extra tokens is read from the model's config (its model type
and register count), never from the square root of the sequence length: a
sequence of 1 + 196 tokens and one of 2 + 196 tokens have the same grid. The
loaded model's embedding parameters are checked against it by
:func:`attnsim.capture.vision.check_layout`.

The patch grid comes from the processed images' height and width (the model
input), which may differ from ``config.image_size`` when the model's image
processor resizes to another size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import torch

from attnsim.errors import ModelError

# model types whose embeddings add a distillation token after [CLS]
_DISTILLED = ("deit",)


def as_hw(value) -> Tuple[int, int]:  # noqa: ANN001 - int or (h, w)
    """A size given as one int or (height, width), as (height, width) ints."""
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
        ModelError: the config has no image or patch size, or the image holds no whole patch.
    """
    if not hasattr(config, "patch_size") or not hasattr(config, "image_size"):
        raise ModelError(f"Model type '{config.model_type}' has no image_size/patch_size in its config; it is not a Vision Transformer attnsim can lay out.")
    patch = as_hw(config.patch_size)
    image = as_hw(image_size if image_size is not None else config.image_size)
    # the patch embedding is a convolution of stride patch: a last partial row or column of pixels is left out, as
    # transformers does (DINOv2 with registers at 416 px: 29 x 29 patches of 14, 846 tokens)
    grid = (image[0] // patch[0], image[1] // patch[1])
    if grid[0] < 1 or grid[1] < 1:
        raise ModelError(f"Images of {image[0]}x{image[1]} pixels hold no whole {patch[0]}x{patch[1]} patch; resize them to at least the patch size.")
    return TokenLayout(extra_token_names(config), grid, patch, image)


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


__all__ = ["TokenLayout", "extra_token_names", "token_layout", "PatchLabeler", "as_hw"]
