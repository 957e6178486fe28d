"""Clean/corrupted prompt pairs for activation patching: a JSON Lines file, tokenized and batched.

Each line is an object::

    {"clean": "...", "corrupted": "...", "answer": "...", "wrong": "..."}

``clean`` and ``corrupted`` must tokenize to the same number of tokens (a name or a few words swapped),
so that each head's Z can be copied position by position from one run into the other. ``answer`` is
what the clean prompt should produce and ``wrong`` what the corrupted one should; the logit difference
is logit(answer) - logit(wrong) at the read-out position:

- a sequence classifier (`attnsim finetune`): ``answer``/``wrong`` are class names (``config.id2label``),
  read from the class logits;
- a masked LM: the prompts hold the tokenizer's mask token once; ``answer``/``wrong`` are single tokens
  read at the mask;
- a causal LM: ``answer``/``wrong`` are single tokens (write a leading space where the tokenizer marks
  word starts, e.g. " Mary") read at the last token.

``interventions.pairs: bundled`` is ``experiments/patching_pairs.jsonl`` (six BBC-style sentences whose
topic words are swapped to another category's, for the classifier that ``attnsim finetune`` makes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from attnsim.data.corpus import TextItems
from attnsim.errors import CorpusError

BUNDLED_PAIRS = "bundled"
BUNDLED_FILE = "patching_pairs.jsonl"  # in the experiments folder (attnsim.config.package_dir("experiments"))
FIELDS = ("clean", "corrupted", "answer", "wrong")


@dataclass
class PromptPair:
    """One tokenized pair: ``clean``/``corrupted`` token ids of equal length, the read-out ``position``,
    and ``answer``/``wrong`` token or class ids."""

    clean: List[int]
    corrupted: List[int]
    position: int
    answer: int
    wrong: int


def pairs_path(path: str) -> Path:
    """The JSONL file ``path`` (the workflow resolves ``bundled`` to the example file before calling here)."""
    return Path(path).expanduser()


def _single_token(tokenizer: Any, text: str, where: str, key: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise CorpusError(
            f"{where}: '{key}' is {text!r}, which the tokenizer splits into {len(ids)} tokens {tokenizer.convert_ids_to_tokens(ids)}; the logit difference reads one token. Give a single-token answer (with its leading space where the tokenizer marks word starts)."
        )
    return int(ids[0])


def read_prompt_pairs(path: str, tokenizer: Any, kind: str, label2id: Dict[str, int] | None = None) -> List[PromptPair]:
    """Read and tokenize the prompt pairs of ``path`` for a model head of ``kind``.

    Args:
        path: JSONL file.
        tokenizer: the model's tokenizer.
        kind: ``classifier``, ``masked_lm`` or ``causal_lm``.
        label2id: the classifier's class names -> ids (``classifier``).

    Raises:
        CorpusError: a missing file, a line that is not an object with the four fields, prompts of unequal
        token length, an answer that is not a class / not one token, a masked-LM prompt without exactly one
        mask token; each names the line and the fix.
    """
    file = pairs_path(path)
    if not file.is_file():
        raise CorpusError(
            f'Config key \'interventions.pairs\' is \'{path}\', which is not a file. Give a JSON Lines file of {{"clean", "corrupted", "answer", "wrong"}} objects, or bundled for the example file.'
        )
    pairs: List[PromptPair] = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{file}, line {number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{where} is not valid JSON ({exc.msg}). Write one object per line.") from exc
        if not isinstance(item, dict) or any(not isinstance(item.get(k), str) for k in FIELDS):
            raise CorpusError(
                f"{where}: each line needs the text fields {', '.join(FIELDS)}; this one has {sorted(item) if isinstance(item, dict) else type(item).__name__}."
            )
        clean = tokenizer(item["clean"])["input_ids"]
        corrupted = tokenizer(item["corrupted"])["input_ids"]
        if len(clean) != len(corrupted):
            raise CorpusError(
                f"{where}: the clean prompt has {len(clean)} tokens and the corrupted one {len(corrupted)}; patching copies Z position by position, so both need the same number of tokens. Swap words of equal token length."
            )
        if kind == "classifier":
            labels = label2id or {}
            for key in ("answer", "wrong"):
                if item[key] not in labels:
                    raise CorpusError(f"{where}: '{key}' is {item[key]!r}, not a class of the classifier ({', '.join(labels)}).")
            position, answer, wrong = 0, labels[item["answer"]], labels[item["wrong"]]
        elif kind == "masked_lm":
            mask = tokenizer.mask_token_id
            if mask is None or clean.count(mask) != 1 or corrupted.count(mask) != 1 or clean.index(mask) != corrupted.index(mask):
                raise CorpusError(
                    f"{where}: a masked-LM prompt pair needs the mask token {tokenizer.mask_token!r} exactly once, at the same position in both prompts (the answer is read there)."
                )
            position = clean.index(mask)
            answer, wrong = _single_token(tokenizer, item["answer"], where, "answer"), _single_token(tokenizer, item["wrong"], where, "wrong")
        elif kind == "causal_lm":
            position = len(clean) - 1
            answer, wrong = _single_token(tokenizer, item["answer"], where, "answer"), _single_token(tokenizer, item["wrong"], where, "wrong")
        else:
            raise CorpusError(
                f"Activation patching reads a logit difference, but the model has no head ({kind}). Use a fine-tuned classifier, a masked LM or a causal LM."
            )
        pairs.append(PromptPair(list(clean), list(corrupted), position, answer, wrong))
    if not pairs:
        raise CorpusError(f"{file} holds no prompt pair. Write one JSON object per line.")
    return pairs


def collate_prompt_pairs(items: Sequence[PromptPair], pad_id: int = 0) -> Dict[str, torch.Tensor]:
    """Right-pad a list of pairs to their longest prompt.

    Returns:
        ``clean_ids``, ``corrupted_ids``, ``attention_mask`` (B, T) int64; ``position``, ``answer``,
        ``wrong`` (B,) int64; ``index`` (B,) unused (0).
    """
    length = max(len(p.clean) for p in items)
    clean = torch.full((len(items), length), pad_id, dtype=torch.long)
    corrupted = clean.clone()
    mask = torch.zeros_like(clean)
    for row, pair in enumerate(items):
        n = len(pair.clean)
        clean[row, :n] = torch.tensor(pair.clean)
        corrupted[row, :n] = torch.tensor(pair.corrupted)
        mask[row, :n] = 1
    return {
        "clean_ids": clean,
        "corrupted_ids": corrupted,
        "attention_mask": mask,
        "position": torch.tensor([p.position for p in items]),
        "answer": torch.tensor([p.answer for p in items]),
        "wrong": torch.tensor([p.wrong for p in items]),
    }


class PromptPairDataModule(pl.LightningDataModule):
    """Serves prompt pairs in file order, ``batch_size`` at a time (:func:`collate_prompt_pairs`)."""

    def __init__(self, pairs: List[PromptPair], batch_size: int = 8, pad_id: int = 0):
        super().__init__()
        self.pairs = pairs
        self.batch_size = batch_size
        self.pad_id = pad_id

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.pairs, batch_size=self.batch_size, shuffle=False, collate_fn=lambda items: collate_prompt_pairs(items, self.pad_id))


@dataclass
class PromptPairCorpus(TextItems):
    """The prompt pairs of a patching run, in the shape run tags and dataset inputs read from a corpus.

    Attributes:
        windows: the :class:`PromptPair` s.
        seq_len: the longest prompt's tokens.
        documents_used: number of pairs.
        content_hash: SHA-256 of the JSONL file's bytes.
        pad_id: the tokenizer's padding id (0 where it has none), for batches of prompts of several lengths.
    """

    windows: List[PromptPair]
    seq_len: int
    documents_used: int
    content_hash: str
    pad_id: int = 0

    def datamodule(self, batch_size: int, num_workers: int = 0) -> PromptPairDataModule:
        """The pairs as a :class:`PromptPairDataModule` (in this process: ``num_workers`` is not used)."""
        return PromptPairDataModule(self.windows, batch_size, self.pad_id)

    def __len__(self) -> int:
        return len(self.windows)


def prompt_pair_corpus(path: str, tokenizer: Any, kind: str, label2id: Dict[str, int] | None = None) -> PromptPairCorpus:
    """:func:`read_prompt_pairs` as a :class:`PromptPairCorpus` (raises what it raises)."""
    import hashlib

    pairs = read_prompt_pairs(path, tokenizer, kind, label2id)
    digest = hashlib.sha256(pairs_path(path).read_bytes()).hexdigest()
    pad = getattr(tokenizer, "pad_token_id", None)
    return PromptPairCorpus(pairs, max(len(p.clean) for p in pairs), len(pairs), digest, int(pad) if pad is not None else 0)
