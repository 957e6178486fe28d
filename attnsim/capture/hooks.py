"""Hooks that capture per-head outputs Z and attention probabilities in one forward pass.

Capture points (TransformerLens names in brackets):

- ``z`` [``blocks.L.attn.hook_z``]: the per-head outputs
  ``softmax(Q Kᵀ/√d_head + mask) V`` before the output projection W_O, read
  by a forward pre-hook on W_O, whose input is the heads' outputs
  concatenated (B, T, H·d_head). This works under any attention implementation.
- ``attention`` [``hook_pattern``]: the attention probabilities (B, H, T_query,
  T_key), from the model's own ``output_attentions`` (needs eager attention).

Hooks are registered in ``try`` and removed in ``finally``: none outlives a call.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn as nn

from attnsim.capture.architectures import Architecture, layer_modules
from attnsim.errors import ModelError


@dataclass
class HeadCapture:
    """Per-head internals of one batch, kept as the model's per-layer tensors.

    Stacking the layers copies ~75 MB (z) and ~150 MB (attention) per batch of 32 windows of
    MiniLM; the statistics read the layers directly (:class:`attnsim.stats.pairs.PairView`), so
    the stacked tensors are built only when asked for.

    Attributes:
        z_layers: L tensors (batch, head, pos, d_head), per-head outputs before W_O.
        attention_layers: L tensors (batch, head, query_pos, key_pos) attention probabilities, or None when not requested.
    """

    z_layers: Tuple[torch.Tensor, ...]
    attention_layers: Optional[Tuple[torch.Tensor, ...]] = None

    @cached_property
    def z(self) -> torch.Tensor:
        """(layer, batch, head, pos, d_head) per-head outputs before W_O (stacked on first use)."""
        return torch.stack(self.z_layers)

    @cached_property
    def attention(self) -> Optional[torch.Tensor]:
        """(layer, batch, head, query_pos, key_pos) attention probabilities, or None (stacked on first use)."""
        return torch.stack(self.attention_layers) if self.attention_layers is not None else None


@contextmanager
def capture_heads(model: nn.Module, arch: Architecture, n_heads: int) -> Iterator[List[torch.Tensor]]:
    """Collect each layer's per-head outputs during the forward passes run inside the block.

    Yields a list that receives, per layer in order, a (batch, head, pos, d_head) tensor.
    """
    store: List[torch.Tensor] = []
    handles = []

    def pre_hook(_module: nn.Module, args: tuple) -> None:
        concat = args[0]  # (B, T, H*d_head)
        batch, pos, width = concat.shape
        # (B, T, H*d) -> (B, T, H, d) -> (B, H, T, d)
        store.append(concat.reshape(batch, pos, n_heads, width // n_heads).transpose(1, 2))

    try:
        for layer in layer_modules(model, arch):
            handles.append(layer.get_submodule(arch.output).register_forward_pre_hook(pre_hook))
        yield store
    finally:
        for handle in handles:
            handle.remove()


def forward_with_capture(model: nn.Module, arch: Architecture, n_heads: int, inputs: Dict[str, torch.Tensor], attention: bool):
    """Run ``model(**inputs)`` once and return ``(outputs, HeadCapture)``.

    Raises:
        ModelError: attention probabilities were requested but the model returned none
        (an attention implementation such as SDPA or flash that cannot return them).
    """
    with capture_heads(model, arch, n_heads) as store:
        outputs = model(**inputs, output_attentions=attention)
    n_layers = len(layer_modules(model, arch))
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
    return outputs, HeadCapture(z_layers=tuple(store), attention_layers=probs)


def output_projections(model: nn.Module, arch: Architecture, n_heads: int) -> torch.Tensor:
    """Each head's slice of W_O: (layer, head, d_head, d_model), so that ``result = z @ W_O[l, h]``.

    Source: the per-head decomposition of multi-head attention's output
    projection (Elhage et al. 2021; Kobayashi et al. 2020).
    """
    slices = []
    for layer in layer_modules(model, arch):
        weight = layer.get_submodule(arch.output).weight  # (d_model, H*d_head)
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
