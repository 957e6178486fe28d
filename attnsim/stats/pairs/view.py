"""The per-batch view of the token-pair quantities every statistic reads: the statistics' one contract.

Source: Halevi et al., "Self-attention vector output similarities reveal how machines pay attention",
arXiv:2512.21956. For layer l, head h and one window of T tokens with per-head outputs Z (T x d_head), the
Context Similarity Matrix is ``CSM = Z Zᵀ`` with its diagonal set to 0
(:func:`~attnsim.stats.pairs.geometry.context_similarity`). Pair space, pair classes and distances:
:mod:`attnsim.stats.pairs.geometry`; the high-pair rules and their tie rule: :mod:`attnsim.stats.pairs.selection`.

**The contract.** Every statistic is written once, as a function of the members below, which three views offer
alike: the dense :class:`PairView` (a batch of windows), the blockwise
:class:`~attnsim.stats.pairs.blocks.BlockPairView` (long windows, ``capture.path=blockwise``), and the
*single-window view* :meth:`PairView.single_window` (a dense view of one window, for the live explorer). Published
members, all batch-first: (batch, layer, head, ...), or (layer, head, ...) for sums over the batch:

- shape and settings: ``batch``, ``batch_size``, ``n_layers``, ``n_heads``, ``seq_len``, ``n_pairs`` (P = T(T-1)/2),
  ``device``, ``top_fraction``, ``high_rule``, ``zscore``, ``include_special``, ``normalise``, ``positions``,
  ``capture``, :attr:`~PairView.sum_dtype`;
- tokens and pairs: :attr:`~PairView.tokens`, :attr:`~PairView.max_token_id`, :meth:`~PairView.real_span`,
  :meth:`~PairView.pair_ends`, :meth:`~PairView.pair_features`, :meth:`~PairView.high_sums`, :meth:`~PairView.high_counts`,
  :attr:`~PairView.class_counts`, :attr:`~PairView.class_counts_by_distance` (rows :data:`CLASS_TABLES`);
- *high* pairs (per window, layer and head the top ``k = max(1, floor(top_fraction * n + 0.5))`` valid pairs by
  CSM, ties at the k-th value to the lowest pair index; or the pairs whose z-score exceeds ``zscore``):
  :attr:`~PairView.high_index`, :attr:`~PairView.high_count`, :attr:`~PairView.high_by_distance`,
  :attr:`~PairView.chance_by_distance`;
- *high-attention* pairs (the top k valid pairs by ``max(A[i, j], A[j, i])``): :attr:`~PairView.has_attention`,
  :attr:`~PairView.attention_index`, :attr:`~PairView.high_attention_count`,
  :attr:`~PairView.high_in_attention_index`, :attr:`~PairView.high_in_attention`;
- CSM sums: :attr:`~PairView.class_value_sums`, ``reduced(PairSums)`` and ``reduced(TieCounts)``
  (:mod:`attnsim.stats.pairs.shared`);
- per-batch shared work of a statistic: its :class:`~attnsim.stats.pairs.reducers.ChunkReducer` s,
  :meth:`~PairView.register` ed up front and read with :meth:`~PairView.reduced`; each receives the
  :class:`~attnsim.stats.pairs.reducers.Piece` s of one walk, on every path;
- whole maps, dense only (figures, rollout): :attr:`~PairView.attention`, :meth:`~PairView.csm_windows`,
  :meth:`~PairView.attention_windows`, :meth:`~PairView.layer_vectors`, :attr:`~PairView.draws_examples`;
- life cycle: :meth:`~PairView.from_capture`, :meth:`~PairView.single_window`, :meth:`~PairView.release`.

Everything else (leading underscore) is the dense path's own machinery: pair-space masks, the chunked walks,
the compiled kernels. How the dense walk works and why: :mod:`attnsim.stats.pairs.shared`.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, Union

import torch

from attnsim.stats.pairs.geometry import (
    context_similarity,
)
from attnsim.stats.pairs.kernels import CSMWalk, compiled_available, compiled_csm_walk
from attnsim.stats.pairs.reducers import SOURCES, ChunkReducer, Piece
from attnsim.stats.pairs.selection import top_fraction_counts
from attnsim.stats.pairs.shared import SHARED, PairSums, TieCounts, _ClassSums, _HighAttentionPairs, _HighPairs
from attnsim.stats.pairs.tables import CLASS_TABLES, PairTables

# Elements of the (chunk, layer, head, T, T) tensors a chunk of windows may hold: 8 MB of float32 on
# a CPU, about the size of its last-level cache per core; an accelerator takes the whole batch at once.
CHUNK_ELEMENTS_CPU = 1 << 21
CHUNK_ELEMENTS_ACCELERATOR = 1 << 28

Layers = Union[torch.Tensor, Sequence[torch.Tensor]]


def _layers(tensor: Layers) -> Tuple[torch.Tensor, ...]:
    """A (layer, ...) tensor or a sequence of per-layer tensors as a tuple of per-layer tensors."""
    return tuple(tensor.unbind(0)) if isinstance(tensor, torch.Tensor) else tuple(tensor)


class PairView(PairTables):
    """Per-batch quantities shared by several findings, each computed once on first use.

    Built from one forward pass and its batch, usually by :meth:`from_capture` in the view
    factory that the workflow gives the capture module.

    Args:
        vectors: per-head vectors (z or result): a (layer, batch, head, T, d) tensor or a sequence of
            L (batch, head, T, d) tensors (the capture's layers, never stacked on the hot path).
        batch: dict with ``attention_mask``, ``special_mask``, ``sentence_ids`` and ``input_ids``
            (batch, T), optionally ``unknown_mask`` (batch, T) and ``positions`` (T, 2).
        attention: attention probabilities, a (layer, batch, head, T, T) tensor or a sequence of L
            (batch, head, T, T) tensors, or None.
        top_fraction, high_rule, zscore, include_special, normalise: see :class:`attnsim.config.StatsConfig`.
        positions: optional (T, 2) (row, col) of each token on an image's patch grid, NaN for tokens
            without one (a ViT's extra tokens); when given, :attr:`_distance` is the grid distance
            (:func:`~attnsim.stats.pairs.geometry.grid_distance`) instead of j - i.
        reducers: :class:`ChunkReducer` classes to run in the window walks (see :meth:`register`).
        capture: the raw capture the view was built from, kept for findings that read more than
            the shared quantities (e.g. a classifier's gradients); None when built from tensors.
        sum_dtype: the precision of the pair counts and of the statistics' per-batch arithmetic on them
            (:attr:`sum_dtype`; None: the path's own, float32 here).

    Shapes below use B windows, L layers, H heads, T tokens, P = T(T-1)/2 pairs and S slots
    (the batch's largest number of high pairs). Statistics are float32 (the model's dtype is
    converted chunk by chunk); accumulators sum batches in float64.
    """

    draws_examples = True
    """Whether :meth:`csm_windows` and :meth:`attention_windows` make T x T matrices (the blockwise view: up to 512 tokens)."""

    def __init__(
        self,
        vectors: Layers,
        batch: Dict[str, torch.Tensor],
        attention: Optional[Layers] = None,
        top_fraction: float = 0.02,
        high_rule: str = "top_fraction",
        zscore: float = 2.0,
        include_special: bool = True,
        normalise: str = "none",
        positions: Optional[torch.Tensor] = None,
        reducers: Sequence[Type[ChunkReducer]] = (),
        capture: Any = None,
        sum_dtype: Optional[torch.dtype] = None,
    ):
        if sum_dtype is not None:
            self.sum_dtype = sum_dtype
        self.positions = positions
        self._stacked_vectors = vectors if isinstance(vectors, torch.Tensor) else None
        self._vector_layers = _layers(vectors)
        self._stacked_attention = attention if isinstance(attention, torch.Tensor) else None
        self._attention_layers = _layers(attention) if attention is not None else None
        self.batch = batch
        self.capture = capture
        self.top_fraction = top_fraction
        self.high_rule = high_rule
        self.zscore = zscore
        self.include_special = include_special
        self.normalise = normalise
        self.n_layers = len(self._vector_layers)
        self.batch_size, self.n_heads, self.seq_len = self._vector_layers[0].shape[:3]
        self.n_pairs = self.seq_len * (self.seq_len - 1) // 2
        self.device = self._vector_layers[0].device
        self._registered: Dict[str, List[Type[ChunkReducer]]] = {source: list(SHARED[source]) for source in SOURCES}
        self._reduced: Dict[Type[ChunkReducer], ChunkReducer] = {}
        self._walked: set = set()
        self._kernel_walk: Optional[CSMWalk] = None  # the kernel's results for the running CSM walk's chunk, for its reducers
        self.register(*reducers)

    @classmethod
    def from_capture(cls, capture: Any, batch: Dict[str, torch.Tensor], **settings: Any) -> "PairView":
        """The view of one captured batch.

        Args:
            capture: the capture module's raw output: ``vectors`` (L per-layer (batch, head, T, d) tensors
                or one stacked tensor) and ``attention`` (likewise, or None); kept as :attr:`capture`.
            batch: the batch dict (see the class docstring); its ``positions`` place image tokens.
            settings: keyword arguments of the constructor (``top_fraction``, ``high_rule``, ``zscore``,
                ``include_special``, ``normalise``, ``reducers``).
        """
        return cls(capture.vectors, batch, capture.attention, positions=batch.get("positions"), capture=capture, **settings)

    @classmethod
    def single_window(cls, vectors: Layers, window: Dict[str, Any], attention: Optional[Layers] = None, **settings: Any) -> "PairView":
        """The single-window view: the dense view of one window (a batch of one), for statistics of a single text
        (e.g. the live explorer), computed by the same statistics' code as corpus runs.

        Args:
            vectors: per-head vectors of the window: a (layer, head, T, d) tensor or L (head, T, d) tensors.
            window: the window's (T,) tensors ``attention_mask``, ``special_mask``, ``sentence_ids``, ``input_ids``
                (optionally ``unknown_mask``), and optionally ``positions`` (T, 2); other entries are kept as given.
            attention: attention probabilities, a (layer, head, T, T) tensor or L (head, T, T) tensors, or None.
            settings: keyword arguments of the constructor (``top_fraction``, ``reducers``, ...).

        Returns:
            A :class:`PairView` with ``batch_size`` 1: every published member keeps its batch axis of length 1.

        Example (one layer and head, T = 4: tokens 0 and 1 point one way, 2 and 3 another; ``tests/test_docstring_examples.py`` runs it):

            >>> import torch
            >>> z = torch.tensor([[[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]]])  # (layer, head, T, d_head)
            >>> window = {"attention_mask": torch.ones(4, dtype=torch.long), "special_mask": torch.zeros(4, dtype=torch.bool),
            ...           "sentence_ids": torch.zeros(4, dtype=torch.long), "input_ids": torch.arange(4)}
            >>> view = PairView.single_window(z, window, top_fraction=0.3)
            >>> view.high_count.tolist()  # k = floor(0.3 * 6 pairs + 0.5)
            [[[2]]]
            >>> view.high_index.tolist()  # (batch, layer, head, S): pairs (0, 1) and (2, 3), indices 0 and 5
            [[[[0, 5]]]]
        """
        batch = {k: v[None] if isinstance(v, torch.Tensor) and k != "positions" else v for k, v in window.items()}
        maps = None if attention is None else [a[None] for a in _layers(attention)]
        return cls([v[None] for v in _layers(vectors)], batch, maps, positions=window.get("positions"), **settings)

    def release(self) -> None:
        """Drop every tensor the view holds (the captured layers, the batch, the raw capture and every
        cached quantity), once all statistics have read the batch; the view cannot be used afterwards."""
        self.__dict__.clear()

    # -- reducers -----------------------------------------------------------------------------------
    def register(self, *kinds: Type[ChunkReducer]) -> None:
        """Run these reducers in the walks of their sources (once each, however often registered).

        Register before the first statistic reads the batch: a reducer registered after its source
        was walked gets a walk of its own when :meth:`reduced` asks for it.

        Raises:
            ValueError: a reducer's ``source`` is not one of :data:`SOURCES`.
        """
        for kind in kinds:
            if kind.source not in SOURCES:
                raise ValueError(f"Reducer {kind.__name__} has source {kind.source!r}; a view walks only {', '.join(SOURCES)}.")
            if kind not in self._registered[kind.source]:
                self._registered[kind.source].append(kind)

    def reduced(self, kind: Type[ChunkReducer]) -> ChunkReducer:
        """The reducer ``kind`` after it has seen every window of the batch (walking the batch if needed).

        Raises:
            ValueError: ``kind`` reads attention and the batch was captured without it.
        """
        if kind not in self._reduced:
            self.register(kind)
            self._walk(kind.source, [kind] if kind.source in self._walked else self._registered[kind.source])
        return self._reduced[kind]

    def _walk(self, source: str, kinds: Sequence[Type[ChunkReducer]]) -> None:
        # One walk over the windows: each chunk's CSM (in pair space) or attention is computed while it is
        # in cache and handed to every reducer of the walk.
        if source == "attention":
            self._need_attention()
        self._walked.add(source)
        reducers = [kind(self) for kind in kinds]
        totals = next((r.by_pair for r in reducers if isinstance(r, PairSums)), None)
        T = self.seq_len
        # on a CPU the captured attention is walked one layer at a time, each layer's maps as they are (no copy of a window's L layers)
        by_layer = source == "attention" and self._captured_attention_layers is not None and "attention" not in self.__dict__
        for layer, (start, stop) in [(n, c) for n in range(self.n_layers) for c in self._chunks(1)] if by_layer else [(0, c) for c in self._chunks()]:
            if by_layer:
                chunk = self._attention_layers[layer][start:stop].float().unsqueeze(1)  # (c, 1, H, T, T)
            elif source == "csm":
                chunk = self._csm_pair_chunk(start, stop, select=_HighPairs in kinds or TieCounts in kinds, totals=totals)  # (c, L, H, P)
            else:
                chunk = self._attention_chunk(start, stop)  # (c, L, H, T, T)
            piece = Piece(start, stop, layer, (0, T), (0, self.n_pairs), T, chunk)  # every query row; its layers from `layer` on
            for reducer in reducers:
                reducer.update(self, piece)
        for reducer in reducers:
            reducer.finish(self)
        self._reduced.update(zip(kinds, reducers))

    # -- the captured tensors, stacked only on request -------------------------------------
    @cached_property
    def attention(self) -> Optional[torch.Tensor]:
        """(batch, layer, head, T, T) attention probabilities, query-major, or None (stacked on first use when given by
        layer; the dense path only: the blockwise view keeps no T x T maps)."""
        if self._attention_layers is None:
            return None
        if self._stacked_attention is not None:
            return self._stacked_attention.transpose(0, 1)
        return torch.stack(self._attention_layers, 1)

    @property
    def _captured_attention_layers(self) -> Optional[Tuple[torch.Tensor, ...]]:
        """The L captured (batch, head, T, T) attention tensors on the CPU, None when the attention is
        recomputed, stacked or on an accelerator (the high-attention pairs then read the walk's chunks)."""
        if self._attention_layers is None or self._stacked_attention is not None or self._on_accelerator():
            return None
        return self._attention_layers

    @property
    def has_attention(self) -> bool:
        """Whether the batch was captured with attention probabilities."""
        return self._attention_layers is not None

    def _need_attention(self) -> None:
        if not self.has_attention:
            raise ValueError("This statistic needs attention probabilities; the finding must set needs_attention = True.")

    def _vector_chunk(self, start: int, stop: int) -> torch.Tensor:
        # (c, L, H, T, d) float32 vectors of windows start..stop-1
        if self._stacked_vectors is not None:
            return self._stacked_vectors.transpose(0, 1)[start:stop].float()
        return torch.stack([v[start:stop] for v in self._vector_layers], 1).float()

    def layer_vectors(self, layer: int) -> torch.Tensor:
        """(batch, head, T, d) float32 per-head vectors of one layer."""
        return self._vector_layers[layer].float()

    def _csm_chunk(self, start: int, stop: int) -> torch.Tensor:
        # (c, L, H, T, T) float32 CSM of windows start..stop-1; with narrow_csm (where the kernel declined the chunk) a
        # float32 product, whose vectors are kept so that _HighPairs chooses from the float64 CSM
        vectors = self._vector_chunk(start, stop)
        if self._narrow_csm:
            self._walk_vectors = vectors  # (c, L, H, T, d)
        return context_similarity(vectors, self.normalise, wide=not self._narrow_csm)

    def _csm_pair_chunk(self, start: int, stop: int, select: bool, totals: Optional[torch.Tensor] = None) -> torch.Tensor:
        # (c, L, H, P) float32 CSM pair values of windows start..stop-1, 0 at invalid pairs. On the compiled path
        # (narrow_csm) one kernel pass per matrix computes them (float32 products), and with them the high pairs when
        # ``select``, the class sums and squares, kept in _kernel_walk for the walk's _HighPairs, _ClassSums and
        # PairSums, and adds them to ``totals`` (PairSums' by_pair); elsewhere, or where the kernel declines (k out
        # of range), the CSM is a product here, its pairs gathered and chosen by _HighPairs.
        self._kernel_walk = None
        if self._narrow_csm:
            vectors = self._vector_chunk(start, stop)  # (c, L, H, T, d)
            k = self._host["k"][start:stop] if select else [0] * (stop - start)
            walked = compiled_csm_walk(vectors, self.tokens[start:stop], k, self._class_rows[start:stop], totals)
            if walked is not None:
                self._walk_vectors, self._kernel_walk = vectors, walked
                return walked.pairs
        square = self._csm_chunk(start, stop)  # (c, L, H, T, T)
        chunk = self._pair_values(square)
        valid = self._valid_chunk(start, stop, chunk.dim())
        if valid is not None:
            chunk.masked_fill_(~valid, 0.0)  # invalid pairs add nothing to any sum
        return chunk

    @cached_property
    def _class_rows(self) -> torch.Tensor:
        # (batch, 5, P) float32 the pair-class masks, one contiguous row per class (the compiled walk's weights)
        return self._pair_weights.transpose(1, 2).contiguous()

    def _wide_pair_values(self, start: int, stop: int, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Pair values of the float64 CSM (rounded once to float32) of windows start..stop-1, the chunk of the
        running CSM walk (with :attr:`_narrow_csm`): (c, L, H, P), or (R, P) for the (window, layer, head) rows where ``rows`` (c, L, H) is True.
        Invalid pairs are not masked."""
        vectors = self._walk_vectors if rows is None else self._walk_vectors[rows]
        return self._pair_values(context_similarity(vectors, self.normalise))

    @cached_property
    def _narrow_csm(self) -> bool:
        """Whether the CSM walk takes float32 products (CPU, compiled kernel available, top-fraction rule, no
        normalisation), with the high pairs certified against the float64 CSM; else float64 products throughout."""
        return not self._on_accelerator() and self.high_rule == "top_fraction" and self.normalise == "none" and compiled_available()

    def _attention_chunk(self, start: int, stop: int) -> torch.Tensor:
        # (c, L, H, T, T) float32 attention of windows start..stop-1
        stacked = self.__dict__.get("attention")  # (B, L, H, T, T) when a finding read it whole
        if stacked is not None:
            return stacked[start:stop].float()
        if self._stacked_attention is not None:
            return self._stacked_attention.transpose(0, 1)[start:stop].float()
        return torch.stack([a[start:stop] for a in self._attention_layers], 1).float()

    def _on_accelerator(self) -> bool:
        """Whether the batch lives on an accelerator: it then takes the whole batch as one chunk and
        batched products (few, large kernels); a CPU walks cache-sized chunks with per-window products."""
        return self.device.type != "cpu"

    def _chunks(self, layers: Optional[int] = None) -> List[Tuple[int, int]]:
        # windows per chunk so that a chunk's (c, layers, H, T, T) tensors (default: every layer) stay within the budget
        budget = CHUNK_ELEMENTS_ACCELERATOR if self._on_accelerator() else CHUNK_ELEMENTS_CPU
        step = max(1, budget // max(1, (self.n_layers if layers is None else layers) * self.n_heads * self.seq_len * self.seq_len))
        return [(start, min(start + step, self.batch_size)) for start in range(0, self.batch_size, step)]

    def csm_windows(self, stop: int) -> torch.Tensor:
        """(stop, layer, head, T, T) float32 CSM of the first ``stop`` windows only (e.g. examples for figures),
        always from float64 products rounded once (the values :func:`context_similarity` gives)."""
        if self._narrow_csm:
            vectors = self._vector_chunk(0, stop)  # (stop, L, H, T, d)
            out = torch.empty(*vectors.shape[:-1], vectors.shape[-2], dtype=vectors.dtype, device=vectors.device)
            for layer in range(vectors.shape[1]):  # one layer's float64 products at a time, not the whole model's
                out[:, layer] = context_similarity(vectors[:, layer], self.normalise)
            return out
        return self._csm_chunk(0, stop)

    def attention_windows(self, stop: int) -> Optional[torch.Tensor]:
        """(stop, layer, head, T, T) float32 attention of the first ``stop`` windows only, query-major, or None."""
        return self._attention_chunk(0, stop) if self.has_attention else None

    def _pair_values(self, matrices: torch.Tensor, index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(..., T, T) -> (..., P): the entries (i, j), i < j, of each matrix (or the flat cells ``index``, (P,)).

        index_select on a 2-D (rows, T*T) view is several times faster than advanced indexing.
        """
        rows = matrices.reshape(-1, self.seq_len * self.seq_len)
        return rows.index_select(1, self._flat_pairs if index is None else index).view(*matrices.shape[:-2], self.n_pairs)

    @cached_property
    def _top_k(self) -> torch.Tensor:
        # (batch,) int64 number of pairs per window chosen by the top-fraction rule (high pairs
        # under that rule, and high-attention pairs under either rule)
        return top_fraction_counts(self._pair_mask, self.top_fraction)

    @cached_property
    def _host(self) -> Dict[str, list]:
        """The numbers that set shapes and loop bounds, read from the device in one transfer (each read
        waits for the device to finish its queued work): per window its ``k`` (pairs chosen by the top-fraction rule), whether it
        has invalid pairs (``partial``), the span of its real tokens ``first`` .. ``last`` - 1 (an empty
        span, T .. 0, without one), and the batch's largest token id ``max_token_id`` (-1 without ids)."""
        real = self.batch["attention_mask"].bool()  # (B, T)
        position = torch.arange(self.seq_len, device=real.device)
        first = torch.where(real, position, self.seq_len).amin(-1)  # T when the window has no real token
        last = torch.where(real, position + 1, 0).amax(-1)  # 0 then: an empty span
        ids = self.batch.get("input_ids")
        max_id = ids.max().reshape(1).long() if ids is not None and ids.numel() else torch.full((1,), -1, device=real.device)
        partial = (~self._pair_mask).any(-1).long()
        numbers = torch.cat([self._top_k, partial, first, last, max_id.to(real.device)]).tolist()
        b = self.batch_size
        return {
            "k": numbers[:b],
            "partial": [bool(x) for x in numbers[b : 2 * b]],
            "first": numbers[2 * b : 3 * b],
            "last": numbers[3 * b : 4 * b],
            "max_token_id": numbers[-1],
        }

    @property
    def max_token_id(self) -> int:
        """The largest token id of the batch (-1 without ``input_ids``)."""
        return self._host["max_token_id"]

    def real_span(self, start: int, stop: int) -> Tuple[int, int]:
        """(first, last): positions first .. last - 1 hold every real token of windows start..stop-1 (last <= first: none)."""
        return min(self._host["first"][start:stop]), max(self._host["last"][start:stop])

    def _valid_chunk(self, start: int, stop: int, dims: int) -> Optional[torch.Tensor]:
        """(c, 1, ..., P) bool valid pairs of windows start..stop-1 with ``dims`` dimensions, to broadcast
        against a chunk's pair values; None when every pair of those windows is valid."""
        if not any(self._host["partial"][start:stop]):
            return None
        return self._pair_mask[start:stop].view(stop - start, *[1] * (dims - 2), self.n_pairs)

    # -- CSM -------------------------------------------------------------------------------------
    @property
    def class_value_sums(self) -> torch.Tensor:
        """(batch, layer, head, 5) float32 CSM summed over the pairs of each class of :data:`~attnsim.stats.pairs.geometry.PAIR_CLASSES`."""
        sums = self.reduced(_ClassSums).sums  # (B, L*H, 5)
        return sums.reshape(self.batch_size, self.n_layers, self.n_heads, -1)

    @cached_property
    def high_index(self) -> torch.Tensor:
        """(batch, layer, head, S) int64 pair indices of the high-CSM pairs, ascending, P (the sentinel) in unused slots."""
        return self.reduced(_HighPairs).index

    @cached_property
    def high_count(self) -> torch.Tensor:
        """(batch, layer, head) int64 number of high pairs k of each window and head."""
        if self.high_rule == "zscore":
            return (self.high_index < self.n_pairs).sum(-1)
        return self._top_k[:, None, None].expand(self.batch_size, self.n_layers, self.n_heads)

    @cached_property
    def high_by_distance(self) -> torch.Tensor:
        """(layer, head, T) float32 number of high pairs at each distance, summed over the batch's windows
        (pairs without a distance are left out)."""
        distance = torch.cat([self._distance, self._distance.new_full((1,), -1)])[self.high_index]  # (B, L, H, S); sentinel -> -1
        counts = torch.zeros(*distance.shape[:-1], self.seq_len + 1, device=self.device)
        counts.scatter_add_(-1, torch.where(distance >= 0, distance, self.seq_len), torch.ones_like(distance, dtype=torch.float32))
        return counts[..., : self.seq_len].sum(0)

    @cached_property
    def chance_by_distance(self) -> torch.Tensor:
        """(layer, head, T) float32 expected number of high pairs at each distance under a uniform choice
        of each window's k high pairs among its n valid pairs: ``sum_b k * n_d / n`` (n_d valid pairs at distance d)."""
        by_distance = self.class_counts_by_distance[:, 0].float()  # (B, T)
        n = self.class_counts[:, :1].float()  # (B, 1)
        share = by_distance / n.where(n > 0, torch.ones_like(n))  # (B, T); a window without pairs adds nothing
        return torch.einsum("lbh,bt->lht", self.high_count.transpose(0, 1).float(), share)

    # -- attention --------------------------------------------------------------------------------------
    @property
    def attention_index(self) -> torch.Tensor:
        """(batch, layer, head, S) int64 pair indices of the high-attention pairs, ascending, P (the sentinel) in unused slots.

        Raises:
            ValueError: the batch was captured without attention probabilities.
        """
        return self.reduced(_HighAttentionPairs).index

    @property
    def high_attention_count(self) -> torch.Tensor:
        """(batch, layer, head) float32 number of high-attention pairs (the window's k)."""
        return self._top_k.float()[:, None, None].expand(self.batch_size, self.n_layers, self.n_heads)

    @cached_property
    def high_in_attention_index(self) -> torch.Tensor:
        """(batch, layer, head, S) int64 the high-CSM pairs that are also high-attention pairs (slots of
        :attr:`high_index`), P (the sentinel) elsewhere."""
        member = torch.zeros(self.batch_size, self.n_layers, self.n_heads, self.n_pairs + 1, dtype=torch.bool, device=self.device)
        member.scatter_(-1, self.attention_index, True)
        member[..., self.n_pairs] = False  # column P, the sentinel, is never a pair
        inside = member.gather(-1, self.high_index)
        return self.high_index.masked_fill(~inside, self.n_pairs)

    @cached_property
    def high_in_attention(self) -> torch.Tensor:
        """(batch, layer, head) float32 number of pairs both high-CSM and high-attention."""
        return (self.high_in_attention_index < self.n_pairs).sum(-1).float()


__all__ = ["CHUNK_ELEMENTS_CPU", "CHUNK_ELEMENTS_ACCELERATOR", "CLASS_TABLES", "SOURCES", "ChunkReducer", "PairSums", "PairView", "Piece", "TieCounts"]
