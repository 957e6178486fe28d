"""Token categories that rollout and gradient-map summaries report mass on.

Text (any tokenizer whose specials surround the text, e.g. BERT ``[CLS] ... [SEP]``):

- ``cls``: the *first token* (position 0): [CLS], RoBERTa's ``<s>``, a decoder's BOS (Llama), or the
  first text token of a decoder whose tokenizer adds no BOS (GPT-2, Pythia) — the token decoders
  use as an "attention sink". For an encoder it is also the readout token.
- ``sep``: every other special token ([SEP], ``</s>``).
- ``punct``: content tokens whose text, without the subword markers ``##``,
  ``Ġ`` and ``▁``, is made only of Unicode punctuation (category P*), e.g. ``.`` ``,`` ``"``.

Images (Vision Transformers):

- ``cls``: the [CLS] token (position 0), the readout token.
- ``extra``: the other extra tokens (DeiT's distillation token, register tokens).

Readout token (the row rollout and gradient maps read out): [CLS] (position 0)
for encoders and images; for a causal (decoder) model the *last* real token,
the only one whose representation has seen the whole window (and the one
whose output predicts the next token).

Rollout never discards entries of *kept* tokens: [CLS] for text; [CLS] and
the distillation token (DeiT's second readout) for images; the first token and
the readout (last) token for a causal model.
"""

from __future__ import annotations

import unicodedata
from typing import Dict, Optional, Tuple

import torch

_MARKERS = ("##", "Ġ", "▁")


def is_punctuation(token: str) -> bool:
    """Whether a token string (subword markers stripped) is made only of Unicode punctuation."""
    for marker in _MARKERS:
        if token.startswith(marker):
            token = token[len(marker) :]
    return bool(token) and all(unicodedata.category(ch).startswith("P") for ch in token)


def punctuation_table(tokenizer) -> torch.Tensor:  # noqa: ANN001 - a Hugging Face tokenizer
    """(vocab,) bool: which token ids are punctuation (:func:`is_punctuation`)."""
    size = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    return torch.tensor([is_punctuation(t or "") for t in tokens], dtype=torch.bool)


class TokenCategories:
    """Category masks of a batch (module docstring).

    Args:
        tokenizer: the run's tokenizer (text) or :class:`~attnsim.data.layout.PatchLabeler` (images).
        vision: inputs are images.
        extra_names: the extra-token names of a ViT (``[CLS]``, ``[DIST]``, ``[REG0]`` ...).
        causal: a decoder-only model: the readout token is the last real token (module docstring).
    """

    def __init__(self, tokenizer=None, vision: bool = False, extra_names: Tuple[str, ...] = (), causal: bool = False):  # noqa: ANN001
        self.vision = vision
        self.causal = bool(causal)
        self.extra_names = tuple(extra_names)
        self.names: Tuple[str, ...] = ("cls", "extra") if vision else ("cls", "sep", "punct")
        self._punct: Optional[torch.Tensor] = None if vision or tokenizer is None else punctuation_table(tokenizer)

    def masks(self, batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """name -> (batch, pos) bool, real tokens only."""
        real = batch["attention_mask"].bool()
        special = batch["special_mask"].bool() & real
        first = torch.zeros_like(real)
        first[:, 0] = real[:, 0]  # the first token, special ([CLS], BOS) or not (GPT-2)
        out = {"cls": first}
        if self.vision:
            out["extra"] = special & ~first
            return out
        out["sep"] = special & ~first
        if self._punct is not None:
            table = self._punct.to(batch["input_ids"].device)
            out["punct"] = table[batch["input_ids"].clamp(0, len(table) - 1)] & real & ~special
        else:
            out["punct"] = torch.zeros_like(real)
        return out

    def keep(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        """(batch, pos) bool tokens whose rollout entries are never discarded."""
        real = batch["attention_mask"].bool()
        keep = torch.zeros_like(real)
        keep[:, 0] = True
        if self.vision and "[DIST]" in self.extra_names:
            keep[:, self.extra_names.index("[DIST]")] = True
        if self.causal:
            keep[torch.arange(real.shape[0], device=real.device), self.readout(batch)] = True
        return keep & real

    def readout(self, batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        """(batch,) int64 position of the readout token: 0 ([CLS]); for a causal model the last real token
        (padding sits at the end of a window, so it is the number of real tokens minus 1)."""
        mask = batch["attention_mask"]
        if self.causal:
            return (mask.long().sum(-1) - 1).clamp_min(0)
        return torch.zeros(mask.shape[0], dtype=torch.long, device=mask.device)

    @property
    def readout_name(self) -> str:
        """How figures name the readout token."""
        return "last token" if self.causal else "[CLS]"


__all__ = ["is_punctuation", "punctuation_table", "TokenCategories"]
