"""The dense view whose attention walk runs during the forward pass, one chunk of windows of one layer at a time (no maps kept).

:class:`StreamedPairView` is :class:`~attnsim.stats.pairs.PairView` for a batch whose model runs eager attention
that hands each layer's (batch, head, T, T) probabilities over as it computes them (:mod:`attnsim.capture.streaming`).
The view is made from the batch *before* the forward pass (:meth:`StreamedViews.open`); each layer's maps are
folded in as they arrive (:meth:`StreamedPairView.fold`), one chunk of windows at a time (:meth:`~StreamedPairView.window_chunks`),
exactly as the dense view's attention walk on a CPU hands them over (one :class:`~attnsim.stats.pairs.reducers.Piece`
per cache-sized chunk of windows of one layer, layers in order, every registered attention reducer updated with every
piece), and then dropped; after the forward pass the
per-head vectors are attached (:meth:`StreamedPairView.attach`) and the CSM walk and every finding's update run as on
the dense view. The statistics are those of the dense path bit for bit (the same eager maps, the same pieces in the
same order; ``tests/stats/pairs/test_streamed.py``), while at most one chunk's maps of one layer are alive: at 32
MiniLM windows of 128 tokens, 10 windows' 7.5 MiB instead of the 6 x 24 MiB eager attention returns together
(docs/performance.md).

The first ``keep`` windows' maps of every layer are kept (copied into one (keep, layer, head, T, T) tensor) for the
example figures (:meth:`~attnsim.stats.pairs.PairView.attention_windows`), and only while the run still records
examples (:class:`StreamedViews` counts the windows kept); a finding that reads every window's whole maps
(:attr:`~attnsim.stats.pairs.PairView.attention`: rollout, attention maps) needs the dense path, which
:func:`~attnsim.capture.load.choose_capture_path` chooses for it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch

from attnsim.stats.pairs.reducers import ChunkReducer, Piece
from attnsim.stats.pairs.view import PairView


class StreamedPairView(PairView):
    """:class:`PairView` whose attention walk is folded layer by layer during the forward pass (module docstring).

    Build it before the forward pass, hand :meth:`fold` every layer's maps in order, then :meth:`attach` the
    captured per-head vectors.

    Args:
        batch: the batch dict (see :class:`~attnsim.stats.pairs.PairView`).
        n_layers, n_heads: the model's layers and (query) heads.
        keep: windows whose maps are kept for the example figures (the first ``keep`` of the batch).
        settings: keyword arguments of :class:`~attnsim.stats.pairs.PairView` (``top_fraction``, ``reducers``, ...).
    """

    def __init__(self, batch: Dict[str, torch.Tensor], n_layers: int, n_heads: int, keep: int = 1, **settings: Any):
        ids = batch["input_ids"]
        shell = [ids.new_empty((ids.shape[0], n_heads, ids.shape[1], 0), dtype=torch.float32)] * n_layers  # shapes only, until attach
        super().__init__(shell, batch, None, positions=batch.get("positions"), **settings)
        self.keep = min(max(0, int(keep)), self.batch_size)
        self._folded = 0  # layers folded so far
        self._next_window = 0  # the first window of the next chunk of maps of layer _folded
        self._kept: Optional[torch.Tensor] = None  # (keep, L, H, T, T) float32 maps of the first windows, filled layer by layer
        self._stream: Optional[List[ChunkReducer]] = None  # the attention reducers while the layers arrive (built on the first fold)

    def window_chunks(self) -> List[Tuple[int, int]]:
        """The (start, stop) window ranges whose maps :meth:`fold` takes at once: the attention walk's pieces of one
        layer (on a CPU, cache-sized chunks of windows; on an accelerator, the whole batch)."""
        return self._chunks(1)

    def fold(self, maps: torch.Tensor, start: int = 0) -> None:
        """Fold the next layer's (c, head, T, T) attention probabilities of windows ``start .. start + c - 1`` into every
        attention reducer: either the whole layer (``start`` 0, c the batch) or the layer's :meth:`window_chunks` in
        order; a layer is complete when its last window arrives.

        Raises:
            ModelError: the maps are not (c, n_heads, T, T) of the next windows on the chunks' boundaries, or more
                layers arrive than the model has.
        """
        from attnsim.errors import ModelError

        layer, T = self._folded, self.seq_len
        stop = start + int(maps.shape[0])
        expected = (self.n_heads, T, T)
        pieces = [(a, b) for a, b in self._chunks(1) if start <= a < stop]
        aligned = bool(pieces) and pieces[0][0] == start and pieces[-1][1] == stop
        if layer >= self.n_layers or tuple(maps.shape[1:]) != expected or start != self._next_window or stop > self.batch_size or not aligned:
            where = f"attention call {layer + 1} of a model with {self.n_layers} layers"
            raise ModelError(
                f"The streamed capture received attention probabilities of shape {tuple(maps.shape)} for windows {start}..{stop - 1} at {where}; "
                f"it expects the (windows, heads, tokens, tokens) = (c, {', '.join(map(str, expected))}) maps of windows {self._next_window} onwards, "
                f"layer by layer, {self.batch_size} windows per layer. Use capture.path=dense for this model."
            )
        if self._stream is None:
            self._stream = [kind(self) for kind in self._registered["attention"]]
        for a, b in pieces:
            piece = Piece(a, b, layer, (0, T), (0, self.n_pairs), T, maps[a - start : b - start].float().unsqueeze(1))  # (c, 1, H, T, T)
            for reducer in self._stream:
                reducer.update(self, piece)
        if start < self.keep:
            if self._kept is None:
                self._kept = maps.new_empty((self.keep, self.n_layers, self.n_heads, T, T), dtype=torch.float32)
            kept = min(stop, self.keep)
            self._kept[start:kept, layer] = maps[: kept - start]
        if stop == self.batch_size:
            self._folded, self._next_window = layer + 1, 0
        else:
            self._next_window = stop

    def attach(self, capture: Any) -> "StreamedPairView":
        """Attach the batch's captured per-head vectors (``capture.vectors``: L (batch, head, T, d) tensors) after the
        forward pass, finishing the attention walk; returns the view, ready for every statistic.

        Raises:
            ModelError: fewer layers' maps arrived than the model has (a model whose attention bypasses the
                streamed implementation).
        """
        from attnsim.errors import ModelError
        from attnsim.stats.pairs.view import _layers

        if self._folded != self.n_layers or self._next_window:
            part = f" and windows 0..{self._next_window - 1} of the next" if self._next_window else ""
            raise ModelError(
                f"The streamed capture received the attention of {self._folded} attention calls{part}, but the model has {self.n_layers} layers: "
                "its attention does not run through transformers' attention interface. Use capture.path=dense for this model."
            )
        vectors = capture.vectors
        self._stacked_vectors = vectors if isinstance(vectors, torch.Tensor) else None
        self._vector_layers = _layers(vectors)
        self.capture = capture
        if self._stream is not None:
            for reducer in self._stream:
                reducer.finish(self)
            self._reduced.update(zip(self._registered["attention"], self._stream))
            self._walked.add("attention")
            self._stream = None
        return self

    @property
    def has_attention(self) -> bool:
        """Whether the attention was streamed (every layer's maps folded)."""
        return self._folded > 0

    def _attention_chunk(self, start: int, stop: int) -> torch.Tensor:
        # (c, L, H, T, T) float32 attention of windows start..stop-1: only the kept windows exist
        if stop > self.keep:
            raise ValueError(
                f"The streamed view keeps the attention maps of its first {self.keep} window(s) only (windows {start}..{stop - 1} were asked for), and "
                "its attention reducers must be registered before the forward pass. Use capture.path=dense for a statistic that reads every window's maps."
            )
        return self._kept[start:stop]  # a view: the example recorder keeps the whole tensor without a copy

    @property
    def attention(self) -> Optional[torch.Tensor]:  # type: ignore[override]
        """(batch, layer, head, T, T) maps only where every window's were kept for the examples; otherwise raises
        ValueError naming ``capture.path=dense`` (the streamed view keeps no batch's maps)."""
        return self._attention_chunk(0, self.batch_size)


class StreamedViews:
    """The streamed path's view factory (picklable): :meth:`open` a batch's view before its forward pass.

    The example recorder (:class:`~attnsim.findings.examples.ExampleRecorder`) records the first ``keep`` windows a
    predict run serves, in order; the factory keeps those windows' maps and no others (a batch after them keeps
    none). :meth:`reset` starts the count again (the capture module calls it when a predict run starts).

    Args:
        keep: windows of a predict run whose maps are kept for the example figures (``plots.examples``).
        settings: keyword arguments of :class:`~attnsim.stats.pairs.PairView`.
    """

    streams_attention = True
    """Marks a factory whose views are opened before the forward pass (:class:`~attnsim.capture.module.CaptureModule`)."""

    def __init__(self, keep: int = 1, **settings: Any) -> None:
        self.keep = keep
        self.settings = settings
        self.kept = 0  # windows of this predict run whose maps were kept

    def reset(self) -> None:
        """Keep the maps of the next predict run's first ``keep`` windows again."""
        self.kept = 0

    def open(self, batch: Dict[str, torch.Tensor], n_layers: int, n_heads: int) -> StreamedPairView:
        """A batch's view, before its forward pass."""
        keep = max(0, min(self.keep - self.kept, int(batch["input_ids"].shape[0])))
        self.kept += keep
        return StreamedPairView(batch, n_layers, n_heads, keep=keep, **self.settings)

    def __call__(self, capture: Any, batch: Dict[str, torch.Tensor]) -> PairView:
        """The dense view of a batch captured without attention (no finding reads it, nothing to stream)."""
        return PairView.from_capture(capture, batch, **self.settings)


__all__ = ["StreamedPairView", "StreamedViews"]
