"""Corpus source ``repeated_tokens``: seeded random token sequences, repeated (induction heads).

Olsson et al. 2022, "In-context learning and induction heads" (Transformer Circuits Thread),
measure induction heads on a sequence of random tokens repeated: on the second copy, a head
that attends from a token to the token that *followed* its earlier occurrence is an induction
head. This source builds such windows for any tokenizer.

Rule (README, "Corpus sources"):

- The tokens are drawn from the tokenizer's *ordinary* vocabulary (:func:`ordinary_vocabulary`):
  no special or added token, no bracketed marker (``[unused0]``, ``<0xC3>``), no token that is not
  a whole UTF-8 text (a byte-level BPE piece of half a character), no whitespace-only token.
- Window w draws ``repeat_length`` distinct tokens (without replacement, so every token of a copy
  has exactly one occurrence per earlier copy) with ``numpy.random.default_rng([seed, w])`` and
  holds ``repeats`` copies of them back to back, wrapped in the tokenizer's own special tokens
  (:func:`attnsim.data.windows.special_template`: ``[CLS] ... [SEP]`` for BERT, ``<s> ...`` for
  Llama, none for GPT-2), padded to exactly ``seq_len`` tokens (padding enters no statistic).
  Window w is the same for a given seed whatever ``corpus.limit`` is.
- ``earlier_position`` (T,) int: the position of each token's most recent earlier occurrence
  (p - repeat_length in copies 2, 3, ...), -1 in the first copy, on special tokens and padding.
- Sentence ids: each copy is one sentence (0, 1, ...), so the sentence statistics compare
  pairs within one copy with pairs across copies; specials and padding have -1.
- There is no document text: offsets are (0, 0) and token labels are the tokens decoded
  (:func:`attnsim.data.windows.readable_tokens`).
"""

from __future__ import annotations

from typing import List

import numpy as np

from attnsim.data.windows import Corpus, Window, is_byte_level, special_template, token_text
from attnsim.errors import CorpusError


def ordinary_vocabulary(tokenizer) -> np.ndarray:
    """Sorted int64 ids of the tokenizer's ordinary tokens, from which random sequences are drawn.

    Left out: special tokens and tokens added to the vocabulary (``get_added_vocab``), tokens
    written as bracketed markers (``[unused12]``, ``<0xC3>``, ``<mask>``), tokens that do not
    decode to whole characters (a byte-level piece of a multi-byte character), and tokens that are
    only whitespace (``Ġ``, ``▁``, ``Ċ``).
    """
    size = len(tokenizer)
    excluded = set(getattr(tokenizer, "all_special_ids", ()) or ())
    excluded.update(int(i) for i in (tokenizer.get_added_vocab() or {}).values())
    byte_level = is_byte_level(tokenizer)
    keep = []
    for i, token in enumerate(tokenizer.convert_ids_to_tokens(list(range(size)))):
        if i in excluded or not token or (len(token) > 2 and token[0] + token[-1] in ("[]", "<>")):
            continue
        try:
            text = token_text(token, byte_level).decode("utf-8")
        except UnicodeDecodeError:  # part of a multi-byte character
            continue
        if text.strip():
            keep.append(i)
    return np.asarray(keep, dtype=np.int64)


def repeated_corpus(tokenizer, seq_len: int, windows: int, repeat_length: int = 50, repeats: int = 2, seed: int = 0) -> Corpus:
    """``windows`` windows of ``repeats`` copies of a seeded random sequence of ``repeat_length`` tokens.

    See the module docstring for the rule.

    Args:
        tokenizer: a fast Hugging Face tokenizer (its specials wrap each window).
        seq_len: T, tokens per window, special tokens included.
        windows: number of windows (``corpus.limit``).
        repeat_length, repeats: ``corpus.repeat_length`` and ``corpus.repeats``.
        seed: the run's seed; window w draws from ``numpy.random.default_rng([seed, w])``.

    Returns:
        A :class:`~attnsim.data.windows.Corpus` whose windows carry ``earlier_position``.

    Raises:
        CorpusError: the copies and the tokenizer's special tokens do not fit ``seq_len``, or the
        ordinary vocabulary has fewer than ``repeat_length`` tokens.
    """
    prefix, suffix = special_template(tokenizer)
    n_special = len(prefix) + len(suffix)
    body = repeats * repeat_length
    if body + n_special > seq_len:
        raise CorpusError(
            f"corpus.repeats={repeats} copies of corpus.repeat_length={repeat_length} tokens ({body}) plus the tokenizer's {n_special} special token(s) "
            f"are {body + n_special} tokens, more than corpus.seq_len={seq_len}. Raise corpus.seq_len to at least {body + n_special}, or lower corpus.repeat_length or corpus.repeats."
        )
    if windows < 1:
        raise CorpusError(f"corpus.limit={windows}: corpus.source=repeated_tokens needs at least one window.")
    vocabulary = ordinary_vocabulary(tokenizer)
    if len(vocabulary) < repeat_length:
        raise CorpusError(
            f"The tokenizer has {len(vocabulary)} ordinary tokens, fewer than corpus.repeat_length={repeat_length} distinct tokens per sequence. Lower corpus.repeat_length."
        )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0  # padding is masked out anyway
    start = len(prefix)
    position = np.arange(seq_len)
    made: List[Window] = []
    for w in range(windows):
        sequence = np.random.default_rng([seed, w]).choice(vocabulary, size=repeat_length, replace=False)
        full = np.concatenate([prefix, np.tile(sequence, repeats), suffix])
        n = len(full)
        ids = np.full(seq_len, pad, dtype=np.int32)
        ids[:n] = full
        attention = (position < n).astype(np.int8)
        special = np.zeros(seq_len, dtype=bool)
        special[:start] = True
        special[start + body : n] = True
        content = (position >= start) & (position < start + body)
        sentences = np.where(content, (position - start) // repeat_length, -1).astype(np.int32)
        earlier = np.where(content & (position >= start + repeat_length), position - repeat_length, -1).astype(np.int32)
        offsets = np.zeros((seq_len, 2), dtype=np.int32)
        made.append(Window(f"repeated/{w}", ids, attention, special, sentences, offsets, None, None, earlier_position=earlier))
    return Corpus(made, seq_len, windows, windows, {}, unk_token_id=getattr(tokenizer, "unk_token_id", None))


__all__ = ["ordinary_vocabulary", "repeated_corpus"]
