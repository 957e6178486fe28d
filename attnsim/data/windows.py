"""Cut documents into fixed-length token windows with sentence ids.

Rule (documented in the README): each document is segmented into sentences
(:func:`attnsim.data.segment.sentence_spans`) and tokenised once with the fast
tokenizer's own character offsets. Its content tokens are cut into
consecutive, non-overlapping chunks of ``seq_len - n_special`` tokens (the
first chunk starts at the document's first sentence; a chunk may end inside a
sentence, whose remaining tokens open the next window). The tokenizer adds its
own special tokens, read from its output (:func:`special_template`): [CLS] ...
[SEP] for BERT, ``<s>`` before the text for Llama-style tokenizers (BOS), none
for GPT-2 and Pythia (nothing is invented), so every window is exactly
``seq_len`` tokens. A document's last chunk, if shorter, is padded at the end
(padding is masked out of every statistic; under a causal mask no real token
can see it) or dropped (``drop_short``). Padding uses the tokenizer's pad
token; a tokenizer without one (GPT-2, Pythia, Llama) pads with its EOS token,
then its UNK token, then id 0 (:func:`pad_token_id`): the id is never read, as
the attention mask is 0 there. Chunks with fewer than ``min_tokens`` content
tokens are never used.

A token's sentence id is the index (within its window, from 0) of the sentence
whose span contains the token's first character; tokens between spans belong
to the sentence before. Special tokens and padding have sentence id -1.

Token labels (figures, explorer): the original text under a token's offsets,
whitespace-stripped (``naïve``, ``café``, ``😃😃`` where the uncased tokenizer
has ``naive``, ``cafe``, ``[UNK]``); special tokens keep the tokenizer's token
(``[CLS]``, ``<s>``, ``[PAD]``). Every tokenizer is read the same way: byte-level
BPE (GPT-2's ``Ġcafé`` spelt ``ĠcafÃ©``) and SentencePiece (``▁café``, byte-fallback
pieces ``<0xC3>``) show the text, never ``Ã©``. A piece that holds only part of a
multi-byte character (``Ã`` + ``©``, ``<0xC3>`` + ``<0xA9>``) has that character's
offsets, so each piece shows the whole character (``é``, ``é``). Tokens with no text
under them, or only whitespace, and windows that kept no text get
:func:`readable_tokens`: the token decoded to text (``Ġcafé`` -> ``café``),
whitespace shown as ``␣`` (space), ``↵`` (newline), ``⇥`` (tab), and bytes that are
not a whole character as ``<0xC3>``. The text is kept only in the windows that are
drawn (``keep_text``): see :func:`token_labels`.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from attnsim.data.corpus import TextItems
from attnsim.data.segment import sentence_spans
from attnsim.data.sources import Document
from attnsim.errors import CorpusError

log = logging.getLogger(__name__)


@dataclass
class Window:
    """One window of exactly ``seq_len`` tokens (arrays of length T).

    A run holds every window of its corpus, so they are stored compactly (about 2 KB at T = 128
    instead of 5 KB as int64); :func:`attnsim.data.module.collate_windows` widens them to int64
    tensors per batch.
    """

    doc_id: str
    input_ids: np.ndarray  # (T,) int32
    attention_mask: np.ndarray  # (T,) int8, 1 for real tokens (specials included), 0 for padding
    special_mask: np.ndarray  # (T,) bool, True for special tokens ([CLS], [SEP], ...)
    sentence_ids: np.ndarray  # (T,) int32, sentence index within the window, -1 for special/padding
    offsets: np.ndarray  # (T, 2) int32 (int64 for a document past 2**31 characters), character span in the document, (0, 0) for special/padding
    label: Optional[str] = None
    # the document text under the content tokens (see text_span), for token labels; only in the windows that are drawn
    text: Optional[str] = None
    # (T,) int32 position of each token's most recent earlier occurrence, -1 if none (corpus.source=repeated_tokens only)
    earlier_position: Optional[np.ndarray] = None


@dataclass
class Corpus(TextItems):
    """The windows of one run and what was read to make them."""

    windows: List[Window]
    seq_len: int
    documents_read: int
    documents_used: int
    reasons: Dict[str, int] = field(default_factory=dict)  # why documents/chunks were not used
    # the tokenizer's unknown token ([UNK]): text it cannot spell; never an identical-token pair
    unk_token_id: Optional[int] = None

    @property
    def content_hash(self) -> str:
        """SHA-256 over every window's token ids, attention mask and sentence ids (hex)."""
        digest = hashlib.sha256()
        digest.update(str(self.seq_len).encode())
        for w in self.windows:
            digest.update(w.input_ids.astype(np.int64).tobytes())
            digest.update(w.attention_mask.astype(np.int64).tobytes())
            digest.update(w.sentence_ids.astype(np.int64).tobytes())
        return digest.hexdigest()

    def datamodule(self, batch_size: int, num_workers: int = 0) -> Any:
        """The windows as a :class:`~attnsim.data.module.WindowDataModule` (unknown tokens marked)."""
        from attnsim.data.module import WindowDataModule

        return WindowDataModule(self.windows, batch_size, num_workers, self.unk_token_id)

    def __len__(self) -> int:
        return len(self.windows)


def text_span(offsets, special_mask) -> Optional[Tuple[int, int]]:
    """Document character span ``[start, end)`` covered by a window's tokens, or None if none has text.

    Args:
        offsets: (T, 2) character offsets into the document (array, tensor or nested list).
        special_mask: (T,) True for special tokens, which are left out.

    :attr:`Window.text` holds ``document[start:end]``; a token's text is
    ``Window.text[s - start : e - start]``.
    """
    offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    has_text = (offs[:, 1] > offs[:, 0]) & ~np.asarray(special_mask, dtype=bool)
    if not has_text.any():
        return None
    return int(offs[has_text, 0].min()), int(offs[has_text, 1].max())


_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")  # SentencePiece byte fallback
_VISIBLE_WHITESPACE = {" ": "␣", "\n": "↵", "\r": "↵", "\t": "⇥"}


def _bytes_marker(error: UnicodeDecodeError) -> tuple:
    # bytes that are not a whole UTF-8 character, written <0xC3> (SentencePiece's notation)
    return "".join(f"<0x{b:02X}>" for b in error.object[error.start : error.end]), error.end


codecs.register_error("attnsim_byte_marker", _bytes_marker)


@functools.lru_cache(maxsize=1)
def _byte_decoder() -> Dict[str, int]:
    """GPT-2's byte-level alphabet read back: symbol -> byte (``Ġ`` -> 0x20, ``Ã`` -> 0xC3)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # the table GPT-2 defined

    return {symbol: byte for byte, symbol in bytes_to_unicode().items()}


def is_byte_level(tokenizer) -> bool:
    """Whether the tokenizer's decoder is (or contains) a byte-level one (GPT-2, RoBERTa, Llama 3, Qwen2...)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    if decoder is None:
        return False
    try:
        state = decoder.__getstate__()  # the decoder's JSON (a Sequence lists its parts)
    except (AttributeError, TypeError):
        return False
    return b'"type":"ByteLevel"' in (state if isinstance(state, bytes) else str(state).encode())


def visible_whitespace(text: str) -> str:
    """``text`` with spaces, newlines and tabs drawn as ``␣``, ``↵``, ``⇥`` (for tokens that are only whitespace)."""
    return "".join(_VISIBLE_WHITESPACE.get(ch, ch) for ch in text)


def token_text(token: str, byte_level: bool) -> bytes:
    """The UTF-8 bytes a vocabulary token stands for.

    Byte-level BPE symbols are mapped back to their bytes (``ĠcafÃ©`` -> `` café``); a
    SentencePiece byte-fallback piece ``<0xC3>`` is the byte 0xC3; ``▁`` is a space; any other
    token (WordPiece ``##ing``, ``[UNK]``) is its own text.
    """
    match = _BYTE_PIECE.match(token)
    if match:
        return bytes([int(match.group(1), 16)])
    if byte_level:
        table = _byte_decoder()
        if all(ch in table for ch in token):
            return bytes(table[ch] for ch in token)
    return token.replace("▁", " ").encode("utf-8")


def readable_tokens(tokenizer, ids: Sequence[int]) -> List[str]:
    """Labels of token ids when no original text is at hand (a window that kept no text, the random
    tokens of ``corpus.source=repeated_tokens``, a head's anchor tokens).

    Args:
        tokenizer: a Hugging Face tokenizer (or anything with ``convert_ids_to_tokens``); None labels by id.
        ids: token ids.

    Returns:
        One label per id: special tokens as the tokenizer writes them (``[CLS]``, ``<s>``); others
        decoded to text (:func:`token_text`) and whitespace-stripped. Consecutive pieces that hold
        the bytes of one multi-byte character (``<0xC3>`` ``<0xA9>``, GPT-2's ``Ã`` ``©``) each show
        that character (``é``, ``é``); bytes that form no whole UTF-8 character with their
        neighbours are written ``<0xC3>``. A token of whitespace only is drawn by
        :func:`visible_whitespace` (``Ġ`` -> ``␣``, ``ĊĊ`` -> ``↵↵``).
    """
    ids = [int(i) for i in ids]
    if tokenizer is None:
        return [str(i) for i in ids]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    byte_level = is_byte_level(tokenizer)
    # None: a special token (or one the tokenizer cannot name), labelled as written
    pieces = [None if token is None or token_id in special else token_text(token, byte_level) for token_id, token in zip(ids, tokens)]
    texts: List[Optional[str]] = [None] * len(ids)
    t = 0
    while t < len(ids):
        if pieces[t] is None:
            t += 1
            continue
        # a piece holding part of a character (a byte-fallback <0xC3>, GPT-2's Ã) is joined with the
        # next pieces (a UTF-8 character has at most 4 bytes) and each piece shows the whole character
        stop = t + 1
        for end in range(t + 1, min(t + 4, len(ids)) + 1):
            if any(p is None for p in pieces[t:end]):
                break
            try:
                b"".join(pieces[t:end]).decode("utf-8")
            except UnicodeDecodeError:
                continue
            stop = end
            break
        text = b"".join(pieces[t:stop]).decode("utf-8", errors="attnsim_byte_marker")
        for k in range(t, stop):
            texts[k] = text
        t = stop
    labels = []
    for token_id, token, text in zip(ids, tokens, texts):
        if text is None:
            labels.append(token if token is not None else str(token_id))
        else:
            labels.append(text.strip() or visible_whitespace(text) or token)
    return labels


def token_labels(tokenizer, input_ids, offsets, special_mask, text: Optional[str]) -> List[str]:
    """Label of each token of one window: the original text under its offsets.

    Args:
        tokenizer: converts ids to token strings (``convert_ids_to_tokens``); None labels by id.
        input_ids: (n,) token ids.
        offsets: (n, 2) character offsets into the document.
        special_mask: (n,) True for special tokens.
        text: the window's :attr:`Window.text` (the document slice at :func:`text_span` of the
            window's full offsets), or None when the window kept no text.

    Returns:
        n labels: the whitespace-stripped text slice of each token (original case and accents, a
        tokenizer's ``[UNK]`` shown as the characters it stands for, each byte piece of a
        multi-byte character shown as that character); the tokenizer's token for special tokens
        and padding; :func:`readable_tokens` for tokens with an empty span or only whitespace
        under them (``Ġ`` -> ``␣``), and for every token when ``text`` is None. Labels may repeat;
        figures place them by position and the explorer appends each position (``café [4]``).
    """
    ids = [int(i) for i in (input_ids.tolist() if hasattr(input_ids, "tolist") else input_ids)]
    fallback = readable_tokens(tokenizer, ids)
    if text is None:
        return list(fallback)
    offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)[: len(ids)]
    special = np.asarray(special_mask, dtype=bool)[: len(ids)]
    span = text_span(offs, special)
    if span is None:
        return list(fallback)
    base = span[0]
    labels = []
    for t, (start, end) in enumerate(offs.tolist()):
        piece = text[start - base : end - base].strip() if end > start and not special[t] and start >= base else ""
        labels.append(piece or fallback[t])
    return labels


def batch_labels(tokenizer, batch: Dict[str, object], index: int, length: Optional[int] = None) -> List[str]:
    """:func:`token_labels` of window ``index`` of a batch (its first ``length`` positions).

    Batches without offsets or window texts (images, or windows built with ``keep_text``
    excluding them) get the tokenizer's tokens.
    """
    ids = batch["input_ids"][index]
    texts = batch.get("texts")
    text = texts[index] if texts is not None and "offsets" in batch else None
    if text is None:
        ids = ids[:length] if length is not None else ids
        return token_labels(tokenizer, ids, [], [], None)

    def host(values):  # tensors (on any device) or arrays
        return values.cpu() if hasattr(values, "cpu") else values

    # the span is computed over the full window, as when the text was kept
    labels = token_labels(tokenizer, host(ids), host(batch["offsets"][index]), host(batch["special_mask"][index]), text)
    return labels[:length] if length is not None else labels


def _token_sentences(offsets: np.ndarray, spans: Sequence[tuple]) -> np.ndarray:
    """Document sentence index of each token: the span holding its first character."""
    starts = np.asarray([s for s, _ in spans], dtype=np.int64)
    return np.clip(np.searchsorted(starts, offsets[:, 0], side="right") - 1, 0, None)


def pad_token_id(tokenizer) -> int:
    """Token id written into padding positions: the tokenizer's pad token, else EOS, else UNK, else 0.

    Decoder tokenizers (GPT-2, Pythia, Llama) often define no pad token; their EOS is the usual
    stand-in. Padding is masked (attention mask 0) and never enters a statistic, so the id only has
    to be a valid token id.
    """
    for name in ("pad_token_id", "eos_token_id", "unk_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None:
            return int(value)
    return 0


def special_template(tokenizer) -> tuple:
    """Special-token ids the tokenizer puts before and after a single sequence (e.g. [CLS] / [SEP]).

    Read from the tokenizer's own output on a one-word text, so every
    post-processor template (BERT, RoBERTa, ...) is honoured.
    """
    probe = tokenizer("a", add_special_tokens=True, return_special_tokens_mask=True)
    ids = np.asarray(probe["input_ids"], dtype=np.int64)
    special = np.asarray(probe["special_tokens_mask"], dtype=bool)
    content = np.flatnonzero(~special)
    if len(content) == 0 or not special[content[-1] + 1 :].all() or not special[: content[0]].all():
        raise CorpusError("This tokenizer does not add special tokens only around the text; it is not supported.")
    return ids[: content[0]], ids[content[-1] + 1 :]


def document_windows(
    doc: Document, tokenizer, seq_len: int, drop_short: bool, min_tokens: int, language: str, reasons: Dict[str, int], keep_text: Optional[int] = None
) -> List[Window]:
    """Windows of one document (see module docstring for the rule).

    Args:
        keep_text: how many of its first windows keep the text they cover (:attr:`Window.text`,
            for token labels); None: all.
    """
    if not doc.text.strip():
        reasons["empty or whitespace-only text"] = reasons.get("empty or whitespace-only text", 0) + 1
        return []
    prefix, suffix = special_template(tokenizer)
    pad_id = pad_token_id(tokenizer)
    capacity = seq_len - len(prefix) - len(suffix)
    # split_special_tokens: a literal "<s>", "</s>", "[SEP]" or "<pad>" in a document is text, tokenized as text, never
    # the tokenizer's special id (which would enter the statistics as content, or as BOS/EOS/PAD)
    encoded = tokenizer(doc.text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False, split_special_tokens=True)
    ids = np.asarray(encoded["input_ids"], dtype=np.int64)
    if len(ids) < min_tokens:
        key = f"fewer than corpus.min_tokens={min_tokens} tokens"
        reasons[key] = reasons.get(key, 0) + 1
        return []
    offsets = np.asarray(encoded["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    offset_dtype = np.int32 if len(doc.text) < 2**31 else np.int64
    spans = sentence_spans(doc.text, language) or [(0, len(doc.text))]
    sentences = _token_sentences(offsets, spans)
    windows: List[Window] = []
    for start in range(0, len(ids), capacity):
        chunk = ids[start : start + capacity]
        if len(chunk) < capacity and drop_short:
            reasons["short tail dropped (corpus.drop_short)"] = reasons.get("short tail dropped (corpus.drop_short)", 0) + 1
            continue
        if len(chunk) < min_tokens:
            key = f"tail under corpus.min_tokens={min_tokens} tokens"
            reasons[key] = reasons.get(key, 0) + 1
            continue
        full = np.concatenate([prefix, chunk, suffix])
        special = np.concatenate([np.ones(len(prefix), bool), np.zeros(len(chunk), bool), np.ones(len(suffix), bool)])
        n = len(full)
        win_ids = np.full(seq_len, pad_id, dtype=np.int32)  # vocabularies are far below 2**31
        win_ids[:n] = full
        attention = np.zeros(seq_len, dtype=np.int8)
        attention[:n] = 1
        special_mask = np.zeros(seq_len, dtype=bool)
        special_mask[:n] = special
        content = np.flatnonzero(~special_mask[:n])
        sent = np.full(seq_len, -1, dtype=np.int32)
        # relabel document sentence indices to 0.. within the window, order kept
        _, local = np.unique(sentences[start : start + len(chunk)], return_inverse=True)
        sent[content] = local
        offs = np.zeros((seq_len, 2), dtype=offset_dtype)
        offs[content] = offsets[start : start + len(chunk)]
        text = None
        if keep_text is None or len(windows) < keep_text:
            span = text_span(offs, special_mask)
            text = doc.text[span[0] : span[1]] if span is not None else None
        windows.append(Window(doc.doc_id, win_ids, attention, special_mask, sent, offs, doc.label, text))
    return windows


def build_corpus(
    documents: Sequence[Document],
    tokenizer,
    seq_len: int,
    limit: Optional[int] = None,
    drop_short: bool = False,
    min_tokens: int = 8,
    shuffle: bool = True,
    seed: int = 0,
    language: str = "en",
    keep_text: Optional[int] = None,
) -> Corpus:
    """Windows of ``seq_len`` tokens from ``documents``, at most ``limit`` of them.

    Documents are visited in a seeded random order (``shuffle``) or as given,
    and cut lazily until ``limit`` windows exist, so a small limit reads few
    documents. The first ``keep_text`` windows (None: all) keep the document
    text they cover, for token labels (:func:`token_labels`): a run passes its
    number of drawn windows, as the text costs about 5 bytes per token.

    Raises:
        CorpusError: ``seq_len`` leaves no room for content, or no document
        yields a window (the message says how many were read and why none was used).
    """
    if not getattr(tokenizer, "is_fast", False):
        raise CorpusError(
            "attnsim needs a fast (Rust) tokenizer for character offsets; the model directory must contain tokenizer.json or a convertible vocabulary."
        )
    prefix, suffix = special_template(tokenizer)
    if seq_len - len(prefix) - len(suffix) < 2:
        raise CorpusError(f"corpus.seq_len={seq_len} leaves no room for text after the special tokens.")
    order = np.arange(len(documents))
    if shuffle:
        order = np.random.default_rng(seed).permutation(len(documents))
    windows: List[Window] = []
    reasons: Dict[str, int] = {}
    read = used = 0
    specials = [t for t in getattr(tokenizer, "all_special_tokens", []) if len(t) > 1]
    literal: Dict[str, int] = {}  # special-token text found in documents: read as text (document_windows)
    for index in order:
        if limit is not None and len(windows) >= limit:
            break
        doc = documents[int(index)]
        read += 1
        for token in specials:
            if token in doc.text:
                literal[token] = literal.get(token, 0) + 1
        keep = None if keep_text is None else max(0, keep_text - len(windows))
        made = document_windows(doc, tokenizer, seq_len, drop_short, min_tokens, language, reasons, keep)
        if made:
            used += 1
            windows.extend(made)
    if limit is not None:
        windows = windows[:limit]
    if literal:
        log.warning(
            "%s: the literal text of the tokenizer's special tokens appears in the corpus; it is tokenized as ordinary text, "
            "not as the special tokens (which only attnsim places, at window edges).",
            ", ".join(f"{token!r} in {n} document(s)" for token, n in literal.items()),
        )
    if not windows:
        why = "; ".join(f"{n} {reason}" for reason, n in reasons.items()) or "no text"
        fixes = []  # only the fixes that can help the reasons seen
        if any("empty" in reason for reason in reasons) or not reasons:
            fixes.append("give documents that hold text (empty and whitespace-only ones are skipped)")
        if any("min_tokens" in reason for reason in reasons):
            fixes.append(f"give documents with at least corpus.min_tokens={min_tokens} tokens, or lower corpus.min_tokens (at least 2)")
        if any("drop_short" in reason for reason in reasons):
            fixes.append("set corpus.drop_short=false to pad a document's short tail instead of dropping it")
        fixes = fixes or [f"give documents with at least corpus.min_tokens={min_tokens} tokens of text"]
        raise CorpusError(f"The corpus yielded no usable window: read {read} document(s), used none ({why}). To fix: {'; '.join(fixes)}.")
    return Corpus(windows, seq_len, read, used, reasons, unk_token_id=getattr(tokenizer, "unk_token_id", None))
