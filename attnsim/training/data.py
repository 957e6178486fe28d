"""Labelled windows for fine-tuning: a seeded split by document, datasets and a DataModule.

Each window inherits its document's label (BBC News: the category folder),
so all windows of one document fall on the same side of the split and the
validation accuracy measures generalisation to unseen articles.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

from attnsim.data.sources import Document
from attnsim.data.windows import Window
from attnsim.errors import CorpusError


def label_names(documents: Sequence[Document]) -> List[str]:
    """Sorted distinct labels of ``documents``.

    Raises:
        CorpusError: a document has no label, or fewer than two labels exist.
    """
    missing = [d.doc_id for d in documents if d.label is None]
    if missing:
        raise CorpusError(
            f"Fine-tuning needs a label on every document, but {len(missing)} of {len(documents)} have none (first: '{missing[0]}'). "
            "Use corpus.source=bbc (label = category) or a JSON Lines corpus with a 'label' field."
        )
    labels = sorted({str(d.label) for d in documents})
    if len(labels) < 2:
        raise CorpusError(
            f"Fine-tuning a classifier needs at least two labels; the corpus has {labels}. Add documents of another label or widen corpus.categories."
        )
    return labels


def split_documents(documents: Sequence[Document], val_fraction: float, seed: int) -> Tuple[List[Document], List[Document]]:
    """Split by document, stratified by label: ``round(n_label · val_fraction)`` of each label go to validation.

    Each label's documents are permuted with ``numpy.random.default_rng(seed)``
    (one generator, labels in sorted order), so the split depends only on the
    documents, ``val_fraction`` and ``seed``. A label with at least two
    documents keeps at least one on each side.

    Returns:
        (training documents, validation documents), each in source order.

    Raises:
        CorpusError: the validation side would be empty.
    """
    rng = np.random.default_rng(seed)
    by_label: Dict[str, List[int]] = {}
    for index, doc in enumerate(documents):
        by_label.setdefault(str(doc.label), []).append(index)
    val: set = set()
    for label in sorted(by_label):
        members = by_label[label]
        n_val = int(round(len(members) * val_fraction))
        if len(members) >= 2:
            n_val = min(max(n_val, 1), len(members) - 1)
        order = rng.permutation(len(members))
        val.update(members[i] for i in order[:n_val])
    if not val:
        raise CorpusError(
            f"trainer.val_fraction={val_fraction} leaves no validation document among {len(documents)}. Give more documents or a larger trainer.val_fraction."
        )
    train_docs = [d for i, d in enumerate(documents) if i not in val]
    val_docs = [d for i, d in enumerate(documents) if i in val]
    return train_docs, val_docs


class LabelledWindows(Dataset):
    """Windows as ``input_ids`` (T,), ``attention_mask`` (T,) int64 and ``labels`` () int64 class index."""

    def __init__(self, windows: List[Window], label2id: Dict[str, int]):
        self.windows = windows
        self.label2id = label2id

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> Dict[str, torch.Tensor]:
        w = self.windows[i]
        return {
            "input_ids": torch.from_numpy(w.input_ids.astype(np.int64)),
            "attention_mask": torch.from_numpy(w.attention_mask.astype(np.int64)),
            "labels": torch.tensor(self.label2id[str(w.label)], dtype=torch.long),
        }


class ClassificationDataModule(pl.LightningDataModule):
    """Training batches in a seeded shuffled order, validation batches in corpus order.

    Batches are dicts of ``input_ids``/``attention_mask`` (B, T) int64 and ``labels`` (B,) int64.
    """

    def __init__(self, train: List[Window], val: List[Window], label2id: Dict[str, int], batch_size: int, num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.train_set = LabelledWindows(train, label2id)
        self.val_set = LabelledWindows(val, label2id)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed

    def train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(self.seed)
        return DataLoader(
            self.train_set,
            batch_size=self.batch_size,
            shuffle=True,
            generator=generator,
            num_workers=self.num_workers,
            drop_last=len(self.train_set) > self.batch_size,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size, shuffle=False, num_workers=self.num_workers)
