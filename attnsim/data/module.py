"""LightningDataModule serving windows as batches of tensors, and :class:`Batch`, the batch's keys and shapes."""

from __future__ import annotations

import functools
from typing import List, Optional, Sequence, Tuple, TypedDict

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from attnsim.data.windows import Window


class _BatchKeys(TypedDict):
    """The keys in every batch (:class:`Batch`)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    special_mask: torch.Tensor
    sentence_ids: torch.Tensor
    offsets: torch.Tensor
    index: torch.Tensor
    doc_ids: List[str]


class Batch(_BatchKeys, total=False):
    """One predict batch, as :func:`collate_windows` (text) and :func:`attnsim.data.images.collate_images`
    (images) build it and the capture modules, statistics and findings read it.

    B is the batch size, T the tokens per window (``corpus.seq_len``; for images the extra
    tokens plus the patches). The keys up to ``doc_ids`` are in every batch; the others depend on the corpus.

    Keys:
        input_ids: (B, T) int64 token ids (images: token positions 0..T-1).
        attention_mask: (B, T) int64, 1 on real tokens, 0 on padding.
        special_mask: (B, T) bool, True on special tokens ([CLS], [SEP]; images: the extra tokens).
        sentence_ids: (B, T) int64 sentence index of each token, -1 on special tokens and padding.
        offsets: (B, T, 2) int64 character span of each token in its window's text (images: zeros).
        index: (B,) int64 position of each window in the corpus.
        doc_ids: B document ids (str).
        texts: B window texts, None where not kept (text only; for figure labels).
        unknown_mask: (B, T) bool, True on real tokens that are the tokenizer's [UNK] (text, when it has one).
        pixel_values: (B, C, H, W) float32 processor output (images only).
        images: (B, H, W, 3) uint8 pictures as shown in figures (images only).
        positions: (T, 2) float32 (row, col) of each token on the patch grid, in patches; NaN for extra tokens (images only).
    """

    texts: List[Optional[str]]
    unknown_mask: torch.Tensor
    pixel_values: torch.Tensor
    images: torch.Tensor
    positions: torch.Tensor


def collate_windows(items: Sequence[Tuple[int, Window]], unk_token_id: Optional[int] = None) -> Batch:
    """Stack ``(corpus index, window)`` items into a batch.

    ``unk_token_id`` (the tokenizer's ``[UNK]``) adds ``unknown_mask`` (B, T) bool, True where a
    real token is the unknown token: different unknown characters share that one id, so the
    statistics never count two of them as identical tokens (README, "repetition").

    Returns a :class:`Batch` with ``input_ids``, ``attention_mask``, ``sentence_ids``
    (B, T) int64, ``special_mask`` (B, T) bool, ``offsets`` (B, T, 2) int64,
    ``index`` (B,) int64 (position in the corpus), ``doc_ids`` (list of str) and
    ``texts`` (list of each window's :attr:`~attnsim.data.windows.Window.text`, None
    where not kept; for :func:`~attnsim.data.windows.batch_labels`).
    """
    indices = [i for i, _ in items]
    windows = [w for _, w in items]

    def stack(name: str, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.stack([getattr(w, name) for w in windows])).to(dtype)

    batch: Batch = {
        "input_ids": stack("input_ids", torch.long),
        "attention_mask": stack("attention_mask", torch.long),
        "special_mask": stack("special_mask", torch.bool),
        "sentence_ids": stack("sentence_ids", torch.long),
        "offsets": stack("offsets", torch.long),
        "index": torch.tensor(indices, dtype=torch.long),
        "doc_ids": [w.doc_id for w in windows],
        "texts": [w.text for w in windows],
    }
    if unk_token_id is not None:
        batch["unknown_mask"] = (batch["input_ids"] == unk_token_id) & batch["attention_mask"].bool()
    return batch


class _Indexed(torch.utils.data.Dataset):
    def __init__(self, windows: List[Window]):
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> Tuple[int, Window]:
        return i, self.windows[i]


class WindowDataModule(pl.LightningDataModule):
    """Serves a fixed list of windows in order (no shuffling: order is set when windows are built)."""

    def __init__(self, windows: List[Window], batch_size: int = 32, num_workers: int = 0, unk_token_id: Optional[int] = None):
        super().__init__()
        self.unk_token_id = unk_token_id
        self.windows = windows
        self.batch_size = batch_size
        self.num_workers = num_workers

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(
            _Indexed(self.windows),
            batch_size=self.batch_size,
            shuffle=False,
            num_workers=self.num_workers,
            collate_fn=functools.partial(collate_windows, unk_token_id=self.unk_token_id),
        )
