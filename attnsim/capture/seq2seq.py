"""Capture of encoder–decoder models (T5, BART, Marian): three attention blocks, one teacher-forced forward pass.

Per layer, the same rule as the single-stream capture (:mod:`attnsim.capture.hooks`): the per-head
outputs Z are read by a forward pre-hook on each attention's output projection W_O, whose input is
the heads' outputs concatenated (B, T, H·d_head), under any attention implementation:

- encoder self-attention: Z (batch, head, source_pos, d_head), probabilities (batch, head, source_pos, source_pos);
- decoder self-attention (causal): Z (batch, head, target_pos, d_head), probabilities (batch, head, target_pos, target_pos),
  zero above the diagonal;
- decoder cross-attention: Z (batch, head, target_pos, d_head), probabilities (batch, head, target_pos, source_pos):
  target rows × source columns.

Probabilities come from the model's ``output_attentions`` (``encoder_attentions``, ``decoder_attentions``,
``cross_attentions``), which needs eager attention. T5 does not divide scores by √d_head and adds a
learned relative position bias; BART and Marian scale by 1/√d_head. Neither changes where Z is read.

Teacher forcing: the decoder's input is the target shifted right by one, starting with the model's
``decoder_start_token_id`` (:func:`shift_right`), so row i of every decoder map is the step that
*predicts* target token i (the convention of alignment extraction from attention, e.g. Bahdanau et
al. 2015's figures; Garg et al. 2019). Padding of the source and the target is masked.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import pytorch_lightning as pl
import torch
import torch.nn as nn

from attnsim.capture.architectures import Architecture, Seq2SeqArchitecture
from attnsim.capture.hooks import capture_heads
from attnsim.errors import ModelError

STREAMS = ("encoder", "decoder", "cross")
"""The three attention blocks of an encoder–decoder: encoder self-attention, decoder self-attention, cross-attention."""


def encoder_shape(config: Any) -> Tuple[int, int, int]:
    """(layers, heads, d_head) of the encoder of a T5, BART or Marian config."""
    if config.model_type == "t5":
        return int(config.num_layers), int(config.num_heads), int(config.d_kv)
    return int(config.encoder_layers), int(config.encoder_attention_heads), int(config.d_model) // int(config.encoder_attention_heads)


def decoder_shape(config: Any) -> Tuple[int, int, int]:
    """(layers, heads, d_head) of the decoder of a T5, BART or Marian config (its self- and cross-attention share them)."""
    if config.model_type == "t5":
        layers = getattr(config, "num_decoder_layers", None) or config.num_layers
        return int(layers), int(config.num_heads), int(config.d_kv)
    return int(config.decoder_layers), int(config.decoder_attention_heads), int(config.d_model) // int(config.decoder_attention_heads)


def _stream(arch: Seq2SeqArchitecture, stream: str) -> Architecture:
    """The single-stream view of one attention block, for :func:`~attnsim.capture.hooks.capture_heads` (which reads ``layers`` and ``output``)."""
    layers = arch.encoder_layers if stream == "encoder" else arch.decoder_layers
    output = {"encoder": arch.encoder_self, "decoder": arch.decoder_self, "cross": arch.cross}[stream]
    return Architecture(layers, "", "", "", output)


@dataclass
class Seq2SeqCapture:
    """Per-layer tensors of one teacher-forced forward pass of an encoder–decoder.

    Attributes:
        z: stream (``encoder``, ``decoder``, ``cross``) -> L tensors (batch, head, pos, d_head), Z before W_O;
            ``pos`` is the source position for ``encoder``, the target position otherwise.
        attention: stream -> L tensors of probabilities: ``encoder`` (batch, head, source, source), ``decoder``
            (batch, head, target, target), ``cross`` (batch, head, target, source); None when not requested.
    """

    z: Dict[str, Tuple[torch.Tensor, ...]]
    attention: Optional[Dict[str, Tuple[torch.Tensor, ...]]] = None


def shift_right(target_ids: torch.Tensor, start_id: int, pad_id: int) -> torch.Tensor:
    """Teacher-forcing decoder inputs: ``[start, y_0, ..., y_{T-2}]`` for targets ``[y_0, ..., y_{T-1}]`` (batch, T).

    Position i of the decoder then predicts ``y_i``. Padding (right-padded targets) stays ``pad_id``.
    """
    shifted = target_ids.new_full(target_ids.shape, pad_id)
    shifted[:, 1:] = target_ids[:, :-1]
    shifted[:, 0] = start_id
    return shifted


def _start_token(config: Any) -> Tuple[int, int]:
    start = getattr(config, "decoder_start_token_id", None)
    pad = getattr(config, "pad_token_id", None)
    if start is None:
        raise ModelError(
            f"The {config.model_type} model's config has no decoder_start_token_id, so attnsim cannot build the decoder's input. Set it in the model's config.json."
        )
    return int(start), int(pad if pad is not None else start)


def forward_seq2seq(model: nn.Module, arch: Seq2SeqArchitecture, batch: Dict[str, torch.Tensor], attention: bool) -> Seq2SeqCapture:
    """Run one teacher-forced forward pass and capture Z (and probabilities) of the three attention blocks.

    Args:
        model: a loaded T5, BART or Marian model (``AutoModel``), eval mode.
        arch: its :class:`~attnsim.capture.architectures.Seq2SeqArchitecture`.
        batch: ``input_ids``, ``attention_mask`` (batch, S) of the source; ``target_ids``, ``target_mask``
            (batch, T) of the target (:mod:`attnsim.data.translation`).
        attention: also return the probabilities (needs eager attention).

    Returns:
        :class:`Seq2SeqCapture`, every tensor's shape checked.

    Raises:
        ModelError: no ``decoder_start_token_id``; probabilities requested but none returned (SDPA or flash);
        a block's capture missed a layer or has a wrong shape (names the block, the layer and both shapes).
    """
    config = model.config
    start, pad = _start_token(config)
    source, target = batch["input_ids"], batch["target_ids"]
    inputs = {
        "input_ids": source,
        "attention_mask": batch["attention_mask"],
        "decoder_input_ids": shift_right(target, start, pad),
        "decoder_attention_mask": batch["target_mask"],  # position i holds y_{i-1}: real wherever y_i is
    }
    enc_layers, enc_heads, _ = encoder_shape(config)
    dec_layers, dec_heads, _ = decoder_shape(config)
    heads = {"encoder": enc_heads, "decoder": dec_heads, "cross": dec_heads}
    layers = {"encoder": enc_layers, "decoder": dec_layers, "cross": dec_layers}
    with ExitStack() as stack:
        stores = {s: stack.enter_context(capture_heads(model, _stream(arch, s), heads[s])) for s in STREAMS}
        outputs = model(**inputs, output_attentions=attention, use_cache=False)
    z = {s: tuple(stores[s]) for s in STREAMS}
    probs = None
    if attention:
        names = {"encoder": "encoder_attentions", "decoder": "decoder_attentions", "cross": "cross_attentions"}
        probs = {}
        for s in STREAMS:
            maps = getattr(outputs, names[s], None)
            if not maps or any(m is None for m in maps):
                impl = getattr(config, "_attn_implementation", "?")
                raise ModelError(
                    f"The model returned no {names[s]} (attention implementation '{impl}'). Load it with model.attn_implementation=eager; SDPA and flash attention cannot return them."
                )
            probs[s] = tuple(maps)
    size, s_len, t_len = int(source.shape[0]), int(source.shape[1]), int(target.shape[1])
    rows = {"encoder": s_len, "decoder": t_len, "cross": t_len}
    cols = {"encoder": s_len, "decoder": t_len, "cross": s_len}
    for s in STREAMS:
        if len(z[s]) != layers[s]:
            raise ModelError(
                f"Captured {len(z[s])} layers of the {s} attention's per-head outputs but the model has {layers[s]}; the architecture table does not match this model."
            )
        for index, tensor in enumerate(z[s]):
            if tuple(tensor.shape[:3]) != (size, heads[s], rows[s]):
                raise ModelError(
                    f"{s} attention, layer {index}: Z has shape {tuple(tensor.shape)} but attnsim expects ({size}, {heads[s]}, {rows[s]}, d_head) (batch, heads, tokens, d_head)."
                )
        for index, tensor in enumerate((probs or {}).get(s, ())):
            expected = (size, heads[s], rows[s], cols[s])
            if tuple(tensor.shape) != expected:
                raise ModelError(
                    f"{s} attention, layer {index}: the probabilities have shape {tuple(tensor.shape)} but attnsim expects {expected} (batch, heads, query, key)."
                )
    return Seq2SeqCapture(z, probs)


def load_pair_tokenizer(info: Any, length: int) -> Any:
    """The tokenizer of an encoder–decoder: its fast tokenizer when it has one, else its slow one.

    Marian's tokenizer (two SentencePiece models, source and target) exists only as a slow
    tokenizer; a slow tokenizer gives no character offsets, so figures label its tokens by their
    pieces instead of the text under them.

    Args:
        info: the inspected model (:class:`~attnsim.capture.load.ModelInfo`).
        length: the longest side of a pair, in tokens (``max(corpus.seq_len, corpus.target_len)``).

    Raises:
        ModelError: no tokenizer can be loaded (e.g. Marian's without the ``sentencepiece`` package).
        ConfigError: ``length`` exceeds the tokenizer's ``model_max_length``.
    """
    from transformers import AutoTokenizer

    from attnsim.errors import ConfigError

    try:
        tokenizer = AutoTokenizer.from_pretrained(info.path, local_files_only=True)
    except (OSError, ValueError, ImportError) as exc:
        raise ModelError(
            f"No tokenizer could be loaded from '{info.name}' ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}). "
            "The model directory needs its tokenizer files; Marian's SentencePiece tokenizer also needs the sentencepiece package (pip install sentencepiece)."
        ) from exc
    limit = tokenizer.model_max_length
    if limit and limit < 1_000_000 and length > limit:
        raise ConfigError(
            f"corpus.seq_len / corpus.target_len of {length} tokens is larger than the {limit} tokens the tokenizer of '{info.name}' allows (model_max_length). Set both to at most {limit}."
        )
    return tokenizer


class Seq2SeqBatch:
    """What :class:`Seq2SeqCaptureModule` hands the findings per batch: the capture and the batch it came from.

    Attributes:
        capture: :class:`Seq2SeqCapture`.
        batch: the batch dict (:func:`attnsim.data.translation.collate_pairs`).
        batch_size: number of pairs.
    """

    def __init__(self, capture: Seq2SeqCapture, batch: Dict[str, Any]):
        self.capture = capture
        self.batch = batch
        self.batch_size = int(batch["input_ids"].shape[0])

    def release(self) -> None:
        """Drop the tensors once every finding has read them."""
        self.__dict__.clear()


class Seq2SeqCaptureModule(pl.LightningModule):
    """The LightningModule of an encoder–decoder run: ``predict_step`` returns a :class:`Seq2SeqBatch`.

    Args:
        model: the loaded encoder–decoder (eval mode).
        info: its :class:`~attnsim.capture.load.ModelInfo` (``info.arch`` a Seq2SeqArchitecture).
        needs_attention: capture probabilities as well as per-head outputs.
    """

    def __init__(self, model: nn.Module, info: Any, needs_attention: bool):
        super().__init__()
        self.model = model
        self.info = info
        self.needs_attention = needs_attention

    def forward(self, batch: Dict[str, Any]) -> Seq2SeqCapture:
        return forward_seq2seq(self.model, self.info.arch, batch, self.needs_attention)

    def predict_step(self, batch: Dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> Seq2SeqBatch:
        return Seq2SeqBatch(self(batch), batch)

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        outputs.release()  # every finding callback has folded the batch in (Lightning calls the module last)


__all__ = [
    "STREAMS",
    "Seq2SeqCapture",
    "Seq2SeqBatch",
    "Seq2SeqCaptureModule",
    "decoder_shape",
    "encoder_shape",
    "forward_seq2seq",
    "load_pair_tokenizer",
    "shift_right",
]
