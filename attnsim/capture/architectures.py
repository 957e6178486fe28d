"""Where each supported architecture keeps its layers and attention projections.

Paths are relative to ``model.base_model`` (so a ``...ForSequenceClassification``
or ``...ForCausalLM`` model works like its base model) and to each layer.

Families: BERT-style encoders, Vision Transformers, and decoder-only (causal)
language models: GPT-2 (``Conv1D`` projections, fused ``c_attn``), GPT-NeoX /
Pythia (fused ``query_key_value``), OPT, Phi and the Llama family (Llama,
Mistral, Qwen2, Gemma, Gemma 3; ``o_proj``, rotary positions, grouped-query attention).
Per-head outputs Z are always read by a pre-hook on the output projection W_O,
whose input is the concatenation of the *query* heads' outputs (grouped-query
attention shares keys and values between query heads, but each query head has
its own Z and attention probabilities).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Dict

import torch
import torch.nn as nn

from attnsim.errors import ModelError


class ModelKind(StrEnum):
    """What an architecture is, declared once by its family; every other fact the workflows need follows from it.

    ``encoder``: a bidirectional text encoder (BERT family); ``vision``: a Vision Transformer, whose inputs
    are images (``pixel_values``), not token ids; ``decoder``: a decoder-only (causal) language model, whose
    token i attends to keys j <= i only; ``encoder_decoder``: T5, BART, Marian (sentence pairs, three
    attention blocks, :mod:`attnsim.capture.seq2seq`).
    """

    ENCODER = "encoder"
    VISION = "vision"
    DECODER = "decoder"
    ENCODER_DECODER = "encoder_decoder"


class _Kinded:
    """The facts that follow from an architecture's declared :class:`ModelKind` (read-only)."""

    kind: ModelKind

    @property
    def vision(self) -> bool:
        """Inputs are images (``pixel_values``), not token ids."""
        return self.kind is ModelKind.VISION

    @property
    def causal(self) -> bool:
        """A decoder-only language model: attention probabilities are lower-triangular; rollout reads out the
        last token's row, gradient maps explain the next token. (An encoder–decoder is not: its decoder
        self-attention is causal, which :mod:`attnsim.capture.seq2seq` handles itself.)"""
        return self.kind is ModelKind.DECODER

    @property
    def seq2seq(self) -> bool:
        """An encoder–decoder (:class:`Seq2SeqArchitecture`), measured on sentence pairs by its own capture path."""
        return self.kind is ModelKind.ENCODER_DECODER


@dataclass(frozen=True)
class Architecture(_Kinded):
    """Module paths and per-family facts of one model family.

    Attributes:
        layers: path of the ``ModuleList`` of layers under ``base_model``.
        query, key, value: paths (within a layer) of the Q, K, V projections, each ``Linear(d_model, H*d_head)``
            (keys and values: ``H_kv*d_head`` under grouped-query attention). Where Q, K and V are one fused
            projection the three paths are that projection's, and ``qkv`` says how its output is laid out.
        output: path (within a layer) of the attention output projection W_O, ``Linear(H*d_head, d_model)``;
            its input is the concatenation of the heads' outputs Z.
        kind: what the family is (:class:`ModelKind`); ``vision``, ``causal`` and ``seq2seq`` follow from it.
        mlp: path (within a layer) of the module whose output is the MLP's write to the residual stream, before any
            residual add or norm (:func:`attnsim.trace`'s ``mlp_out``; DINOv2's is its layer scale, which scales the MLP's
            output); "" where the family declares none.
        final_norm: path (under ``base_model``) of a causal LM's final norm before the unembedding, which the logit
            lens and direct logit attribution read; "" for the other kinds.
        interpolation: how a Vision Transformer takes images of another size than ``config.image_size``
            (its position embeddings are resampled to the new patch grid): ``argument`` (the forward
            takes ``interpolate_pos_encoding=True``; ViT, DeiT), ``always`` (the embeddings always
            resample; DINOv2) or ``none`` (images must be ``config.image_size``).
        sandwich_norm: each block norms its attention's and its MLP's outputs before the residual add (Gemma 3): W_O's
            output is not the attention's write to the residual stream, so the heads' results (Z · W_O[h]) do not add
            up to the stream, and direct logit attribution is refused.
    """

    layers: str
    query: str
    key: str
    value: str
    output: str
    kind: ModelKind = ModelKind.ENCODER
    interpolation: str = "none"
    # Q/K/V projections: "separate" (three modules), "concat" (one fused module whose output is
    # [Q | K | V], each H*d_head wide; GPT-2's c_attn) or "per_head" (one fused module whose output is
    # per head [q_h | k_h | v_h]; GPT-NeoX's query_key_value)
    qkv: str = "separate"
    # the projections are transformers' Conv1D (GPT-2): weight stored (in_features, out_features),
    # the transpose of nn.Linear's; read it through projection_weight
    conv1d: bool = False
    mlp: str = ""
    final_norm: str = ""
    sandwich_norm: bool = False


_BERT = Architecture("encoder.layer", "attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense", mlp="output.dense")
# transformers 5: ViT/DeiT layers sit directly under the base model, with fused-style q/k/v/o projections
_VIT = Architecture(
    "layers", "attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj", kind=ModelKind.VISION, interpolation="argument", mlp="mlp"
)
_DINOV2 = Architecture(
    "encoder.layer",
    "attention.q_proj",
    "attention.k_proj",
    "attention.v_proj",
    "attention.o_proj",
    kind=ModelKind.VISION,
    interpolation="always",
    mlp="layer_scale2",
)

# decoder-only language models (transformers 5: every one dispatches attention through
# ALL_ATTENTION_FUNCTIONS; eager returns per-query-head probabilities, keys/values repeated for GQA)
_GPT2 = Architecture(
    "h", "attn.c_attn", "attn.c_attn", "attn.c_attn", "attn.c_proj", kind=ModelKind.DECODER, qkv="concat", conv1d=True, mlp="mlp", final_norm="ln_f"
)
_NEOX = Architecture(
    "layers",
    "attention.query_key_value",
    "attention.query_key_value",
    "attention.query_key_value",
    "attention.dense",
    kind=ModelKind.DECODER,
    qkv="per_head",
    mlp="mlp",
    final_norm="final_layer_norm",
)
_LLAMA = Architecture(
    "layers", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", kind=ModelKind.DECODER, mlp="mlp", final_norm="norm"
)
# Gemma 3's text model (``gemma3_text``: Gemma3ForCausalLM, what transformers' GGUF reader builds from a ``gemma3``
# file). Z is W_O's input as for Llama; the attention the model applies (queries and keys RMS-normed per head (QK-norm),
# rotary positions with a local and a global base, scores scaled by query_pre_attn_scalar ** -0.5, a sliding window on
# the layers config.layer_types calls sliding_attention, no soft-capping) is what eager attention returns. Each
# block norms its writes before the residual add ("sandwich" norms): the MLP's write is post_feedforward_layernorm's
# output, and the attention's is post_attention_layernorm(W_O's output), so ``attn_out`` (W_O's output) and
# ``resid_mid`` are not points of the residual stream there.
_GEMMA3 = Architecture(
    "layers",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    kind=ModelKind.DECODER,
    mlp="post_feedforward_layernorm",
    final_norm="norm",
    sandwich_norm=True,
)
_OPT = Architecture(
    "decoder.layers",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.out_proj",
    kind=ModelKind.DECODER,
    mlp="fc2",
    final_norm="decoder.final_layer_norm",
)
_PHI = Architecture(
    "layers", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.dense", kind=ModelKind.DECODER, mlp="mlp", final_norm="final_layernorm"
)

ARCHITECTURES: Dict[str, Architecture] = {
    "bert": _BERT,
    "roberta": _BERT,
    "xlm-roberta": _BERT,
    "camembert": _BERT,
    "electra": _BERT,
    "distilbert": Architecture("transformer.layer", "attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin", mlp="ffn"),
    "vit": _VIT,
    "deit": _VIT,
    "dinov2": _DINOV2,
    "dinov2_with_registers": _DINOV2,
    # decoder-only (causal) language models
    "gpt2": _GPT2,
    "gpt_neox": _NEOX,
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": _LLAMA,
    "gemma": _LLAMA,
    "gemma3_text": _GEMMA3,
    "opt": _OPT,
    "phi": _PHI,
}


def architecture_for(model_type: str) -> "Architecture | Seq2SeqArchitecture":
    """The :class:`Architecture` of a ``config.model_type`` (a :class:`Seq2SeqArchitecture` for T5, BART, Marian).

    Raises:
        ModelError: the architecture is not supported; the message lists the supported ones.
    """
    if model_type in SEQ2SEQ_ARCHITECTURES:  # encoder–decoder families (appended table below)
        return SEQ2SEQ_ARCHITECTURES[model_type]
    if model_type not in ARCHITECTURES:
        raise ModelError(
            f"attnsim cannot capture attention heads of model type '{model_type}'. Supported model types: "
            f"{', '.join(sorted({**ARCHITECTURES, **SEQ2SEQ_ARCHITECTURES}))}. Use a model of one of these families."
        )
    return ARCHITECTURES[model_type]


def layer_modules(model: nn.Module, arch: Architecture) -> nn.ModuleList:
    """The model's layers (``base_model.<arch.layers>``)."""
    return model.base_model.get_submodule(arch.layers)


def projection_weight(module: nn.Module, arch: Architecture) -> torch.Tensor:
    """A projection's weight as ``nn.Linear`` stores it: (out_features, in_features).

    transformers' ``Conv1D`` (GPT-2, ``arch.conv1d``) stores (in_features, out_features) and is transposed
    (a view, no copy).
    """
    weight = module.weight
    return weight.t() if arch.conv1d else weight


def projection_in_features(module: nn.Module, arch: Architecture):
    """Input width of a projection (``Linear.in_features``, ``Conv1D.nx``), or None when the module does not say."""
    if arch.conv1d:
        return getattr(module, "nx", None)
    return getattr(module, "in_features", None)


def split_qkv(projected: torch.Tensor, arch: Architecture, n_heads: int, n_kv_heads: int, d_head: int) -> tuple:
    """Queries, keys and values from a fused Q/K/V projection's output, per head.

    Args:
        projected: (batch, pos, width) output of the fused projection (``arch.query``), width =
            ``(n_heads + 2 * n_kv_heads) * d_head``.
        arch: an architecture with ``qkv`` ``concat`` ([Q | K | V], GPT-2's ``c_attn``) or ``per_head``
            ([q_h | k_h | v_h] for each head h, GPT-NeoX's ``query_key_value``).
        n_heads, n_kv_heads: query heads and key/value heads; d_head: width of one head.

    Returns:
        ``(q, k, v)``: (batch, n_heads, pos, d_head), (batch, n_kv_heads, pos, d_head) twice; before any
        rotary position embedding the model applies afterwards.

    Raises:
        ModelError: ``arch.qkv`` is ``separate`` (there is nothing to split) or the width does not match.
    """
    batch, pos, width = projected.shape
    if width != (n_heads + 2 * n_kv_heads) * d_head or arch.qkv == "separate" or (arch.qkv == "per_head" and n_kv_heads != n_heads):
        raise ModelError(
            f"Cannot split a fused Q/K/V projection of width {width} (layout '{arch.qkv}') into {n_heads} query and {n_kv_heads} key/value heads of {d_head}."
        )
    if arch.qkv == "concat":
        q, k, v = projected.split([n_heads * d_head, n_kv_heads * d_head, n_kv_heads * d_head], dim=-1)
        return tuple(x.reshape(batch, pos, -1, d_head).transpose(1, 2) for x in (q, k, v))
    per_head = projected.reshape(batch, pos, n_heads, 3 * d_head).transpose(1, 2)  # (B, H, T, 3d)
    return per_head.chunk(3, dim=-1)


# -- encoder–decoder families (T5, BART, Marian) ------------------------------------------------
# Kept apart from ARCHITECTURES: an encoder–decoder has three attention blocks per decoder layer
# pair and runs through attnsim.capture.seq2seq, not the single-stream capture of hooks.py.


@dataclass(frozen=True)
class Seq2SeqArchitecture(_Kinded):
    """Module paths of one encoder–decoder family (relative to ``model.base_model`` and to each layer).

    Attributes:
        encoder_layers, decoder_layers: paths of the encoder's and the decoder's ``ModuleList`` of layers.
        encoder_self, decoder_self, cross: paths (within a layer) of the output projection W_O of the
            encoder self-attention, the decoder (causal) self-attention and the decoder cross-attention;
            each is ``Linear(H*d_head, d_model)`` whose input is the heads' outputs Z concatenated.
        scaled: whether scores are divided by √d_head (BART, Marian); T5 does not scale and adds a
            learned relative position bias instead (documentation only: Z is read before W_O either way).
        kind: :attr:`ModelKind.ENCODER_DECODER` (``seq2seq`` true; ``vision`` and ``causal`` false: it takes
            token ids, not images, and is not a decoder-only model).
        decoder_mlp: path (within a decoder layer) of the module whose output is the MLP's write to the residual
            stream (:func:`attnsim.trace`'s ``mlp_out`` of the decoder).
    """

    encoder_layers: str
    decoder_layers: str
    encoder_self: str
    decoder_self: str
    cross: str
    scaled: bool = True
    kind: ModelKind = ModelKind.ENCODER_DECODER
    interpolation: str = "none"
    decoder_mlp: str = ""


_BART = Seq2SeqArchitecture("encoder.layers", "decoder.layers", "self_attn.out_proj", "self_attn.out_proj", "encoder_attn.out_proj", decoder_mlp="fc2")

SEQ2SEQ_ARCHITECTURES: Dict[str, Seq2SeqArchitecture] = {
    "t5": Seq2SeqArchitecture(
        "encoder.block",
        "decoder.block",
        "layer.0.SelfAttention.o",
        "layer.0.SelfAttention.o",
        "layer.1.EncDecAttention.o",
        scaled=False,
        decoder_mlp="layer.2.DenseReluDense",
    ),
    "bart": _BART,
    "marian": _BART,
}
