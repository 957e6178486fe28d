"""The ``translation`` corpus: sentence pairs for encoder–decoder models, padded to fixed source/target lengths.

Format: JSON Lines, one object per line with a ``source`` and a ``target`` string (an optional ``id``);
blank lines are skipped. ``corpus.path: null`` reads the bundled example,
``attnsim/data/translation_en_de.jsonl``: 48 short English→German sentence pairs written for attnsim.

Tokenisation uses the tokenizer's own special tokens (``</s>`` after a T5/Marian sentence, ``<s> … </s>``
around a BART one): the source through ``tokenizer(source)``, the target through
``tokenizer(text_target=target)`` (a Marian tokenizer switches to its target vocabulary there). Nothing
is cut: a pair whose source is longer than ``corpus.seq_len`` tokens or whose target is longer than
``corpus.target_len`` is refused, naming its line, before any model loads. Both sides are right-padded
with the tokenizer's pad token to those fixed lengths.

Pairs keep the file's order unless ``corpus.shuffle`` (seeded by ``seed``); the first ``corpus.limit``
are measured.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from attnsim.data.corpus import TextItems
from attnsim.data.locate import locate_corpus
from attnsim.data.module import shard_sampler
from attnsim.data.sources import BinaryFile, _read, check_encoding, clean_text, jsonl_records
from attnsim.data.windows import text_span, token_labels
from attnsim.errors import CorpusError

FIELDS = ("source", "target")
BUNDLED_FILE = "translation_en_de.jsonl"


def bundled_pairs_path() -> Path:
    """Path of the bundled example pairs (English→German, packaged with attnsim)."""
    return Path(str(resources.files(__package__) / BUNDLED_FILE))  # this package: attnsim/data


@dataclass(frozen=True)
class TextPair:
    """One sentence pair: ``pair_id`` (the line's ``id``, else ``file:line``), ``line`` (1-based), ``source``, ``target``."""

    pair_id: str
    line: int
    source: str
    target: str


def read_pairs(path: Optional[str] = None, encoding: Optional[str] = None) -> List[TextPair]:
    """All pairs of a translation JSON Lines file (``path`` None: the bundled example).

    Raises:
        CorpusError: the path does not exist or is a directory, the file is binary, cannot be decoded, holds
            no pair, a line is not a JSON object, lacks ``source`` or ``target``, or either is not a non-empty string.
    """
    if encoding is not None:
        check_encoding(encoding)
    p = locate_corpus("translation", path) or bundled_pairs_path()
    try:
        decoded = _read(p, encoding)
    except BinaryFile:
        raise CorpusError(f"Corpus file '{p}' holds binary data, not text. Point corpus.path at a JSON Lines file of sentence pairs.") from None
    pairs = []
    for lineno, record in jsonl_records(p, decoded.text, "Each line of a translation corpus must be one JSON object with 'source' and 'target' fields."):
        missing = [name for name in FIELDS if not isinstance(record, dict) or name not in record]
        if missing:
            found = list(record) if isinstance(record, dict) else type(record).__name__
            raise CorpusError(
                f"{p}:{lineno} has no field {' or '.join(repr(m) for m in missing)} (found {found}). Each line of a translation corpus needs a 'source' and a 'target' string."
            )
        texts = [clean_text(record[name]) if isinstance(record[name], str) else None for name in FIELDS]
        for name, text in zip(FIELDS, texts):
            if not text or not text.strip():
                raise CorpusError(
                    f"{p}:{lineno}: field '{name}' is {'empty' if isinstance(record[name], str) else 'not a string'}. Give both sides of every pair as non-empty text."
                )
        pairs.append(TextPair(str(record.get("id", f"{p.name}:{lineno}")), lineno, texts[0], texts[1]))
    if not pairs:
        raise CorpusError(f"Corpus file '{p}' holds no sentence pair (it is empty or blank). Give one JSON object with 'source' and 'target' per line.")
    return pairs


@dataclass
class PairCorpus(TextItems):
    """Tokenised, padded sentence pairs: the corpus of an encoder–decoder run.

    Attributes:
        pairs: the text pairs measured, in order.
        source_ids, source_mask, source_special: (N, S) int64 / int64 / bool, S = ``seq_len``.
        target_ids, target_mask, target_special: (N, T) int64 / int64 / bool, T = ``target_len``.
        seq_len: S, source tokens per pair (padding included).
        target_len: T, target tokens per pair (padding included).
        documents_read: pairs in the file; documents_used: pairs measured.
    """

    pairs: List[TextPair]
    source_ids: np.ndarray
    source_mask: np.ndarray
    source_special: np.ndarray
    target_ids: np.ndarray
    target_mask: np.ndarray
    target_special: np.ndarray
    seq_len: int
    target_len: int
    documents_read: int
    documents_used: int
    reasons: Dict[str, int] = field(default_factory=dict)
    source_offsets: Optional[np.ndarray] = None  # (N, S, 2) character offsets into each source text (zeros without a fast tokenizer)
    target_offsets: Optional[np.ndarray] = None  # (N, T, 2) into each target text

    @property
    def content_hash(self) -> str:
        """SHA-256 over both lengths and every pair's token ids and masks (hex)."""
        digest = hashlib.sha256(f"{self.seq_len}/{self.target_len}".encode())
        for array in (self.source_ids, self.source_mask, self.target_ids, self.target_mask):
            digest.update(np.ascontiguousarray(array, dtype=np.int64).tobytes())
        return digest.hexdigest()

    @property
    def measured_len(self) -> int:
        """T of the findings' maps: the target length (the decoder's positions; :class:`~attnsim.data.corpus.MeasuredCorpus`)."""
        return self.target_len

    def datamodule(self, batch_size: int, num_workers: int = 0) -> "PairDataModule":
        """The pairs as a :class:`PairDataModule`."""
        return PairDataModule(self, batch_size, num_workers)

    def __len__(self) -> int:
        return len(self.pairs)


def _encode(tokenizer: Any, texts: Sequence[str], target: bool) -> Tuple[List[List[int]], List[List[Tuple[int, int]]]]:
    """Token ids and character offsets of each text (offsets empty without a fast tokenizer)."""
    key = "text_target" if target else "text"
    fast = bool(getattr(tokenizer, "is_fast", False))
    encoded = tokenizer(**{key: list(texts)}, add_special_tokens=True, return_offsets_mapping=fast)
    offsets = encoded["offset_mapping"] if fast else [[] for _ in texts]
    return encoded["input_ids"], offsets


def pair_labels(tokenizer: Any, ids: Sequence[int], offsets: Any, special: Any, text: str) -> List[str]:
    """Label of each token of one side of a pair: the text under its offsets, else the tokenizer's token
    (:func:`attnsim.data.windows.token_labels`). ``ids``, ``offsets`` (n, 2), ``special`` (n,): the real tokens only."""
    offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    span = text_span(offs, special) if len(offs) else None
    return token_labels(tokenizer, ids, offs, special, text[span[0] : span[1]] if span is not None else None)


def build_pairs(
    pairs: Sequence[TextPair], tokenizer: Any, seq_len: int, target_len: Optional[int] = None, limit: Optional[int] = None, shuffle: bool = False, seed: int = 0
) -> PairCorpus:
    """Tokenise and pad sentence pairs to ``seq_len`` source and ``target_len`` target tokens.

    Args:
        pairs: from :func:`read_pairs`.
        tokenizer: the model's fast tokenizer (its special tokens are used; it needs a pad token).
        seq_len: S, source tokens per pair, specials included.
        target_len: T, target tokens per pair, specials included (None: ``seq_len``).
        limit: most pairs measured (None: all).
        shuffle: shuffle the pairs (seeded by ``seed``) before taking the first ``limit``.

    Raises:
        CorpusError: the tokenizer has no pad token, or a measured pair's source or target is longer than
            S or T tokens (the message names the first such lines, their lengths and the fix).
    """
    target_len = target_len or seq_len
    if tokenizer.pad_token_id is None:
        raise CorpusError("The model's tokenizer has no pad token, so sentence pairs cannot be padded to fixed lengths. Use a tokenizer with a pad token.")
    order = list(range(len(pairs)))
    if shuffle:
        random.Random(seed).shuffle(order)
    chosen = [pairs[i] for i in order[: limit if limit is not None else len(order)]]
    src, src_offsets = _encode(tokenizer, [p.source for p in chosen], target=False)
    tgt, tgt_offsets = _encode(tokenizer, [p.target for p in chosen], target=True)
    too_long: List[Tuple[TextPair, str, int, int]] = []
    for pair, s, t in zip(chosen, src, tgt):
        if len(s) > seq_len:
            too_long.append((pair, "source", len(s), seq_len))
        if len(t) > target_len:
            too_long.append((pair, "target", len(t), target_len))
    if too_long:
        worst = {side: max(n for _, sd, n, _ in too_long if sd == side) for side in FIELDS if any(sd == side for _, sd, _, _ in too_long)}
        listed = "; ".join(f"line {p.line} ({p.pair_id}): {side} has {n} tokens > {cap}" for p, side, n, cap in too_long[:5])
        fix = " and ".join(f"corpus.{'seq_len' if side == 'source' else 'target_len'}={n}" for side, n in worst.items())
        raise CorpusError(
            f"{len(too_long)} side(s) of the sentence pairs are longer than their fixed length and attnsim never cuts a sentence: {listed}. Set {fix} (or more), or shorten those lines."
        )
    n = len(chosen)
    arrays = {}
    for name, seqs, spans, width in (("source", src, src_offsets, seq_len), ("target", tgt, tgt_offsets, target_len)):
        ids = np.full((n, width), tokenizer.pad_token_id, dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        special = np.zeros((n, width), dtype=bool)
        offsets = np.zeros((n, width, 2), dtype=np.int64)
        for row, (seq, span) in enumerate(zip(seqs, spans)):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
            special[row, : len(seq)] = tokenizer.get_special_tokens_mask(seq, already_has_special_tokens=True)
            if len(span):
                offsets[row, : len(seq)] = np.asarray(span, dtype=np.int64).reshape(-1, 2)
        arrays[name] = (ids, mask, special)
        arrays[name + "_offsets"] = offsets
    return PairCorpus(
        list(chosen),
        *arrays["source"],
        *arrays["target"],
        seq_len,
        target_len,
        len(pairs),
        n,
        source_offsets=arrays["source_offsets"],
        target_offsets=arrays["target_offsets"],
    )


_ROWS = (
    ("input_ids", "source_ids", torch.long),
    ("attention_mask", "source_mask", torch.long),
    ("special_mask", "source_special", torch.bool),
    ("target_ids", "target_ids", torch.long),
    ("target_mask", "target_mask", torch.long),
    ("target_special", "target_special", torch.bool),
)


def collate_pairs(items: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Stack pair items (:class:`PairDataset`) into an encoder–decoder batch.

    Returns:
        ``input_ids``, ``attention_mask`` (B, S) int64 and ``special_mask`` (B, S) bool of the source;
        ``target_ids``, ``target_mask`` (B, T) int64 and ``target_special`` (B, T) bool of the target;
        ``index`` (B,) int64 position in the corpus; ``doc_ids`` (B pair ids); ``sources``, ``targets`` (B texts);
        ``source_offsets`` (B, S, 2), ``target_offsets`` (B, T, 2) int64 character offsets into those texts.
    """
    batch: Dict[str, Any] = {key: torch.from_numpy(np.stack([item[key] for item in items])).to(dtype) for key, _, dtype in _ROWS}
    batch["index"] = torch.tensor([item["index"] for item in items], dtype=torch.long)
    batch["doc_ids"] = [item["doc_id"] for item in items]
    batch["sources"] = [item["source"] for item in items]
    batch["targets"] = [item["target"] for item in items]
    batch["source_offsets"] = torch.from_numpy(np.stack([item["source_offsets"] for item in items]))
    batch["target_offsets"] = torch.from_numpy(np.stack([item["target_offsets"] for item in items]))
    return batch


class PairDataset(torch.utils.data.Dataset):
    """Item i of a :class:`PairCorpus`: its rows of every array, its index and its pair id."""

    def __init__(self, corpus: PairCorpus):
        self.corpus = corpus

    def __len__(self) -> int:
        return len(self.corpus)

    def __getitem__(self, i: int) -> Dict[str, Any]:
        item: Dict[str, Any] = {key: getattr(self.corpus, name)[i] for key, name, _ in _ROWS}
        pair = self.corpus.pairs[i]
        item.update(index=i, doc_id=pair.pair_id, source=pair.source, target=pair.target)
        for key in ("source_offsets", "target_offsets"):
            offsets = getattr(self.corpus, key)
            item[key] = (
                offsets[i]
                if offsets is not None
                else np.zeros((getattr(self.corpus, "seq_len" if key == "source_offsets" else "target_len"), 2), dtype=np.int64)
            )
        return item


class PairDataModule(pl.LightningDataModule):
    """Serves a :class:`PairCorpus` in order; under DDP each process its own contiguous block (:class:`~attnsim.data.module.ShardSampler`)."""

    def __init__(self, corpus: PairCorpus, batch_size: int = 32, num_workers: int = 0):
        super().__init__()
        self.corpus = corpus
        self.batch_size = batch_size
        self.num_workers = num_workers

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(
            PairDataset(self.corpus),
            batch_size=self.batch_size,
            sampler=shard_sampler(len(self.corpus), self.trainer, self.batch_size),
            num_workers=self.num_workers,
            collate_fn=collate_pairs,
        )


__all__ = [
    "BUNDLED_FILE",
    "PairCorpus",
    "PairDataModule",
    "PairDataset",
    "TextPair",
    "build_pairs",
    "bundled_pairs_path",
    "collate_pairs",
    "pair_labels",
    "read_pairs",
]
