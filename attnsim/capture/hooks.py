"""Hooks that capture per-head outputs Z and attention probabilities in one forward pass.

Capture points (TransformerLens names in brackets):

- ``z`` [``blocks.L.attn.hook_z``]: the per-head outputs
  ``softmax(Q Kᵀ/√d_head + mask) V`` before the output projection W_O, read
  by a forward pre-hook on W_O, whose input is the heads' outputs
  concatenated (B, T, H·d_head). This works under any attention implementation,
  and whether W_O is called with the tensor positionally or as a keyword.
- ``attention`` [``hook_pattern``]: the attention probabilities (B, H, T_query,
  T_key), from the model's own ``output_attentions`` (needs eager attention).

Hooks are registered in ``try`` and removed in ``finally``: none outlives a call.

Shapes are checked as they are captured, before any statistic reads them
(:func:`check_shapes`): Z must be (batch, heads, T, d_head) and attention
(batch, heads, T, T) with heads = the model's ``num_attention_heads`` and T the
inputs' length; anything else is a :class:`~attnsim.errors.ModelError` naming
the layer and both shapes.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from attnsim.capture.architectures import Architecture, layer_modules, projection_in_features, projection_weight
from attnsim.errors import ModelError


@dataclass
class HeadCapture:
    """Per-head internals of one batch, kept as the model's per-layer tensors.

    Stacking the layers copies ~75 MB (z) and ~150 MB (attention) per batch of 32 windows of
    MiniLM; the statistics read the layers directly, so the stacked tensors are built only when
    asked for.

    Attributes:
        z_layers: L tensors (batch, head, pos, d_head), per-head outputs before W_O.
        attention_layers: L tensors (batch, head, query_pos, key_pos) attention probabilities, or None when not requested.
    """

    z_layers: Tuple[torch.Tensor, ...]
    attention_layers: Optional[Tuple[torch.Tensor, ...]] = None
    query_keys: Optional[Tuple[Any, ...]] = None  # L QueryKey (attnsim.capture.queries) when captured for recomputation

    @cached_property
    def z(self) -> torch.Tensor:
        """(layer, batch, head, pos, d_head) per-head outputs before W_O (stacked on first use)."""
        return torch.stack(self.z_layers)

    @cached_property
    def attention(self) -> Optional[torch.Tensor]:
        """(layer, batch, head, query_pos, key_pos) attention probabilities, or None (stacked on first use)."""
        return torch.stack(self.attention_layers) if self.attention_layers is not None else None


@dataclass
class BatchCapture:
    """What a capture module's ``predict_step`` hands on (to the view factory the workflow injects):
    one batch's raw per-head tensors, as the model's per-layer tensors.

    Attributes:
        vectors: L tensors (batch, head, pos, d) (or one stacked (layer, batch, head, pos, d) tensor) of the
            per-head vectors the statistics read: ``z`` (before W_O, d = d_head) or ``result`` (z · W_O[h],
            d = d_model), as ``vector`` says.
        attention: L tensors (batch, head, query_pos, key_pos) (or one stacked tensor) of attention
            probabilities, or None when not requested.
        vector: ``z`` or ``result``.
    """

    vectors: Tuple[torch.Tensor, ...]
    attention: Optional[Tuple[torch.Tensor, ...]] = None
    vector: str = "z"
    query_keys: Optional[Tuple[Any, ...]] = None
    """L :class:`~attnsim.capture.queries.QueryKey` (queries, keys, scaling, mask) from which the blockwise
    path recomputes the attention one block of query rows at a time; None on the dense path."""


def _projection_input(where: str, args: tuple, kwargs: dict) -> torch.Tensor:
    """The tensor passed to an output projection: first positional argument, else ``input=``, else its only tensor keyword."""
    if args:
        value = args[0]
    elif "input" in kwargs:
        value = kwargs["input"]
    else:
        tensors = [key for key, v in kwargs.items() if isinstance(v, torch.Tensor)]
        if len(tensors) != 1:
            raise ModelError(
                f"{where}: the output projection W_O was called with keyword arguments {sorted(kwargs) or 'none'} and attnsim cannot tell which one holds "
                "the heads' outputs. Call it with the tensor as its first argument (or as input=), or add the model to attnsim's architecture table."
            )
        value = kwargs[tensors[0]]
    if not isinstance(value, torch.Tensor):
        raise ModelError(
            f"{where}: the output projection W_O received a {type(value).__name__}, not a tensor of the heads' outputs; the architecture table does not match this model."
        )
    return value


@contextmanager
def capture_heads(model: nn.Module, arch: Architecture, n_heads: int) -> Iterator[List[torch.Tensor]]:
    """Collect each layer's per-head outputs during the forward passes run inside the block.

    Yields a list that receives, per layer in order, a (batch, head, pos, d_head) tensor. The
    pre-hooks are registered with ``with_kwargs=True``: the projection's input is read whether it is
    passed positionally or as a keyword.

    Raises (during the forward pass):
        ModelError: naming the layer and the shape, when W_O's input is not (batch, pos, n_heads x d_head)
        with the projection's input width, or cannot be found among its arguments.
    """
    store: List[torch.Tensor] = []
    handles = []

    def hook_for(index: int, projection: nn.Module) -> Callable:
        where = f"Layer {index} ({arch.layers}.{index}.{arch.output})"
        width = projection_in_features(projection, arch)  # H*d_head (Linear.in_features, Conv1D.nx)

        def pre_hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
            concat = _projection_input(where, args, kwargs)  # (B, T, H*d_head)
            if concat.dim() != 3 or (width is not None and concat.shape[-1] != width) or concat.shape[-1] % n_heads:
                expected = f"{n_heads} x {width // n_heads} = {width}" if width is not None and width % n_heads == 0 else f"a multiple of {n_heads}"
                raise ModelError(
                    f"{where}: the input of the output projection W_O has shape {tuple(concat.shape)}, but attnsim expects (batch, tokens, heads x d_head) "
                    f"with heads x d_head = {expected} (num_attention_heads = {n_heads}). The architecture table does not match this model."
                )
            batch, pos, total = concat.shape
            # (B, T, H*d) -> (B, T, H, d) -> (B, H, T, d)
            store.append(concat.reshape(batch, pos, n_heads, total // n_heads).transpose(1, 2))

        return pre_hook

    try:
        for index, layer in enumerate(layer_modules(model, arch)):
            projection = layer.get_submodule(arch.output)
            handles.append(projection.register_forward_pre_hook(hook_for(index, projection), with_kwargs=True))
        yield store
    finally:
        for handle in handles:
            handle.remove()


def check_shapes(
    z_layers: Sequence[torch.Tensor], attention_layers: Optional[Sequence[torch.Tensor]], n_heads: int, batch: int, seq_len: Optional[int] = None
) -> None:
    """Check the captured tensors of one forward pass before any statistic reads them.

    Args:
        z_layers: per layer, the per-head outputs (batch, heads, T, d_head) from :func:`capture_heads`.
        attention_layers: per layer, the attention probabilities from ``output_attentions``, or None.
        n_heads: the model's ``num_attention_heads``.
        batch: the number of inputs in the batch.
        seq_len: T, the number of tokens of each input (text: the window length; images: extra
            tokens + patches of the layout); None takes it from the first layer's Z.

    Raises:
        ModelError: a layer's Z is not (batch, n_heads, T, d_head), or its attention is not
        (batch, n_heads, T, T); the message names the layer and both shapes.
    """
    if seq_len is None and z_layers:
        seq_len = int(z_layers[0].shape[2])
    for index, z in enumerate(z_layers):
        if z.shape[0] != batch or z.shape[1] != n_heads or (seq_len is not None and z.shape[2] != seq_len):
            raise ModelError(
                f"Layer {index}: the per-head outputs Z have shape {tuple(z.shape)} (batch, heads, tokens, d_head), but the batch holds {batch} inputs of {seq_len} tokens "
                f"and the model has {n_heads} heads. The model changes the number of tokens or the architecture table does not match it."
            )
    for index, attention in enumerate(attention_layers or ()):
        expected = (batch, n_heads, seq_len, seq_len)
        if attention.dim() != 4 or tuple(attention.shape) != expected:
            raise ModelError(
                f"Layer {index}: the attention probabilities have shape {tuple(attention.shape)}, but attnsim expects (batch, heads, tokens, tokens) = {expected} "
                f"(num_attention_heads = {n_heads}). The model returns attention in another layout (e.g. grouped or pooled heads), which attnsim does not support."
            )


_TAKES_CACHE: Dict[type, bool] = {}  # model class -> whether its forward takes use_cache (read once per class)


def no_cache(model: nn.Module) -> Dict[str, bool]:
    """``{"use_cache": False}`` for a model whose forward takes ``use_cache`` (a decoder would otherwise build a key/value
    cache of every layer, for a generation that never follows: 47 MiB at 16 SmolLM2 windows of 128 tokens), else ``{}``."""
    kind = type(model)
    if kind not in _TAKES_CACHE:
        try:
            _TAKES_CACHE[kind] = "use_cache" in inspect.signature(model.forward).parameters
        except (AttributeError, TypeError, ValueError):  # a forward without a signature: call it as it is
            _TAKES_CACHE[kind] = False
    return {"use_cache": False} if _TAKES_CACHE[kind] else {}


def forward_without_cache(model: nn.Module, **inputs: Any) -> Any:
    """``model(**inputs)``, with ``use_cache=False`` where its forward takes it (:func:`no_cache`): every forward pass attnsim
    runs (capture, interventions, gradient maps) is one pass, never followed by generation."""
    return model(**inputs, **no_cache(model))


def forward_with_capture(
    model: nn.Module, arch: Architecture, n_heads: int, inputs: Dict[str, torch.Tensor], attention: bool, seq_len: Optional[int] = None, queries: bool = False
):
    """Run ``model(**inputs)`` once and return ``(outputs, HeadCapture)``, its tensors' shapes checked.

    Args:
        inputs: the forward's keyword arguments (``input_ids`` and ``attention_mask``, or ``pixel_values``).
        attention: also return the attention probabilities (``output_attentions``).
        seq_len: T of the inputs; None: ``input_ids.shape[1]`` for text, the captured Z's for images.
        queries: also record each layer's queries, keys, scaling and mask (the model must be loaded with
            :data:`attnsim.capture.queries.IMPLEMENTATION`), for the blockwise recomputation of the attention.

    Raises:
        ModelError: attention probabilities were requested but the model returned none
        (an attention implementation such as SDPA or flash that cannot return them), the capture
        did not see every layer, or a captured tensor has the wrong shape (:func:`check_shapes`).
    """
    from attnsim.capture.queries import recording

    with capture_heads(model, arch, n_heads) as store, recording() if queries else nullcontext([]) as recorded:
        outputs = forward_without_cache(model, **inputs, output_attentions=attention)
    n_layers = len(layer_modules(model, arch))
    query_keys = None
    if queries:
        if len(recorded) != n_layers:
            impl = getattr(model.config, "_attn_implementation", "?")
            raise ModelError(
                f"Recorded the queries and keys of {len(recorded)} attention calls but the model has {n_layers} layers (attention implementation '{impl}'). "
                "The blockwise path needs the model loaded with attn_implementation='attnsim_sdpa' and one attention call per layer; use capture.path=dense for this model."
            )
        query_keys = tuple(recorded)
    if len(store) != n_layers:
        raise ModelError(f"Captured {len(store)} layers of per-head outputs but the model has {n_layers}; the architecture table does not match this model.")
    probs = None
    if attention:
        maps = getattr(outputs, "attentions", None)
        if not maps or len(maps) != n_layers or any(m is None for m in maps):
            impl = getattr(model.config, "_attn_implementation", "?")
            raise ModelError(
                f"The model returned no attention probabilities (attention implementation '{impl}'). "
                "Load it with model.attn_implementation=eager; SDPA and flash attention cannot return them."
            )
        probs = tuple(maps)  # L x (B, H, T, T)
    first = inputs["input_ids"] if "input_ids" in inputs else inputs["pixel_values"]
    if seq_len is None and "input_ids" in inputs:
        seq_len = int(inputs["input_ids"].shape[1])
    check_shapes(store, probs, n_heads, int(first.shape[0]), seq_len)
    return outputs, HeadCapture(z_layers=tuple(store), attention_layers=probs, query_keys=query_keys)


def output_projections(model: nn.Module, arch: Architecture, n_heads: int) -> torch.Tensor:
    """Each head's slice of W_O: (layer, head, d_head, d_model), so that ``result = z @ W_O[l, h]``.

    ``n_heads`` is the number of *query* heads (grouped-query attention: W_O's input is H query heads x
    d_head wide, d_head = ``config.head_dim`` where the config has one). GPT-2's ``Conv1D`` W_O, stored
    (in, out), is read transposed (:func:`~attnsim.capture.architectures.projection_weight`).

    Source: the per-head decomposition of multi-head attention's output
    projection (Elhage et al. 2021; Kobayashi et al. 2020).
    """
    slices = []
    for layer in layer_modules(model, arch):
        weight = projection_weight(layer.get_submodule(arch.output), arch)  # (d_model, H*d_head)
        d_model, width = weight.shape
        # (d_model, H*d) -> (d_model, H, d) -> (H, d, d_model)
        slices.append(weight.detach().reshape(d_model, n_heads, width // n_heads).permute(1, 2, 0))
    return torch.stack(slices)


def head_results(z: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """Each head's contribution to the residual stream (``hook_result``).

    Args:
        z: (layer, batch, head, pos, d_head).
        w_o: (layer, head, d_head, d_model) from :func:`output_projections`.

    Returns:
        (layer, batch, head, pos, d_model); summed over heads plus W_O's bias it equals
        the attention output projection.
    """
    return torch.einsum("lbhtd,lhdm->lbhtm", z, w_o)
