"""Images for Vision Transformers: sources, preprocessing, the image corpus and its DataModule.

Sources (``corpus.source: images``): ``corpus.path`` an image file or a
directory of images (``.png .jpg .jpeg .bmp .gif .tif .tiff .webp``, sorted by
path, sub-directories included), or, without a path, scikit-image's bundled
sample photographs (:data:`SAMPLES`, shipped inside the scikit-image wheel, no
download). Images are converted to RGB (grey levels repeated, alpha dropped).

Preprocessing: when the model directory holds a ``preprocessor_config.json``
its own image processor (``AutoImageProcessor``) is used; otherwise each image
is resized (bilinear) to ``config.image_size`` and scaled to [0, 1], then
normalised with mean 0.5 and standard deviation 0.5 per channel (the ViT
convention). The patch grid follows from the processed image size and the
patch size (:mod:`attnsim.data.layout`): a processor may resize to another
size than ``config.image_size`` (ViT, DeiT and DINOv2 then resample their
position embeddings), and a size the model cannot take is refused before any
weights load (:func:`attnsim.capture.vision.prepare_images`).

A batch holds what every finding expects of a text batch, with image
meanings: ``input_ids`` are token positions 0..T-1 (labels come from
:class:`~attnsim.data.layout.PatchLabeler`), ``attention_mask`` is all
ones, ``special_mask`` marks the extra tokens, ``sentence_ids`` are -1; plus
``pixel_values`` (B, C, H, W), ``images`` (B, H, W, 3) uint8 (the model input
shown as a picture, for overlays) and ``positions`` (T, 2) grid positions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from attnsim.data.layout import PatchLabeler, TokenLayout, token_layout
from attnsim.data.locate import IMAGE_EXTENSIONS, image_files, locate_corpus
from attnsim.data.module import Batch, shard_sampler
from attnsim.errors import CorpusError

SAMPLES = ("astronaut", "camera", "chelsea", "coffee", "coins", "hubble_deep_field", "immunohistochemistry", "moon", "rocket")
EXTENSIONS = IMAGE_EXTENSIONS
_MEAN = 0.5
_STD = 0.5


@dataclass
class ImageItem:
    """One preprocessed image."""

    doc_id: str
    pixel_values: np.ndarray  # (C, H, W) float32, model input
    display: np.ndarray  # (H, W, 3) uint8, the model input as a picture


@dataclass
class ImageCorpus:
    """The images of one run (the image counterpart of :class:`attnsim.data.windows.Corpus`)."""

    windows: List[ImageItem]
    layout: TokenLayout
    documents_read: int
    documents_used: int
    reasons: Dict[str, int] = field(default_factory=dict)
    texts: Dict[str, str] = field(default_factory=dict)

    @property
    def seq_len(self) -> int:
        """T: extra tokens plus patches."""
        return self.layout.seq_len

    @property
    def labeler(self) -> PatchLabeler:
        return PatchLabeler(self.layout)

    @property
    def content_hash(self) -> str:
        """SHA-256 over the layout and every image's pixel values (float32 bytes)."""
        digest = hashlib.sha256()
        digest.update(repr((self.layout.extra, self.layout.grid, self.layout.patch)).encode())
        for item in self.windows:
            digest.update(item.doc_id.encode())
            digest.update(np.ascontiguousarray(item.pixel_values, dtype=np.float32).tobytes())
        return digest.hexdigest()

    @property
    def measured_len(self) -> int:
        """T of the findings' maps: extra tokens plus patches (:class:`~attnsim.data.corpus.MeasuredCorpus`)."""
        return self.seq_len

    def datamodule(self, batch_size: int, num_workers: int = 0) -> "ImageDataModule":
        """The images as an :class:`ImageDataModule`."""
        return ImageDataModule(self, batch_size, num_workers)

    def __len__(self) -> int:
        return len(self.windows)


def _to_rgb(array: np.ndarray) -> np.ndarray:
    """(H, W), (H, W, 1), (H, W, 3) or (H, W, 4) -> (H, W, 3) uint8."""
    if array.dtype != np.uint8:
        scaled = array.astype(np.float64)
        top = scaled.max() if scaled.size else 1.0
        array = np.clip(scaled / (top if top > 1.0 else 1.0) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.shape[2] == 1:
        array = np.repeat(array, 3, axis=2)
    return np.ascontiguousarray(array[:, :, :3])


def sample_images(names: Sequence[str] = SAMPLES) -> List[Tuple[str, Callable[[], np.ndarray]]]:
    """scikit-image's bundled sample photographs as ``(id, loader)`` pairs (``skimage.data.<name>``).

    Raises:
        CorpusError: scikit-image (the extra ``attnsim[vision]``) is not installed.
    """
    try:
        import skimage.data as samples
    except ImportError as exc:
        raise CorpusError(
            "The default images are scikit-image's sample photographs, and scikit-image is not installed: "
            "pip install 'attnsim[vision]' (or set corpus.path to your own images)."
        ) from exc
    return [(f"skimage/{name}", getattr(samples, name)) for name in names]


def _reader(path: Path) -> Callable[[], np.ndarray]:
    def read() -> np.ndarray:
        from PIL import Image

        try:
            with Image.open(path) as image:
                return np.asarray(image.convert("RGB"))
        except (OSError, ValueError) as exc:
            raise CorpusError(f"Cannot read image {path}: {exc}. Remove it or convert it to PNG/JPEG.") from exc

    return read


def file_images(path: Path) -> List[Tuple[str, Callable[[], np.ndarray]]]:
    """An image file, or every image under a directory (sorted), as ``(id, loader)`` pairs.

    Raises:
        CorpusError: the path does not exist, or the directory holds no image file.
    """
    locate_corpus("images", str(path))
    if path.is_file():
        return [(path.name, _reader(path))]
    files = image_files(path)
    return [(str(f.relative_to(path)), _reader(f)) for f in files]


class Preprocessor:
    """Turns an RGB image into the model's ``pixel_values`` and a display picture of the same size.

    Args:
        model_dir: the model directory (its ``preprocessor_config.json`` is used when present), or None.
        config: the model's transformers config (``image_size``, ``num_channels``).
    """

    def __init__(self, model_dir: Optional[str], config):  # noqa: ANN001
        self.config = config
        self.processor = None
        if model_dir and (Path(model_dir) / "preprocessor_config.json").is_file():
            from transformers import AutoImageProcessor

            try:
                self.processor = AutoImageProcessor.from_pretrained(model_dir, local_files_only=True)
            except (OSError, ValueError) as exc:
                raise CorpusError(
                    f"The image processor of {model_dir} cannot be loaded ({str(exc).splitlines()[0]}). Fix or remove its preprocessor_config.json."
                ) from exc
        size = config.image_size
        self.size = (int(size[0]), int(size[1])) if isinstance(size, (list, tuple)) else (int(size), int(size))
        self.channels = int(getattr(config, "num_channels", 3) or 3)

    @property
    def kind(self) -> str:
        """``processor:<class>`` or ``resize``."""
        return f"processor:{type(self.processor).__name__}" if self.processor is not None else "resize"

    def __call__(self, rgb: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """(H0, W0, 3) uint8 -> ((C, H, W) float32 pixel values, (H, W, 3) uint8 display picture)."""
        if self.processor is not None:
            pixels = self.processor(images=[rgb], return_tensors="np")["pixel_values"][0].astype(np.float32)
            return pixels, self._display(pixels)
        from PIL import Image

        resized = np.asarray(Image.fromarray(rgb).resize((self.size[1], self.size[0]), Image.BILINEAR), dtype=np.float32) / 255.0  # (H, W, 3)
        if self.channels == 1:
            resized = resized.mean(-1, keepdims=True)
        pixels = ((resized - _MEAN) / _STD).transpose(2, 0, 1).astype(np.float32)  # (H, W, C) -> (C, H, W)
        return pixels, self._display(pixels)

    def _display(self, pixels: np.ndarray) -> np.ndarray:
        """Undo the normalisation (processor mean/std when known) to show the model input."""
        mean = np.asarray(getattr(self.processor, "image_mean", None) or [_MEAN] * pixels.shape[0], dtype=np.float32)
        std = np.asarray(getattr(self.processor, "image_std", None) or [_STD] * pixels.shape[0], dtype=np.float32)
        if mean.size != pixels.shape[0]:
            mean, std = np.full(pixels.shape[0], _MEAN, np.float32), np.full(pixels.shape[0], _STD, np.float32)
        picture = pixels * std[:, None, None] + mean[:, None, None]  # (C, H, W) in [0, 1]
        return _to_rgb(np.clip(picture.transpose(1, 2, 0) * 255.0 + 0.5, 0, 255).astype(np.uint8))


def build_image_corpus(
    model_dir: Optional[str], config, path: Optional[str] = None, limit: Optional[int] = None, shuffle: bool = False, seed: int = 0
) -> ImageCorpus:  # noqa: ANN001
    """Read, preprocess and lay out the images of a run.

    Args:
        model_dir: model directory (for its image processor), or None for a model built from a config.
        config: the model's transformers config.
        path: image file or directory; None: scikit-image's sample photographs.
        limit: at most this many images (null: all).
        shuffle: visit the images in a seeded random order instead of sorted order.

    Raises:
        CorpusError: no readable image, or images of different sizes after preprocessing.
        ModelError: the model is not a Vision Transformer attnsim can lay out.
    """
    sources = sample_images() if path is None else file_images(Path(path).expanduser())
    order = np.random.default_rng(seed).permutation(len(sources)) if shuffle else np.arange(len(sources))
    preprocess = Preprocessor(model_dir, config)
    items: List[ImageItem] = []
    for index in order:
        if limit is not None and len(items) >= limit:
            break
        doc_id, load = sources[int(index)]
        pixels, display = preprocess(_to_rgb(load()))
        if items and pixels.shape != items[0].pixel_values.shape:
            raise CorpusError(
                f"Image {doc_id} becomes {pixels.shape[1:]} pixels but the first image {items[0].pixel_values.shape[1:]}; the image processor must give one size."
            )
        items.append(ImageItem(doc_id, pixels, display))
    if not items:
        raise CorpusError("No image was read. Give corpus.path with at least one image, or raise corpus.limit.")
    layout = token_layout(config, items[0].pixel_values.shape[1:])
    return ImageCorpus(items, layout, len(items), len(items))


def collate_images(items: Sequence[Tuple[int, ImageItem]], layout: TokenLayout) -> Batch:
    """Stack ``(corpus index, image)`` items into a :class:`~attnsim.data.module.Batch` (keys: the module docstring)."""
    images = [item for _, item in items]
    size, seq_len = len(images), layout.seq_len
    special = layout.special_mask()
    return {
        "pixel_values": torch.from_numpy(np.stack([i.pixel_values for i in images])),
        "images": torch.from_numpy(np.stack([i.display for i in images])),
        "input_ids": torch.arange(seq_len).expand(size, seq_len).clone(),
        "attention_mask": torch.ones(size, seq_len, dtype=torch.long),
        "special_mask": special.expand(size, seq_len).clone(),
        "sentence_ids": torch.full((size, seq_len), -1, dtype=torch.long),
        "offsets": torch.zeros(size, seq_len, 2, dtype=torch.long),
        "positions": layout.positions(),
        "index": torch.tensor([i for i, _ in items], dtype=torch.long),
        "doc_ids": [i.doc_id for i in images],
    }


class _Indexed(torch.utils.data.Dataset):
    def __init__(self, items: List[ImageItem]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Tuple[int, ImageItem]:
        return i, self.items[i]


class _Collate:
    """Picklable collate function bound to a layout (for DataLoader workers)."""

    def __init__(self, layout: TokenLayout):
        self.layout = layout

    def __call__(self, items):  # noqa: ANN001
        return collate_images(items, self.layout)


class ImageDataModule(pl.LightningDataModule):
    """Serves the images of an :class:`ImageCorpus` in order."""

    def __init__(self, corpus: ImageCorpus, batch_size: int = 32, num_workers: int = 0):
        super().__init__()
        self.corpus = corpus
        self.batch_size = batch_size
        self.num_workers = num_workers

    def predict_dataloader(self) -> DataLoader:
        sampler = shard_sampler(len(self.corpus.windows), self.trainer, self.batch_size)  # DDP: each image on one rank only
        return DataLoader(
            _Indexed(self.corpus.windows), batch_size=self.batch_size, sampler=sampler, num_workers=self.num_workers, collate_fn=_Collate(self.corpus.layout)
        )


__all__ = ["SAMPLES", "ImageItem", "ImageCorpus", "Preprocessor", "sample_images", "file_images", "build_image_corpus", "collate_images", "ImageDataModule"]
