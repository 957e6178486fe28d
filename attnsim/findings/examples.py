"""Keep the first few windows' matrices for figures (a fixed, small amount of memory)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import List, Optional

import pytorch_lightning as pl
import torch

from attnsim.data.windows import batch_labels
from attnsim.plots.common import pool_matrix
from attnsim.stats.pairs.pooled import pooled_example_maps

log = logging.getLogger(__name__)


@dataclass
class Examples:
    """The first E windows of a run.

    Attributes:
        csm: (layer, E, head, T, T) CSM.
        attention: (layer, E, head, T, T) attention probabilities, or None.
        tokens: E lists of T token labels (:func:`attnsim.data.windows.batch_labels`: the original
            text under each token, special tokens by name).
        sentence_ids: (E, T), -1 for special tokens and padding.
        valid: (E, T) bool, tokens entering statistics.
        doc_ids: E document ids.
        labels: E names of the windows, ``<doc id> #<k>`` with k the window's index within its
            document, from 0 in corpus order (``bbc/business/351 #0``, ``bbc/business/351 #1``):
            figure titles and the explorer's example menu.
        blocks: empty when ``csm`` and ``attention`` are the full T x T maps (figures pool them); else,
            per example, the tokens per cell its maps were already pooled over (blockwise path above
            512 tokens, :func:`attnsim.stats.pairs.pooled.pooled_example_maps`): ``csm`` and ``attention``
            are then (layer, E, head, C, C) float64, example e's ``ceil(n / blocks[e])`` leading cells
            filled (n: its real length) and NaN beyond.
    """

    csm: Optional[torch.Tensor] = None
    attention: Optional[torch.Tensor] = None
    tokens: List[List[str]] = field(default_factory=list)
    sentence_ids: Optional[torch.Tensor] = None
    valid: Optional[torch.Tensor] = None
    doc_ids: List[str] = field(default_factory=list)
    labels: List[str] = field(default_factory=list)
    blocks: List[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.doc_ids)

    def label(self, index: int) -> str:
        """Name of example ``index``: :attr:`labels` (``<doc id> #<k>``), else its document id."""
        return self.labels[index] if index < len(self.labels) else str(self.doc_ids[index])

    def real_length(self, index: int) -> int:
        """Number of leading positions of example ``index`` up to its last valid token (0 when none)."""
        valid = self.valid[index].numpy()
        return int(valid.nonzero()[0].max()) + 1 if valid.any() else 0

    def maps(self, kind: str, index: int, max_tokens: int) -> Optional[tuple]:
        """Example ``index``'s ``csm`` or ``attention`` maps over its real positions, pooled by the figures' rule.

        Pooling (:func:`attnsim.plots.common.pool_matrix`): both axes of the n x n maps (n:
        :meth:`real_length`) average-pooled (NaN-aware) over blocks of ``ceil(n / max_tokens)`` tokens.
        Maps recorded pooled (:attr:`blocks`) are returned as recorded, so that both paths give the
        same arrays.

        Returns:
            (pooled (layer, head, c, c) float64 array, tokens per cell, n), or None when ``kind`` was not recorded.
        """
        values = self.csm if kind == "csm" else self.attention
        if values is None:
            return None
        length = self.real_length(index)
        if self.blocks:
            block = self.blocks[index]
            cells = -(-length // block)
            return values[:, index, :, :cells, :cells].double().numpy(), block, length
        pooled, block = pool_matrix(values[:, index, :, :length, :length].double().numpy(), max_tokens)
        return pooled, block, length


def window_label(doc_id: str, index: int, first: int) -> str:
    """``<doc id> #<k>``: the window at corpus position ``index`` of a document whose first window is
    at ``first`` (a document's windows are consecutive in the corpus, so k = index - first, from 0)."""
    return f"{doc_id} #{index - first}"


class ExampleRecorder(pl.Callback):
    """Copies the first ``count`` windows' CSM, attention and labels out of the predict batches."""

    def __init__(self, count: int, tokenizer=None, max_tokens: Optional[int] = None):  # noqa: ANN001
        """``max_tokens`` (``plots.max_tokens``): windows the batch view makes no T x T example maps of
        (the blockwise path above 512 tokens) are recorded pooled to at most this many cells per axis,
        block by block (:attr:`Examples.blocks`); None: such windows are not recorded."""
        super().__init__()
        self.count = count
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.examples = Examples()
        self._first: dict = {}  # doc id -> corpus position of its first window recorded

    def on_predict_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:  # noqa: ANN001
        have = len(self.examples)
        if have >= self.count:
            return
        full = getattr(outputs, "draws_examples", True)
        if not full and self.max_tokens is None:  # the blockwise path above 512 tokens: no T x T examples
            log.info("example figures are not drawn for windows of %d tokens on the blockwise path", outputs.seq_len)
            self.count = 0
            return
        take = min(self.count - have, outputs.batch_size)
        ex = self.examples

        def cat(old: Optional[torch.Tensor], new: torch.Tensor, dim: int) -> torch.Tensor:
            new = new.detach().cpu()
            if new.untyped_storage().nbytes() > new.numel() * new.element_size():  # a slice of a larger tensor (the batch's): copied out
                new = new.clone()  # a tensor of its own (the maps made for the kept windows) is kept as it is: no second copy
            return new if old is None else torch.cat([old, new], dim)

        if full:
            # only the windows kept are computed or stacked: the view never builds the batch's CSM or attention
            ex.csm = cat(ex.csm, outputs.csm_windows(take).transpose(0, 1), 1)  # (L, n, H, T, T)
            if outputs.has_attention:
                ex.attention = cat(ex.attention, outputs.attention_windows(take).transpose(0, 1), 1)
        else:  # long blockwise windows: pooled block by block, no T x T map held
            pooled = pooled_example_maps(outputs, take, self.max_tokens)
            ex.csm = cat(ex.csm, pooled["csm"], 1)
            if pooled["attention"] is not None:
                ex.attention = cat(ex.attention, pooled["attention"], 1)
            ex.blocks.extend(pooled["blocks"])
        ex.sentence_ids = cat(ex.sentence_ids, batch["sentence_ids"][:take], 0)
        ex.valid = cat(ex.valid, outputs.tokens[:take], 0)
        ex.doc_ids.extend(batch["doc_ids"][:take])
        positions = batch.get("index")
        for b in range(take):
            # examples are the first windows of the corpus in order, so a document's first window
            # is recorded before its others (predict serves the windows unshuffled)
            position = int(positions[b]) if positions is not None else have + b
            doc = str(batch["doc_ids"][b])
            ex.labels.append(window_label(doc, position, self._first.setdefault(doc, position)))
        for b in range(take):
            ex.tokens.append(batch_labels(self.tokenizer, batch, b))
