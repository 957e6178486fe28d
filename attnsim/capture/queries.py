"""Capture each layer's per-head queries and keys while the model runs SDPA (no T x T maps).

The model is loaded with the attention implementation :data:`IMPLEMENTATION` (``attnsim_sdpa``),
registered with transformers' ``AttentionInterface`` (and its mask function with
``AttentionMaskInterface``, as SDPA's own). Every model family that dispatches attention through
``ALL_ATTENTION_FUNCTIONS`` (BERT family, ViT, GPT-2, NeoX, Llama/Mistral/Qwen2/Gemma, OPT in
transformers 5) then calls :func:`recording_sdpa` with the tensors its own kernel would get:

- ``query`` (batch, head, T, d_head) and ``key`` (batch, kv_head, T, d_head), *after* the rotary
  embedding where the model applies one; grouped key/value heads (GQA) are kept once per key/value head
  (the statistics repeat them to the query heads block by block,
  :func:`attnsim.stats.pairs.scores.head_keys`, as ``repeat_kv`` does);
- ``scaling`` (the model's own, ``1/sqrt(d_head)`` when it passes none), the additive or boolean
  mask it built (padding, causal, sliding window), and whether SDPA would apply the causal mask
  itself (no mask tensor, ``is_causal``).

While :func:`recording` is active each call is recorded as a :class:`QueryKey`, then the call goes
on to transformers' own ``sdpa_attention_forward``: the model's outputs (and Z, read before W_O by
:mod:`attnsim.capture.hooks`) are exactly SDPA's. Outside :func:`recording` the function is plain SDPA.

Score changes that the recomputation (:func:`attnsim.stats.pairs.scores.attention_rows`) cannot reproduce are refused with a
:class:`~attnsim.errors.ModelError` as they are seen: soft-capping (``softcap``), attention sinks
(``s_aux``), a position bias (T5) or ALiBi (:func:`check_recomputable` refuses those from the config).
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional

import torch

from attnsim.errors import ModelError

IMPLEMENTATION = "attnsim_sdpa"
"""Name of the recording SDPA implementation in transformers' ``AttentionInterface``."""

_state = threading.local()


@dataclass
class QueryKey:
    """One layer's queries, keys and score rule, as the model's attention kernel received them.

    Attributes:
        query: (batch, head, T, d_head) queries after any rotary embedding.
        key: (batch, kv_head, T, d_head) keys, one per key/value head (kv_head divides head; grouped-query
            attention shares key head ``h // (head / kv_head)`` among query heads).
        scaling: the factor applied to ``query @ key.T`` (the model's own).
        mask: the model's mask, broadcastable to (batch, head, T, T): bool (True = attend) or additive
            float; None when no mask was built.
        causal: SDPA applies the causal mask itself (no mask tensor and ``is_causal``).
    """

    query: torch.Tensor
    key: torch.Tensor
    scaling: float
    mask: Optional[torch.Tensor]
    causal: bool


def _refuse(what: str) -> None:
    raise ModelError(
        f"This model changes its attention scores by {what}, which attnsim's blockwise recomputation of the attention does not reproduce. "
        "Use capture.path=dense (eager attention, T x T maps) for this model."
    )


def recording_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    scaling: Optional[float] = None,
    dropout: float = 0.0,
    is_causal: Optional[bool] = None,
    **kwargs: Any,
):
    """transformers attention function: record Q, K, scaling and mask (see module docstring), then run SDPA.

    Raises:
        ModelError: (while recording) the call carries a soft-cap, attention sinks or a position bias.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    store: Optional[List[QueryKey]] = getattr(_state, "store", None)
    if store is not None:
        if kwargs.get("softcap") is not None:
            _refuse("soft-capping (softcap)")
        if kwargs.get("s_aux") is not None:
            _refuse("attention sinks (s_aux)")
        if kwargs.get("position_bias") is not None:
            _refuse("a position bias (T5-style)")
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
        causal = bool(query.shape[2] > 1 and attention_mask is None and causal)  # SDPA's own rule
        scale = float(scaling) if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
        store.append(QueryKey(query.detach(), key.detach(), scale, attention_mask, causal))
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, is_causal=is_causal, **kwargs)


def register_implementation(name: str, function: Any, mask: str) -> str:
    """Register ``function`` with transformers' ``AttentionInterface`` under ``name``, with the mask function of the
    built-in implementation ``mask`` (``sdpa`` or ``eager``) under the same name; idempotent.

    Returns:
        ``name``, to load a model with (``attn_implementation=name``).
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    AttentionInterface.register(name, function)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, ALL_MASK_ATTENTION_FUNCTIONS[mask])
    return name


def register() -> str:
    """Register :func:`recording_sdpa` (and SDPA's mask function) under :data:`IMPLEMENTATION`; idempotent.

    Returns:
        The implementation name to load a model with (``attn_implementation=...``).
    """
    return register_implementation(IMPLEMENTATION, recording_sdpa, "sdpa")


@contextmanager
def recording() -> Iterator[List[QueryKey]]:
    """Collect, per attention call in order (one per layer), a :class:`QueryKey` during the forward passes run inside."""
    previous = getattr(_state, "store", None)
    store: List[QueryKey] = []
    _state.store = store
    try:
        yield store
    finally:
        _state.store = previous


def check_recomputable(config: Any) -> None:
    """Refuse, from a model config alone, score changes the blockwise recomputation cannot reproduce.

    Raises:
        ModelError: the config sets an attention logit soft-cap, ALiBi, or relative position buckets (T5).
    """
    if getattr(config, "attn_logit_softcapping", None):
        _refuse(f"soft-capping (attn_logit_softcapping={config.attn_logit_softcapping})")
    if getattr(config, "alibi", False) or getattr(config, "use_alibi", False) or getattr(config, "model_type", "") in ("bloom", "mpt"):
        _refuse("ALiBi position biases")
    if getattr(config, "relative_attention_num_buckets", None):
        _refuse("a relative position bias (T5-style)")
    if getattr(config, "position_embedding_type", "absolute") not in ("absolute", None):
        _refuse(f"relative position embeddings in the scores (position_embedding_type={config.position_embedding_type})")


__all__ = ["IMPLEMENTATION", "QueryKey", "recording_sdpa", "register_implementation", "register", "recording", "check_recomputable"]
