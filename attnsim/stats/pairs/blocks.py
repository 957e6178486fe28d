"""The blockwise view: every pair quantity of :class:`~attnsim.stats.pairs.PairView`, exact, without any T x T
or pair-space (P = T(T-1)/2) tensor per layer and head.

Long windows (thousands of tokens) make the dense view's per-batch tensors quadratic: one head's CSM at
T = 8,192 is 256 MB, its pair-space masks and one-hot distance tables far more. :class:`BlockPairView`
walks each window one block of ``block_rows`` query rows at a time instead:

- **CSM**: ``Z[rows] Zᵀ`` (head, rows, T) per layer. The pairs i < j of rows ``r0..r1-1`` are one
  contiguous range of pair indices (pairs are numbered row by row, :func:`pair_offsets`), so every
  pair-space sum is a sum over blocks.
- **Attention**: recomputed from the captured queries and keys (:func:`attnsim.stats.pairs.scores.attention_rows`
  does the same for one block): a first pass takes each query row's log-sum-exp, the second each block's
  probabilities ``exp(S - lse)`` of its rows, and of the transposed block (``A[j, i]`` for the keys i of
  the block's rows), so that ``max(A[i, j], A[j, i])`` of each pair is known block by block.
- **High pairs** (and high-attention pairs): an exact streaming top-k per window, layer and head
  (:class:`StreamingTop`): the kept k pairs and the block's pairs above the kept k-th value are merged
  with the tie rule of :mod:`attnsim.stats.pairs.selection` (a tie at the k-th value goes to the lowest
  pair index). The kept indices, k = top_fraction * P per head, are the one quadratic store.
- **Pair classes**: counted by distance per window ((window, class, T) tables) from the token arrays;
  the classes of listed pairs (high pairs) are decoded from their indices (:meth:`BlockPairView.pair_features`).

The view publishes the same members as :class:`~attnsim.stats.pairs.PairView` (the contract, see
:mod:`attnsim.stats.pairs.view`), so every statistic runs unchanged: its own reducers receive one
:class:`~attnsim.stats.pairs.reducers.Piece` per window, layer and block of rows of the walk of their source, and
the view's own shared quantities (high pairs, class sums, :class:`~attnsim.stats.pairs.PairSums`,
:class:`~attnsim.stats.pairs.TieCounts`) come from the block walks below. This module computes no statistic's sums.
Results equal the dense view's to float32 rounding (sums) and exactly (high pairs, up to float32 near-ties of
recomputed attention).
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any, Dict, List, Optional, Sequence, Type

import numpy as np
import torch

from attnsim.stats.pairs.geometry import POOL_ABOVE, csm_window_mean, listed_pair_classes, pool_cell, product_error, similarity_rows
from attnsim.stats.pairs.reducers import ChunkReducer, Piece
from attnsim.stats.pairs.scores import masked_scores
from attnsim.stats.pairs.shared import PairSums, TieCounts, _ClassSums, _HighAttentionPairs, _HighPairs
from attnsim.stats.pairs.view import CLASS_TABLES, Layers, PairView

BLOCK_ELEMENTS = 1 << 22
"""Largest number of elements of one block's (head, rows, T) tensors (``capture.block_rows`` is lowered to fit)."""

TINY = torch.finfo(torch.float32).tiny  # as the separators' entropy: probabilities are clamped to this inside the log


def pair_offsets(seq_len: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """(T + 1,) int64: ``off(i) = i T - i (i + 1) / 2``, the index of pair (i, i + 1); pair (i, j) is ``off(i) + j - i - 1``."""
    i = torch.arange(seq_len + 1, dtype=torch.long, device=device)
    return i * seq_len - i * (i + 1) // 2


def decode_pairs(index: torch.Tensor, seq_len: int) -> tuple:
    """Rows and columns of pair indices (row-major upper triangle, as :func:`~attnsim.stats.pairs.geometry.pair_indices`).

    Args:
        index: int32 or int64 pair indices, P (the sentinel) or more in unused slots.
        seq_len: T.

    Returns:
        (rows, cols, listed): int64 tensors shaped like ``index`` (pair 0's ends, 0 and 1, at sentinel slots) and a bool mask of real pairs.
    """
    n_pairs = seq_len * (seq_len - 1) // 2
    index = index.long()  # the blockwise view keeps its indices as int32
    listed = index < n_pairs
    offsets = pair_offsets(seq_len, index.device)
    rows = torch.searchsorted(offsets, index.masked_fill(~listed, 0), right=True).sub_(1)
    cols = index.masked_fill(~listed, 0).sub_(offsets[rows]).add_(rows).add_(1)  # in place: two index-sized tensors in all
    return rows, cols, listed


class StreamingTop:
    """Exact top-k of a stream of (value, index) blocks whose indices ascend from block to block.

    The tie rule of :func:`~attnsim.stats.pairs.selection.exact_top`: a tie at the k-th value goes to the
    lowest index. A block's entries can only enter where they exceed the kept k-th value (an equal one
    has a higher index than every kept entry, so it loses the tie); the union of the kept entries and
    those candidates, in ascending index order, is cut to k by one partition.
    """

    def __init__(self, k: int, spare: int = 0):
        self.k = k
        self.capacity = k + spare if k else 0  # spare = 1 keeps the (k+1)-th too: the tie measure reads it
        self.values = np.empty(0, dtype=np.float32)
        self.index = np.empty(0, dtype=np.int32)  # pair indices < 2^31 up to T = 65,536: half the memory of int64

    @property
    def threshold(self) -> float:
        """The value a new entry must exceed to enter (-inf until the kept entries are full)."""
        return float(self.values.min()) if self.capacity and len(self.values) >= self.capacity else -math.inf

    def push(self, values: np.ndarray, index: np.ndarray) -> None:
        """Offer ``values`` (n,) float32 at pair ``index`` (n,) int, ascending and above every earlier index."""
        if self.capacity == 0 or not len(values):
            return
        values = np.concatenate([self.values, values])
        index = np.concatenate([self.index, index.astype(np.int32, copy=False)])
        if len(values) > self.capacity:
            kth = np.partition(values, len(values) - self.capacity)[len(values) - self.capacity]
            take = values > kth
            equal = values == kth
            need = self.capacity - int(take.sum())
            take |= equal & (np.cumsum(equal) <= need)  # the lowest indices among the tied
            values, index = values[take], index[take]
        self.values, self.index = values, index

    def _last(self) -> int:
        # position of the last-ranked kept entry (the lowest value; among equal ones the highest index)
        return int(np.flatnonzero(self.values == self.values.min())[-1])

    def result(self, slots: int, sentinel: int) -> torch.Tensor:
        """(slots,) int32 the top k kept indices, ascending, then ``sentinel``."""
        index = self.index
        if len(index) > self.k:  # a spare entry: the top k+1 under the tie rule are the top k and the (k+1)-th
            index = np.delete(index, self._last())
        out = np.full(slots, sentinel, dtype=np.int32)
        out[: len(index)] = index  # kept in ascending order
        return torch.from_numpy(out)

    def tie_decided(self, error: float) -> int:
        """How many of the k choices ties decided (:func:`~attnsim.stats.pairs.selection.tie_decided`); needs
        ``spare=1``. 0 when no valid pair was left out (fewer than k + 1 were offered)."""
        if self.k == 0 or len(self.values) <= self.k:
            return 0
        last = self._last()
        below = float(self.values[last])  # the (k+1)-th value
        kept = np.delete(self.values, last).astype(np.float64)
        kth = float(kept.min())
        return int((kept <= kth + error).sum()) if below >= kth - error else 0


def _diagonal_sums(block: torch.Tensor, start: int) -> torch.Tensor:
    """Sums of ``block`` (..., rows, T) by distance ``d = j - i`` of row i = start + r: (..., T), for a block zero
    at and below the diagonal. Row r's entries are read from offset ``start + r`` on (a strided view: row
    length T + 1), so that column d holds distance d; entries wrapping into the next row lie below its
    diagonal (zero), the last row reads into one row of zero padding."""
    *lead, rows, width = block.shape
    padded = torch.nn.functional.pad(block, (0, 0, 0, 1)).contiguous()  # (..., rows + 1, T)
    flat = padded.reshape(-1, (rows + 1) * width)
    span = width - start  # distances 0 .. T - start - 1
    view = flat.as_strided((flat.shape[0], rows, span), (flat.stride(0), width + 1, 1), storage_offset=start)
    out = torch.zeros(flat.shape[0], width, dtype=block.dtype, device=block.device)
    out[:, :span] = view.sum(1)
    return out.reshape(*lead, width)


_OWN = (_ClassSums, _HighPairs, TieCounts, PairSums, _HighAttentionPairs)
"""The view's own shared quantities: the dense walk runs these reducers, the block walk computes them itself."""

_FIELDS = {
    _ClassSums: {"sums": "class_sums"},
    _HighPairs: {"index": "high_index"},
    TieCounts: {"decided": "tie_decided"},
    PairSums: {name: name for name in ("by_pair", "pool_sum", "pool_count", "distance_sum", "shift", "shifted", "squares")},
    _HighAttentionPairs: {"index": "attention_index"},
}


class _Results(ChunkReducer):
    """The block walk's results under the attribute names of a dense reducer (given as keywords)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def _record(kind: Type[ChunkReducer], results: Dict[str, Any]) -> ChunkReducer:
    return _Results(**{attribute: results[key] for attribute, key in _FIELDS[kind].items()})


class BlockPairView(PairView):
    """:class:`PairView` computed one block of query rows at a time (see the module docstring).

    Args: as :class:`PairView`, plus
        query_keys: L :class:`~attnsim.capture.queries.QueryKey` (queries, keys, scaling, mask) to recompute
            the attention from; None when no finding reads attention.
        block_rows: query rows per block (rounded to whole pooled cells for long windows).

    Its :attr:`high_index` and :attr:`attention_index` are int32 (the dense view's are int64): at T = 8,192 the
    k = 671k indices of each of a model's heads are the one store quadratic in T.

    Raises:
        ValueError: the ``zscore`` high rule, or image positions (the blockwise view serves text windows).
    """

    def __init__(self, vectors: Layers, batch: Dict[str, torch.Tensor], query_keys: Optional[Sequence[Any]] = None, block_rows: int = 256, **settings: Any):
        super().__init__(vectors, batch, None, **settings)
        if self.high_rule == "zscore":
            raise ValueError("The blockwise path selects high pairs by the top_fraction rule only; set stats.high_rule=top_fraction or capture.path=dense.")
        if self.positions is not None:
            raise ValueError("The blockwise path serves text windows; image tokens (positions) use capture.path=dense.")
        self.query_keys = tuple(query_keys) if query_keys is not None else None
        self._cell = pool_cell(self.seq_len)
        # a block's (head, rows, T) float32 tensors stay within BLOCK_ELEMENTS (16 MB): fewer rows for long windows
        rows = max(1, min(block_rows, BLOCK_ELEMENTS // max(1, self.n_heads * self.seq_len)))
        self.block_rows = max(self._cell, rows // self._cell * self._cell)
        self._results: Dict[str, Dict[str, Any]] = {}

    @classmethod
    def from_capture(cls, capture: Any, batch: Dict[str, torch.Tensor], **settings: Any) -> "BlockPairView":
        """The blockwise view of one captured batch (``capture.query_keys`` from the recording SDPA)."""
        return cls(capture.vectors, batch, getattr(capture, "query_keys", None), positions=batch.get("positions"), capture=capture, **settings)

    # -- shapes and pairs without pair-space tensors --------------------------------------------
    @property
    def has_attention(self) -> bool:
        return self.query_keys is not None

    @cached_property
    def _offsets(self) -> torch.Tensor:
        """(T + 1,) int64 :func:`pair_offsets`."""
        return pair_offsets(self.seq_len, self.device)

    def pair_ends(self, index: torch.Tensor) -> tuple:
        """(rows, cols, listed) of pair indices (:func:`decode_pairs`)."""
        return decode_pairs(index, self.seq_len)

    def pair_features(self, index: torch.Tensor) -> Dict[str, torch.Tensor]:
        """:meth:`PairView.pair_features`, from each listed pair's two tokens (the blockwise view keeps no pair tables)."""
        rows, cols, listed = self.pair_ends(index)
        features = listed_pair_classes(self.batch, self.tokens, rows, cols, listed)
        features["distance"] = torch.where(listed, cols - rows, torch.zeros_like(rows))
        return features

    sum_dtype = torch.float64

    @cached_property
    def _top_k(self) -> torch.Tensor:
        n = self.class_counts[:, 0].round().long()  # (B,) valid pairs
        k = torch.floor(self.top_fraction * n.double() + 0.5).long().clamp_min(1)
        return torch.where(n > 0, torch.minimum(k, n), torch.zeros_like(k))

    @cached_property
    def _host(self) -> Dict[str, list]:
        real = self.batch["attention_mask"].bool()
        position = torch.arange(self.seq_len, device=real.device)
        first = torch.where(real, position, self.seq_len).amin(-1)
        last = torch.where(real, position + 1, 0).amax(-1)
        ids = self.batch.get("input_ids")
        max_id = int(ids.max()) if ids is not None and ids.numel() else -1
        n = self.tokens.sum(-1)
        partial = (n * (n - 1) // 2) < self.n_pairs
        return {"k": self._top_k.tolist(), "partial": partial.tolist(), "first": first.tolist(), "last": last.tolist(), "max_token_id": max_id}

    def _weights(self, window: int, start: int, stop: int) -> torch.Tensor:
        """(5, rows, T) float32 0/1 masks of :data:`CLASS_TABLES` for pairs (i, j), i in start..stop-1, j > i."""
        b = window
        tokens = self.tokens[b]
        rows = torch.arange(start, stop, device=self.device)
        upper = torch.arange(self.seq_len, device=self.device)[None, :] > rows[:, None]
        valid = upper & tokens[start:stop, None] & tokens[None, :]
        sid = self.batch["sentence_ids"][b]
        same = (sid[start:stop, None] == sid[None, :]) & (sid[start:stop, None] >= 0) & valid
        cross = (sid[start:stop, None] != sid[None, :]) & (sid[start:stop, None] >= 0) & (sid[None, :] >= 0) & valid
        content = self.batch["attention_mask"][b].bool() & ~self.batch["special_mask"][b].bool()
        if self.batch.get("unknown_mask") is not None:
            content = content & ~self.batch["unknown_mask"][b].bool()
        ids = self.batch["input_ids"][b]
        identical = (ids[start:stop, None] == ids[None, :]) & content[start:stop, None] & content[None, :] & valid
        neither = valid & ~same & ~identical
        return torch.stack([valid, same, cross, identical, neither]).float()

    def _blocks(self):
        return [(start, min(start + self.block_rows, self.seq_len)) for start in range(0, self.seq_len, self.block_rows)]

    @cached_property
    def class_counts_by_distance(self) -> torch.Tensor:
        """(batch, 5, T) float64 number of pairs of each :data:`CLASS_TABLES` row at each distance (index 0 unused)."""
        out = torch.zeros(self.batch_size, len(CLASS_TABLES), self.seq_len, dtype=torch.float64, device=self.device)
        for b in range(self.batch_size):
            for start, stop in self._blocks():
                out[b] += _diagonal_sums(self._weights(b, start, stop), start).double()
        return out

    @cached_property
    def class_counts(self) -> torch.Tensor:
        """(batch, 5) float64 number of pairs of each :data:`CLASS_TABLES` row (every pair of a text window has a distance)."""
        return self.class_counts_by_distance.sum(-1)

    @property
    def class_value_sums(self) -> torch.Tensor:
        """(batch, layer, head, 5) the CSM summed over each class of :data:`~attnsim.stats.pairs.geometry.PAIR_CLASSES`
        (summed in float32 block by block, published as float64: :attr:`sum_dtype`)."""
        return super().class_value_sums.double()

    # -- quantities the dense view builds in pair space ------------------------------------------
    @property
    def _pair_mask(self):  # noqa: D102
        raise ValueError("The blockwise view keeps no (batch, P) pair mask; use class_counts, class_counts_by_distance or pair_features.")

    @property
    def _pair_weights(self):  # noqa: D102
        raise ValueError("The blockwise view keeps no (batch, P, 5) pair weights; use class_counts, class_counts_by_distance or pair_features.")

    @property
    def _distance(self):  # noqa: D102
        raise ValueError("The blockwise view keeps no (P,) distances; use pair_features.")

    @property
    def _pairs(self):  # noqa: D102
        raise ValueError("The blockwise view keeps no (2, P) pair table; use pair_ends.")

    @property
    def draws_examples(self) -> bool:
        """Whether example windows' T x T matrices are made for figures: up to :data:`POOL_ABOVE` tokens."""
        return self.seq_len <= POOL_ABOVE

    def csm_windows(self, stop: int) -> torch.Tensor:
        """(stop, layer, head, T, T) float32 CSM of the first ``stop`` windows (figures; up to :data:`POOL_ABOVE` tokens).

        Raises:
            ValueError: the windows are longer (their T x T matrices are what the blockwise view avoids).
        """
        if not self.draws_examples:
            raise ValueError(f"The blockwise view makes no T x T example matrices above {POOL_ABOVE} tokens.")
        return super().csm_windows(stop)

    def attention_windows(self, stop: int) -> Optional[torch.Tensor]:
        """(stop, layer, head, T, T) float32 recomputed attention of the first ``stop`` windows, or None (figures;
        up to :data:`POOL_ABOVE` tokens).

        Raises:
            ValueError: the windows are longer.
        """
        if self.query_keys is None:
            return None
        if not self.draws_examples:
            raise ValueError(f"The blockwise view makes no T x T example matrices above {POOL_ABOVE} tokens.")
        from attnsim.stats.pairs.scores import attention_rows

        return torch.stack([attention_rows(qk, 0, self.seq_len)[:stop] for qk in self.query_keys], 1)

    @cached_property
    def high_by_distance(self) -> torch.Tensor:
        counts = torch.zeros(self.n_layers, self.n_heads, self.seq_len, device=self.device)
        for layer in range(self.n_layers):  # one layer's k pairs per head at a time (bounded memory at long T)
            rows, cols, listed = self.pair_ends(self.high_index[:, layer])  # (B, H, S)
            distance = cols.sub_(rows)  # 0 at unused slots
            del rows
            part = torch.zeros(*distance.shape[:-1], self.seq_len, device=self.device)
            counts[layer] = part.scatter_add_(-1, distance, listed.float()).sum(0)
        counts[..., 0] = 0
        return counts

    @cached_property
    def high_in_attention_index(self) -> torch.Tensor:
        # both index lists ascend: a high pair is a high-attention pair where searchsorted finds it (layer by layer)
        region, high = self.attention_index, self.high_index
        out = high.clone()
        if not region.shape[-1]:
            return out.fill_(self.n_pairs)
        for layer in range(self.n_layers):
            h, r = high[:, layer], region[:, layer]
            # the layer slices made contiguous, as searchsorted would copy them anyway (with a warning)
            found = torch.searchsorted(r.contiguous(), h.contiguous()).clamp_max_(r.shape[-1] - 1)
            inside = (r.gather(-1, found) == h) & (h < self.n_pairs)
            out[:, layer].masked_fill_(~inside, self.n_pairs)
        return out

    # -- reducers: each dense reducer's counterpart from the walks ----------------------------------
    def reduced(self, kind: Type[ChunkReducer]) -> ChunkReducer:
        """Reducer ``kind`` after it has seen every window of the batch: a statistic's reducer run on the pieces of
        the block walk of its source (the same code as on the dense path), or one of the view's own shared
        quantities (:class:`~attnsim.stats.pairs.PairSums`, :class:`~attnsim.stats.pairs.TieCounts`, ...) as the
        block walk computed it.

        Raises:
            ValueError: ``kind`` reads attention the batch was captured without.
        """
        if kind not in self._reduced:
            if kind in _OWN:
                self._reduced[kind] = _record(kind, self._walk_results(kind.source))
            else:
                self.register(kind)
                late = kind.source in self._results  # walked before it was registered: a walk of its own
                self._walk_with(kind.source, [kind] if late else [k for k in self._registered[kind.source] if k not in _OWN])
        return self._reduced[kind]

    def _walk_results(self, source: str) -> Dict[str, Any]:
        """The view's own results of the ``csm`` or ``attention`` walk (each walked once per batch, with every
        registered statistic's reducer of that source)."""
        if source not in self._results:
            self._walk_with(source, [k for k in self._registered[source] if k not in _OWN])
        return self._results[source]

    def _walk_with(self, source: str, kinds: Sequence[Type[ChunkReducer]]) -> None:
        if source == "attention":
            self._need_attention()
        reducers = [kind(self) for kind in kinds]
        results = self._attention_walk(reducers) if source == "attention" else self._csm_walk(reducers)
        self._results.setdefault(source, results)
        for reducer in reducers:
            reducer.finish(self)
        self._reduced.update(zip(kinds, reducers))

    def _need_attention(self) -> None:
        if self.query_keys is None:
            raise ValueError(
                "This statistic needs attention; on the blockwise path the capture must record queries and keys (a finding with needs_attention = True)."
            )

    def _upper_positions(self, start: int, stop: int) -> torch.Tensor:
        """(rows, T) int64 pair index of cell (i, j) for i in start..stop-1 (meaningful where j > i)."""
        rows = torch.arange(start, stop, device=self.device)
        base = self._offsets[start:stop] - rows - 1  # pair (i, j) = off(i) + j - i - 1
        return base[:, None] + torch.arange(self.seq_len, device=self.device)[None, :]

    def _push(self, tops: List[StreamingTop], values: torch.Tensor, start: int, stop: int) -> None:
        """Offer a block's pair values (heads, rows, T), -inf outside valid pairs, to each head's stream."""
        positions = None
        values = values.cpu()  # the selection runs in NumPy (a no-op on a CPU)
        for head, top in enumerate(tops):
            if top.k == 0:
                continue
            row = values[head].reshape(-1).numpy()
            chosen = np.flatnonzero(row > top.threshold)
            if not len(chosen):
                continue
            if positions is None:
                positions = self._upper_positions(start, stop).reshape(-1).to(torch.int32).cpu().numpy()
            top.push(row[chosen], positions[chosen])

    def _index(self, tops: List[List[List[StreamingTop]]]) -> torch.Tensor:
        slots = max(self._host["k"], default=0)
        # int32 (pair indices stay below 2^31 up to T = 65,536): the k indices per head are the one store
        # quadratic in T, and statistics decode them one layer at a time (decode_pairs widens to int64)
        out = torch.full((self.batch_size, self.n_layers, self.n_heads, slots), self.n_pairs, dtype=torch.int32)
        for b, layers in enumerate(tops):
            for layer, heads in enumerate(layers):
                for head, top in enumerate(heads):
                    out[b, layer, head] = top.result(slots, self.n_pairs)
        return out.to(self.device)

    def _csm_walk(self, reducers: Sequence[ChunkReducer] = ()) -> Dict[str, Any]:
        # the view's own sums, and every registered reducer fed one piece per window, layer and block of rows
        L, H, T, B = self.n_layers, self.n_heads, self.seq_len, self.batch_size
        pooled = self._cell > 1
        cells = -(-T // self._cell)
        by_pair = None if pooled else torch.zeros(L, H, self.n_pairs, device=self.device)
        pool_sum = torch.zeros(L, H, cells, cells, dtype=torch.float64, device=self.device) if pooled else None
        pool_count = torch.zeros(cells, cells, dtype=torch.float64, device=self.device) if pooled else None
        squares = torch.zeros(B, L, H, dtype=torch.float64, device=self.device)  # shifted variance sums (PairSums)
        shifted = torch.zeros(B, L, H, dtype=torch.float64, device=self.device)
        shift = torch.stack([csm_window_mean(v, self.tokens, self.normalise) for v in self._vector_layers], 1)  # (B, L, H)
        class_sums = torch.zeros(B, L, H, 5, device=self.device)
        distance_sum = torch.zeros(L, H, T, dtype=torch.float64, device=self.device)
        tops = [[[StreamingTop(self._host["k"][b], spare=1) for _ in range(H)] for _ in range(L)] for b in range(B)]
        for b in range(B):
            for start, stop in self._blocks():
                weights = self._weights(b, start, stop)  # (5, rows, T)
                valid = weights[0]
                # PAIR_CLASSES: valid, same, cross, identical, other (= valid - identical)
                class_masks = torch.stack([weights[0], weights[1], weights[2], weights[3], weights[0] - weights[3]]).reshape(5, -1)
                if pooled:
                    pool_count[start // self._cell : -(-stop // self._cell)] += self._pool(valid[None])[0].double()
                upper = torch.arange(T, device=self.device)[None, :] > torch.arange(start, stop, device=self.device)[:, None]
                for layer in range(L):
                    z = self._vector_layers[layer][b].float()  # (H, T, d)
                    csm = similarity_rows(z[:, start:stop], z, self.normalise)  # (H, rows, T), as the dense view's
                    masked = csm * valid  # 0 outside valid pairs
                    deviation = masked.double().sub_(shift[b, layer, :, None, None]).mul_(valid)  # (H, rows, T), one float64 block
                    shifted[b, layer] += deviation.sum((-1, -2))
                    squares[b, layer] += deviation.square_().sum((-1, -2))
                    del deviation
                    class_sums[b, layer] += (class_masks @ masked.reshape(H, -1).t()).t()  # (H, 5)
                    distance_sum[layer] += _diagonal_sums(masked, start).double()
                    pairs = (int(self._offsets[start]), int(self._offsets[stop]))  # the block's pairs (i, j), j > i
                    in_pairs = masked[:, upper] if reducers or not pooled else None  # (H, p) float32, 0 at invalid pairs
                    if pooled:
                        pool_sum[layer, :, start // self._cell : -(-stop // self._cell)] += self._pool(masked).double()
                    else:
                        by_pair[layer, :, pairs[0] : pairs[1]] += in_pairs
                    if reducers:
                        piece = Piece(b, b + 1, layer, (start, stop), pairs, T, in_pairs[None, None])
                        for reducer in reducers:
                            reducer.update(self, piece)
                    self._push(tops[b][layer], csm.masked_fill(valid == 0, float("-inf")), start, stop)
        return {
            "by_pair": by_pair,
            "pool_sum": pool_sum,
            "pool_count": pool_count,
            "squares": squares,
            "shift": shift,
            "shifted": shifted,
            "class_sums": class_sums.reshape(B, L * H, 5),
            "distance_sum": distance_sum,
            "high_index": self._index(tops),
            "tie_decided": self._tie_decided(tops),
        }

    def _tie_decided(self, tops: List[List[List[StreamingTop]]]) -> torch.Tensor:
        # (B, L, H) int64: how many of each head's k choices ties decided, within the float32 bound of its products
        error = torch.stack([product_error(v.float()) for v in self._vector_layers], 1).cpu()  # (B, L, H)
        out = torch.zeros(self.batch_size, self.n_layers, self.n_heads, dtype=torch.long)
        for b, layers in enumerate(tops):
            for layer, heads in enumerate(layers):
                for head, top in enumerate(heads):
                    out[b, layer, head] = top.tie_decided(float(error[b, layer, head]))
        return out.to(self.device)

    def _pool(self, block: torch.Tensor) -> torch.Tensor:
        """(..., rows, T) -> (..., rows / cell, cells) sums over cells of ``cell`` x ``cell`` tokens (rows: whole cells but the last)."""
        *lead, rows, width = block.shape
        c = self._cell
        pad_r, pad_c = (-rows) % c, (-width) % c
        block = torch.nn.functional.pad(block, (0, pad_c, 0, pad_r))
        return block.reshape(*lead, (rows + pad_r) // c, c, (width + pad_c) // c, c).sum((-3, -1))

    def _attention_walk(self, reducers: Sequence[ChunkReducer] = ()) -> Dict[str, Any]:
        # the high-attention pairs, and every registered reducer fed one piece per window, layer and block of rows
        L, H, T, B = self.n_layers, self.n_heads, self.seq_len, self.batch_size
        tops = [[[StreamingTop(self._host["k"][b]) for _ in range(H)] for _ in range(L)] for b in range(B)]
        for b in range(B):
            # SDPA's own causal rule (a decoder window without padding): keys after the block's last row are
            # masked for every row, and A[j, i] of a key i of the block is 0 for queries j before the block, so
            # only those columns are computed (half the work); their probabilities are exactly 0
            causal = [qk.causal and qk.mask is None for qk in self.query_keys]
            # first pass: each query row's log-sum-exp, per layer (L x (H, T))
            lse = [
                torch.cat([masked_scores(qk, b, start, stop, columns=(0, stop) if causal[layer] else None).logsumexp(-1) for start, stop in self._blocks()], -1)
                for layer, qk in enumerate(self.query_keys)
            ]
            for start, stop in self._blocks():
                rows = torch.arange(start, stop, device=self.device)
                invalid = ~((torch.arange(T, device=self.device)[None, :] > rows[:, None]) & self.tokens[b, start:stop, None] & self.tokens[b][None, :])
                for layer, qk in enumerate(self.query_keys):
                    last = stop if causal[layer] else T  # keys 0..last-1 of these rows can have probability
                    first = start if causal[layer] else 0  # queries first..T-1 can attend to keys of these rows
                    probs = torch.exp(masked_scores(qk, b, start, stop, columns=(0, last)).sub_(lse[layer][:, start:stop, None]))  # (H, rows, last)
                    back = torch.exp(
                        masked_scores(qk, b, start, stop, transposed=True, columns=(first, T)).sub_(lse[layer][:, None, first:])
                    )  # (H, rows, T - first): A[j, i]
                    if reducers:
                        piece = Piece(b, b + 1, layer, (start, stop), (0, 0), last, probs[None, None])
                        for reducer in reducers:
                            reducer.update(self, piece)
                    pair_values = torch.full((H, stop - start, T), float("-inf"), device=self.device)
                    pair_values[..., first:] = back
                    if last > 0:
                        torch.maximum(pair_values[..., :last], probs, out=pair_values[..., :last])
                    pair_values.masked_fill_(invalid, float("-inf"))
                    del probs, back
                    self._push(tops[b][layer], pair_values, start, stop)
        return {"attention_index": self._index(tops)}


__all__ = ["POOL_ABOVE", "CLASS_TABLES", "BlockPairView", "StreamingTop", "decode_pairs", "pair_offsets"]
