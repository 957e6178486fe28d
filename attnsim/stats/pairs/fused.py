"""The dense view with attention probabilities recomputed from captured queries and keys (no eager attention).

:class:`RecomputedPairView` is :class:`~attnsim.stats.pairs.PairView` for short windows whose model ran
with SDPA and recorded, per layer, the queries, keys, scaling and mask its kernel received
(:mod:`attnsim.capture.queries`, a ``QueryKey`` per layer). Instead of reading (layer, batch, head, T, T)
maps that eager attention returned, each chunk of the attention walk recomputes its windows'
probabilities while they are in cache, as eager attention computes them:
``softmax(Q Kᵀ · scaling + mask)`` in float32, one (head, T, d) x (head, d, T) product per layer and
window (:func:`window_probabilities`). Every reducer of the attention walk then receives the same
(c, layer * head, T, T) chunk it would get from eager maps, so every finding, accumulator and merge rule
is unchanged.

Equality with eager attention: the same scores up to the rounding of the product (BLAS may block a
(batch, head, T, d) product differently from a (head, T, d) one), i.e. probabilities within a few
float32 ulps; high-attention pairs therefore equal eager's except float32 near-ties at the k-th value
(tests/test_fused.py checks both on a tiny model).

Chosen with ``capture.path=recomputed`` (text windows; images and gradient findings need eager maps). Measured
on MiniLM (6 layers x 12 heads, T = 128, batch 32, 2 threads; CPU seconds per batch, min of 6 alternating
runs on a shared, loaded machine): forward with Q/K recorded under SDPA 1.23 against eager with maps
1.30; the recomputation (one batched product and softmax per window for all layers) 0.12 against
0.03 for stacking eager's maps; statistics and forward together 2.15 against 2.20, within the run-to-run
spread. A whole ``attnsim run paper corpus.limit=128`` peaks about 90 MiB lower (no (layer, batch, head,
T, T) maps held). ``capture.path=auto`` takes eager maps at these lengths instead, one layer at a time
(:mod:`attnsim.stats.pairs.streamed`): no maps of the batch held either, and no recomputation (the
recomputation cost 0.09-0.12 s of CPU per batch more than it saved in the forward pass, one thread, idle,
``benchmarks/statistics_cpu.py``).
"""

from __future__ import annotations

from functools import cached_property
from types import SimpleNamespace
from typing import Any, Dict, Optional, Sequence

import torch

from attnsim.stats.pairs.scores import head_keys
from attnsim.stats.pairs.view import Layers, PairView


def window_probabilities(qk: Any, start: int, stop: int) -> torch.Tensor:
    """Attention probabilities of windows ``start..stop-1`` of one layer, recomputed as eager attention does.

    ``softmax(Q Kᵀ · scaling + mask)`` with the model's own scaling and mask: a boolean mask's False cells
    get float32's lowest value (a fully masked row is then uniform, as eager's additive mask makes it), an
    additive mask is added and clamped to that value, and SDPA's own causal rule masks keys j > i.

    Args:
        qk: one layer's ``QueryKey`` (:mod:`attnsim.capture.queries`): ``query``, ``key`` (batch, head, T, d),
            ``scaling``, ``mask`` (broadcastable to (batch, head, T, T), bool or additive, or None), ``causal``.
        start, stop: the batch elements.

    Returns:
        (stop - start, head, T, T) float32, rows (queries) summing to 1.
    """
    mask = qk.mask
    window = SimpleNamespace(
        query=qk.query[start:stop].float(),
        scaling=qk.scaling,
        causal=qk.causal,
        mask=None if mask is None else (mask[start:stop] if mask.shape[0] > 1 else mask),
    )
    return _probabilities(window, head_keys(qk.key[start:stop], qk.query.shape[1], 1).float().transpose(-1, -2))


def _probabilities(qk: Any, keys_t: torch.Tensor) -> torch.Tensor:
    # softmax(query @ keys_t * scaling + mask) over the last axis; qk.mask already cut to the windows (or None)
    scores = torch.matmul(qk.query, keys_t).mul_(qk.scaling)  # (..., T, T)
    lowest = float(torch.finfo(torch.float32).min)
    mask = qk.mask
    if mask is not None:
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, lowest)
        else:
            scores.add_(mask.float()).clamp_(min=lowest)
    if qk.causal:
        t = scores.shape[-1]
        scores.masked_fill_(torch.ones(t, t, dtype=torch.bool, device=scores.device).triu_(1), lowest)
    return torch.softmax(scores, -1)


class RecomputedPairView(PairView):
    """:class:`PairView` whose attention chunks are recomputed from recorded queries and keys (module docstring).

    Args: as :class:`PairView` (``attention`` is not taken), plus
        query_keys: L ``QueryKey`` (:mod:`attnsim.capture.queries`), one per layer; None when no finding reads attention.
    """

    def __init__(self, vectors: Layers, batch: Dict[str, torch.Tensor], query_keys: Optional[Sequence[Any]] = None, **settings: Any):
        super().__init__(vectors, batch, None, **settings)
        self.query_keys = tuple(query_keys) if query_keys is not None else None

    @classmethod
    def from_capture(cls, capture: Any, batch: Dict[str, torch.Tensor], **settings: Any) -> "RecomputedPairView":
        """The view of one captured batch (``capture.query_keys`` from the recording SDPA)."""
        settings.pop("block_rows", None)
        return cls(capture.vectors, batch, getattr(capture, "query_keys", None), positions=batch.get("positions"), capture=capture, **settings)

    @property
    def has_attention(self) -> bool:
        """Whether queries and keys were recorded (the attention can be recomputed)."""
        return self.query_keys is not None

    @cached_property
    def _stacked_query_keys(self) -> Optional[tuple]:
        # (B, L, H, T, d) queries, (B, L, H, d, T) keys transposed, both contiguous float32, and the mask
        # every layer shares, broadcastable to (B, L, H, T, T); None where the layers' score rules differ
        # (then each layer is recomputed on its own)
        first = self.query_keys[0]
        if any(qk.mask is not first.mask or qk.causal != first.causal or qk.scaling != first.scaling for qk in self.query_keys):
            return None
        queries = torch.stack([qk.query.float() for qk in self.query_keys], 1)
        keys = torch.stack([head_keys(qk.key, qk.query.shape[1], 1).float().transpose(-1, -2) for qk in self.query_keys], 1)
        return queries, keys, None if first.mask is None else first.mask.unsqueeze(1)

    def _attention_chunk(self, start: int, stop: int) -> torch.Tensor:
        # (c, L, H, T, T) float32 attention of windows start..stop-1: one batched product and one softmax for
        # every layer when the layers share their score rule (as eager computes each layer: Q Kᵀ, times the
        # scaling, the mask, softmax), else layer by layer
        stacked = self._stacked_query_keys
        if stacked is None:
            return torch.stack([window_probabilities(qk, start, stop) for qk in self.query_keys], 1)
        queries, keys, mask = stacked
        first = self.query_keys[0]
        probe = SimpleNamespace(
            query=queries[start:stop],
            key=None,
            scaling=first.scaling,
            mask=None if mask is None else (mask[start:stop] if mask.shape[0] > 1 else mask),
            causal=first.causal,
        )
        return _probabilities(probe, keys[start:stop])

    @cached_property
    def attention(self) -> Optional[torch.Tensor]:
        """(batch, layer, head, T, T) recomputed attention probabilities, or None (computed on first use, for
        findings that read every map, e.g. rollout; the window walks never stack them)."""
        if self.query_keys is None:
            return None
        return self._attention_chunk(0, self.batch_size)


__all__ = ["window_probabilities", "RecomputedPairView"]
