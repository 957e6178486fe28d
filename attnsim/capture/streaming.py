"""Hand each layer's attention probabilities to a consumer as the model computes them (eager attention, no maps kept).

Eager attention with ``output_attentions`` returns every layer's (batch, head, T, T) probabilities together at the
end of the forward pass: at 32 MiniLM windows of 128 tokens that is 6 x 24 MiB held at once, at 16 SmolLM2 windows
30 x 9 MiB, on top of everything else the batch holds. The streamed capture path runs the model with the attention
implementation :data:`IMPLEMENTATION` (``attnsim_eager``), registered with transformers' ``AttentionInterface`` (and
eager's mask function with ``AttentionMaskInterface``). Each attention call runs the model family's *own* eager
function (``eager_attention_forward`` of the attention module's modeling file, the one ``attn_implementation="eager"``
calls), so the probabilities and the heads' outputs are eager's, bit for bit; while :func:`streaming` is active the
call then hands the probabilities to the consumer (the statistics fold them into their per-batch sums) and returns
no weights, so the model keeps none and each layer's maps are freed before the next layer runs. The consumer runs
with autocast off: under mixed precision (``trainer.precision=bf16-mixed``) the forward pass runs in autocast, but
the statistics must run as they do on the dense path, after the forward pass, in the maps' own dtype.

Outside :func:`streaming` the function is plain eager attention (weights returned as usual).
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch

from attnsim.errors import ModelError

IMPLEMENTATION = "attnsim_eager"
"""Name of the streaming eager implementation in transformers' ``AttentionInterface``."""

Consumer = Callable[[torch.Tensor], None]
"""Receives one layer's (batch, head, T_query, T_key) attention probabilities, layers in order."""

_state = threading.local()


def model_eager_attention(module: torch.nn.Module) -> Callable:
    """The eager attention function of ``module``'s model family (``eager_attention_forward`` of its modeling file).

    Raises:
        ModelError: the module's file defines none (a model family attnsim cannot stream; use ``capture.path=dense``).
    """
    eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if eager is None:
        raise ModelError(
            f"The attention module {type(module).__name__} ({type(module).__module__}) has no eager_attention_forward, which the streamed capture path runs. "
            "Set capture.path=dense (the model's eager attention maps, all layers at once) for this model."
        )
    return eager


def streaming_eager(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Optional[torch.Tensor], *args: Any, **kwargs: Any
):
    """transformers attention function: the model family's eager attention; under :func:`streaming` its
    probabilities go to the consumer and no weights are returned (module docstring).

    Raises:
        ModelError: the model family has no eager attention function (:func:`model_eager_attention`).
    """
    output, weights = model_eager_attention(module)(module, query, key, value, attention_mask, *args, **kwargs)
    consumer: Optional[Consumer] = getattr(_state, "consumer", None)
    if consumer is None:
        return output, weights
    with torch.autocast(weights.device.type, enabled=False):  # the statistics' arithmetic as on the dense path
        consumer(weights)
    return output, None


def register() -> str:
    """Register :func:`streaming_eager` (and eager's mask function) under :data:`IMPLEMENTATION`; idempotent.

    Returns:
        The implementation name to load a model with (``attn_implementation=...``).
    """
    from attnsim.capture.queries import register_implementation

    return register_implementation(IMPLEMENTATION, streaming_eager, "eager")


@contextmanager
def streaming(consumer: Optional[Consumer]) -> Iterator[None]:
    """Hand every attention call's probabilities to ``consumer`` during the forward passes run inside (None: a no-op)."""
    previous = getattr(_state, "consumer", None)
    _state.consumer = consumer
    try:
        yield
    finally:
        _state.consumer = previous


__all__ = ["IMPLEMENTATION", "Consumer", "model_eager_attention", "streaming_eager", "register", "streaming"]
