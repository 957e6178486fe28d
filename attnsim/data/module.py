"""LightningDataModule serving windows as batches of tensors."""

from __future__ import annotations

import functools
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from attnsim.data.windows import Window


def collate_windows(items: Sequence[Tuple[int, Window]], unk_token_id: Optional[int] = None) -> Dict[str, object]:
    """Stack ``(corpus index, window)`` items into a batch.

    ``unk_token_id`` (the tokenizer's ``[UNK]``) adds ``unknown_mask`` (B, T) bool, True where a
    real token is the unknown token: different unknown characters share that one id, so the
    statistics never count two of them as identical tokens (README, "repetition").

    Returns a dict with ``input_ids``, ``attention_mask``, ``sentence_ids``
    (B, T) int64, ``special_mask`` (B, T) bool, ``offsets`` (B, T, 2) int64,
    ``index`` (B,) int64 (position in the corpus), ``doc_ids`` (list of str) and
    ``texts`` (list of each window's :attr:`~attnsim.data.windows.Window.text`, None
    where not kept; for :func:`~attnsim.data.windows.batch_labels`).
    """
    indices = [i for i, _ in items]
    windows = [w for _, w in items]

    def stack(name: str, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.stack([getattr(w, name) for w in windows])).to(dtype)

    batch = {
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
