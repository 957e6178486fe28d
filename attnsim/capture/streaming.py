"""Hand each layer's attention probabilities to a consumer as the model computes them (eager attention, no maps kept).

Eager attention with ``output_attentions`` returns every layer's (batch, head, T, T) probabilities together at the
end of the forward pass: at 32 MiniLM windows of 128 tokens that is 6 x 24 MiB held at once, at 16 SmolLM2 windows
30 x 9 MiB, on top of everything else the batch holds. The streamed capture path runs the model with the attention
implementation :data:`IMPLEMENTATION` (``attnsim_eager``), registered with transformers' ``AttentionInterface`` (and
eager's mask function with ``AttentionMaskInterface``). Each attention call runs the model family's *own* eager
function (``eager_attention_forward`` of the attention module's modeling file, the one ``attn_implementation="eager"``
calls), so the probabilities and the heads' outputs are eager's, bit for bit; while :func:`streaming` is active the
call then hands the probabilities to the consumer (the statistics fold them into their per-batch sums) and returns
no weights, so the model keeps none and each layer's maps are freed before the next layer runs. The call runs the
eager function on the consumer's chunks of windows (:meth:`Consumer.window_chunks`: on a CPU, cache-sized) and hands
each chunk's maps over as soon as they are computed: eager attention's (batch, head, T, T) temporaries (the scores,
the masked scores, the probabilities) exist for one chunk at a time, and the statistics read the maps while they are
still in cache. Each window's probabilities and output are those of the whole batch's call (every window's attention
is computed on its own, by the same kernels); the outputs are concatenated in window order. The consumer runs with
autocast off: under mixed precision (``trainer.precision=bf16-mixed``) the forward pass runs in autocast, but the
statistics must run as they do on the dense path, after the forward pass, in the maps' own dtype.

Outside :func:`streaming` the function is plain eager attention (weights returned as usual).
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, Protocol, Sequence, Tuple

import torch

from attnsim.errors import ModelError

IMPLEMENTATION = "attnsim_eager"
"""Name of the streaming eager implementation in transformers' ``AttentionInterface``."""


class Consumer(Protocol):
    """What receives the streamed maps (:class:`~attnsim.stats.pairs.streamed.StreamedPairView`)."""

    def window_chunks(self) -> Sequence[Tuple[int, int]]:
        """The (start, stop) ranges of windows, covering the batch in order, whose maps :meth:`fold` takes at once."""
        ...

    def fold(self, maps: torch.Tensor, start: int = 0) -> None:
        """Receive (c, head, T_query, T_key) attention probabilities of windows ``start .. start + c - 1`` of the next
        layer (chunks of a layer in order, then the next layer's)."""
        ...


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
    eager = model_eager_attention(module)
    consumer: Optional[Consumer] = getattr(_state, "consumer", None)
    if consumer is None:
        return eager(module, query, key, value, attention_mask, *args, **kwargs)
    batch = query.shape[0]
    chunks = list(consumer.window_chunks())
    if attention_mask is not None and attention_mask.shape[0] not in (1, batch):  # a mask not per window: one call
        chunks = [(0, batch)]
    outputs = []
    for start, stop in chunks:
        mask = attention_mask if attention_mask is None or attention_mask.shape[0] == 1 else attention_mask[start:stop]
        output, weights = eager(module, query[start:stop], key[start:stop], value[start:stop], mask, *args, **kwargs)
        with torch.autocast(weights.device.type, enabled=False):  # the statistics' arithmetic as on the dense path
            consumer.fold(weights, start)
        del weights
        outputs.append(output)
    return (outputs[0] if len(outputs) == 1 else torch.cat(outputs)), None


def register() -> str:
    """Register :func:`streaming_eager` (and eager's mask function) under :data:`IMPLEMENTATION`; idempotent.

    Returns:
        The implementation name to load a model with (``attn_implementation=...``).
    """
    from attnsim.capture.queries import register_implementation

    return register_implementation(IMPLEMENTATION, streaming_eager, "eager")


@contextmanager
def streaming(consumer: Optional[Consumer]) -> Iterator[None]:
    """Hand every attention call's probabilities to ``consumer`` (its :meth:`~Consumer.fold`, chunk by chunk) during the
    forward passes run inside (None: a no-op)."""
    previous = getattr(_state, "consumer", None)
    _state.consumer = consumer
    try:
        yield
    finally:
        _state.consumer = previous


__all__ = ["IMPLEMENTATION", "Consumer", "model_eager_attention", "streaming_eager", "register", "streaming"]
