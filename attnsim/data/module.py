"""LightningDataModule serving windows as batches of tensors, and :class:`Batch`, the batch's keys and shapes."""

from __future__ import annotations

import functools
from typing import Any, List, Optional, Sequence, Tuple, TypedDict

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader


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
        earlier_position: (B, T) int64 position of each token's most recent earlier occurrence in its
            window, -1 where it has none (``corpus.source=repeated_tokens``: p - repeat_length from the
            second copy on; see :mod:`attnsim.data.repeated`).
    """

    texts: List[Optional[str]]
    unknown_mask: torch.Tensor
    pixel_values: torch.Tensor
    images: torch.Tensor
    positions: torch.Tensor
    earlier_position: torch.Tensor


def collate_windows(items: Sequence[Tuple[int, Any]], unk_token_id: Optional[int] = None) -> Batch:
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
    if windows and all(w.earlier_position is not None for w in windows):
        batch["earlier_position"] = stack("earlier_position", torch.long)
    if unk_token_id is not None:
        batch["unknown_mask"] = (batch["input_ids"] == unk_token_id) & batch["attention_mask"].bool()
    return batch


class ShardSampler(torch.utils.data.Sampler):
    """The corpus positions one process of a distributed predict reads: a contiguous block, never padded.

    Lightning's default (``torch.utils.data.DistributedSampler``) pads the last batch by repeating
    windows so that every rank gets the same number, and the repeats would enter the statistics
    twice. Predict needs no equal shards, so this sampler splits the ``ceil(length / batch_size)``
    batches of a single-process run into ``world_size`` contiguous blocks whose batch counts
    differ by at most one (rank r reads batches ``[ceil(r*n/world_size), ceil((r+1)*n/world_size))``):
    every window is read by exactly one rank, in corpus order, in the same batches as in one
    process (so per-batch float32 sums are the same), and rank 0 reads the corpus's first windows
    (the examples drawn in figures). A rank may get no window when there are fewer batches than ranks.

    Args:
        length: number of windows in the corpus.
        rank: this process's global rank, 0..world_size-1.
        world_size: number of processes (devices × nodes).
        batch_size: windows per batch (``trainer.batch_size``); shards start on a batch boundary.

    Raises:
        ValueError: ``rank`` is not in ``0..world_size-1``, or ``batch_size`` < 1.
    """

    def __init__(self, length: int, rank: int = 0, world_size: int = 1, batch_size: int = 1):
        if world_size < 1 or not 0 <= rank < world_size or batch_size < 1:
            raise ValueError(f"ShardSampler: rank {rank} is not in 0..{world_size - 1}, or batch size {batch_size} < 1")
        batches = -(-length // batch_size)
        # ceil: the first ranks take the odd batches, so rank 0 reads the first window whenever there is one
        self.start = min(length, -(-rank * batches // world_size) * batch_size)
        self.stop = min(length, -(-(rank + 1) * batches // world_size) * batch_size)

    def __iter__(self):
        return iter(range(self.start, self.stop))

    def __len__(self) -> int:
        return self.stop - self.start


def shard_sampler(length: int, trainer: Optional[pl.Trainer], batch_size: int = 1) -> ShardSampler:
    """:class:`ShardSampler` for ``trainer``'s process (the whole corpus without a trainer or with one process).

    The Trainer must be built with ``use_distributed_sampler=False`` (as
    :func:`attnsim.workflows.loop.make_trainer` does) so that Lightning keeps this sampler.
    """
    if trainer is None:
        return ShardSampler(length, batch_size=batch_size)
    return ShardSampler(length, trainer.global_rank, trainer.world_size, batch_size)


class _Indexed(torch.utils.data.Dataset):
    def __init__(self, windows: List[Any]):
        self.windows = windows

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> Tuple[int, Any]:
        return i, self.windows[i]


class WindowDataModule(pl.LightningDataModule):
    """Serves a fixed list of windows (:class:`~attnsim.data.windows.Window`, built by :meth:`attnsim.data.windows.Corpus.datamodule`) in order (no shuffling: order is set when windows are built).

    Under DDP each process serves its own contiguous block of windows, without repeats (:class:`ShardSampler`).
    """

    def __init__(self, windows: List[Any], batch_size: int = 32, num_workers: int = 0, unk_token_id: Optional[int] = None):
        super().__init__()
        self.unk_token_id = unk_token_id
        self.windows = windows
        self.batch_size = batch_size
        self.num_workers = num_workers

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(
            _Indexed(self.windows),
            batch_size=self.batch_size,
            sampler=shard_sampler(len(self.windows), self.trainer, self.batch_size),
            num_workers=self.num_workers,
            collate_fn=functools.partial(collate_windows, unk_token_id=self.unk_token_id),
        )
