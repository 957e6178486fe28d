"""The dense walk's own reducers: the view's shared quantities, folded chunk by chunk.

:class:`~attnsim.stats.pairs.PairView` answers its shared quantities (the high pairs, the high-attention pairs, the
CSM sums per pair class, the CSM sums by pair of :class:`PairSums` and the tie counts of :class:`TieCounts`) from
these reducers, run in its CSM and attention walks beside the statistics' own (:mod:`attnsim.stats.pairs.reducers`).
On the compiled CPU path one kernel pass per matrix computes several of them at once
(:func:`~attnsim.stats.pairs.kernels.compiled_csm_walk`; its results are in ``view._kernel_walk`` while the chunk is
walked). The blockwise view computes the same quantities in its own block walk
(:mod:`attnsim.stats.pairs.blocks`); :class:`PairSums` and :class:`TieCounts` name the records both paths return.
Statistics read them through the view (:attr:`~attnsim.stats.pairs.PairView.high_index`,
``view.reduced(PairSums)``, ...), never from these classes' code.

How a dense batch is walked (why the view is built the way it is): the (batch, layer, head, T, T) CSM and attention
tensors of a batch are ~150 MB each for 32 windows of MiniLM, far beyond the CPU cache, and every statistic would
read them again from memory. The view therefore walks the batch a few windows at a time (a *chunk*, a few MB), once
for the CSM and once for the attention: it computes a window's CSM and gathers its pair values (on the compiled path
one kernel pass per matrix computes them as float32 products straight into pair space, chooses the high pairs and
makes the view's own sums), or assembles its attention from the layers, while they are in cache, and hands each
chunk, as one :class:`~attnsim.stats.pairs.reducers.Piece`, to every reducer of that walk: these and the
statistics' own, so that one walk serves every statistic. Neither batch-wide tensor is materialised unless a caller
asks for it (:attr:`~attnsim.stats.pairs.PairView.attention`). High pairs and high-attention pairs are kept as their
pair indices per window and head (2% of the pairs, padded with the sentinel index P).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Type

import torch

from attnsim.stats.pairs.geometry import PAIR_CLASSES, pool_cell, pool_pairs, product_error
from attnsim.stats.pairs.kernels import UNCHOSEN, compiled_available, compiled_pair_top
from attnsim.stats.pairs.reducers import ChunkReducer, Piece
from attnsim.stats.pairs.selection import mask_index, pad_slots, select_top, tie_decided, zscore_pairs


class _ClassSums(ChunkReducer):
    """CSM summed over the pairs of each class of :data:`PAIR_CLASSES`: (B, L*H, 5) float32."""

    source = "csm"

    def __init__(self, view: Any) -> None:
        self.sums = torch.empty(view.batch_size, view.n_layers * view.n_heads, len(PAIR_CLASSES), device=view.device)
        self.rows: Optional[List[torch.Tensor]] = None  # made on first use: the compiled walk sums in its kernel

    def update(self, view: Any, piece: Piece) -> None:
        start, stop, chunk = piece.start, piece.stop, piece.values
        if view._kernel_walk is not None:  # summed (float64) by the kernel that computed the chunk
            self.sums[start:stop] = view._kernel_walk.class_sums
            return
        flat = chunk.view(stop - start, view.n_layers * view.n_heads, view.n_pairs)
        if not view._on_accelerator():
            if self.rows is None:
                # B separately allocated (5, P) pair-class masks, the narrow left operand of (5, P) @ (P, L*H)
                # products (several times faster on a CPU than (L*H, P) @ (P, 5))
                self.rows = [w.t().contiguous() for w in view._pair_weights]
            for window in range(start, stop):
                # One 2-D product per window on freshly allocated (64-byte aligned) operands: BLAS
                # rounds a product differently with the operands' alignment and batch layout, so a
                # window's sums would depend on its batch-mates, which ratios of near-cancelling sums
                # (e.g. the repetition statistics' CSM ratio) amplify. Only windows after the first
                # of a chunk need the copy (a chunk is one window for the usual model sizes).
                part = flat[window - start] if window == start else flat[window - start].clone()
                self.sums[window] = (self.rows[window] @ part.t()).t()
        else:  # one batched product for the whole chunk (the batch) on an accelerator
            self.sums[start:stop] = torch.bmm(flat, view._pair_weights[start:stop])


class PairSums(ChunkReducer):
    """Per-batch CSM sums by pair, folded in the view's CSM walk (the ``csm`` statistics read them).

    The variance sums are *shifted*: per window, layer and head, a shift ``K`` near the window's mean, the sum of the
    valid values' deviations from it and of their squares. The dense walk holds a window's values at once and takes
    ``K`` = their own mean (two passes); the blockwise walk takes ``K`` from the vectors
    (:func:`~attnsim.stats.pairs.geometry.csm_window_mean`) before its blocks. Either way no E[x²] - E[x]² on raw
    values: a sink head's CSM (mean about 100 spreads) keeps its standard deviation to float64 precision.

    Attributes:
        by_pair: (layer, head, P) float32 CSM of each pair summed over the batch's windows (invalid pairs add 0);
            None on the blockwise path for pooled windows (longer than :data:`~attnsim.stats.pairs.geometry.MATRIX_CELLS` tokens).
        pool_sum: (layer, head, G, G) float64 the same summed by cells of
            :func:`~attnsim.stats.pairs.geometry.pool_cell` tokens (pair (i, j) in cell (i // c, j // c)), and
            pool_count: (G, G) float64 the valid pairs of each cell over the windows; both None up to
            :data:`~attnsim.stats.pairs.geometry.MATRIX_CELLS` tokens.
        distance_sum: (layer, head, T) CSM summed over the valid pairs at each distance (float32 dense, float64
            blockwise).
        shift: (batch, layer, head) float64 ``K`` of each window.
        shifted: (batch, layer, head) float64 sum of ``x - K`` over each window's valid pairs.
        squares: (batch, layer, head) float64 sum of ``(x - K)²`` over each window's valid pairs.
    """

    source = "csm"

    def __init__(self, view: Any) -> None:
        self.by_pair = torch.zeros(view.n_layers, view.n_heads, view.n_pairs, device=view.device)
        lead = (view.batch_size, view.n_layers, view.n_heads)
        self.shift = torch.zeros(lead, dtype=torch.float64, device=view.device)
        self.shifted = torch.zeros(lead, dtype=torch.float64, device=view.device)
        self.squares = torch.empty(lead, dtype=torch.float64, device=view.device)

    def update(self, view: Any, piece: Piece) -> None:
        start, stop, chunk = piece.start, piece.stop, piece.values
        count = view._pair_weights[start:stop, :, 0].sum(-1, dtype=torch.float64)[:, None, None]  # (c, 1, 1) valid pairs
        if view._kernel_walk is not None:  # the kernel that computed the chunk added it to by_pair, and centred the squares
            walked = view._kernel_walk
            sums = walked.class_sums[..., 0].reshape(walked.squares.shape).to(self.shift.device)  # (c, L, H) float64
            self.shift[start:stop] = torch.where(count > 0, sums / count.clamp_min(1), 0.0)
            self.squares[start:stop] = walked.squares.to(self.squares.device)
            return  # shifted: 0 (the shift is the window's own mean)
        self.by_pair += chunk.sum(0)
        values = chunk.double()  # (c, L, H, P), 0 at invalid pairs
        shift = torch.where(count > 0, values.sum(-1) / count.clamp_min(1), 0.0)  # the window's mean (first pass)
        deviation = (values - shift[..., None]) * view._pair_weights[start:stop, None, None, :, 0].double()
        self.shift[start:stop] = shift
        self.shifted[start:stop] = deviation.sum(-1)
        self.squares[start:stop] = torch.linalg.vecdot(deviation, deviation)

    def finish(self, view: Any) -> None:
        """The sums by distance, and by cells of tokens for long windows, from the sums by pair."""
        self.distance_sum = view._by_distance(self.by_pair)  # (L, H, T), no (P, T) one-hot
        self.pool_sum = self.pool_count = None
        cell = pool_cell(view.seq_len)
        if cell > 1:
            self.pool_sum = pool_pairs(self.by_pair, view._pairs, view.seq_len, cell)
            self.pool_count = pool_pairs(view._pair_weights[..., 0].sum(0), view._pairs, view.seq_len, cell)


class TieCounts(ChunkReducer):
    """How many of each window's high pairs ties decided, per layer and head (:attr:`decided`), from the CSM walk.

    Attributes:
        decided: (batch, layer, head) int64, :func:`~attnsim.stats.pairs.selection.tie_decided` of each window's CSM
            with the float32 bound of its products (:func:`~attnsim.stats.pairs.geometry.product_error`) as the
            tolerance; 0 under the z-score rule (a threshold keeps every tied pair).
    """

    source = "csm"

    def __init__(self, view: Any) -> None:
        self.decided = torch.zeros(view.batch_size, view.n_layers, view.n_heads, dtype=torch.long, device=view.device)

    def update(self, view: Any, piece: Piece) -> None:
        start, stop, chunk = piece.start, piece.stop, piece.values
        if view.high_rule != "top_fraction":
            return
        if view._kernel_walk is not None:  # the kernel counted them beside its choice
            self.decided[start:stop] = view._kernel_walk.tie_decided.to(self.decided.device)
            return
        error = product_error(view._vector_chunk(start, stop))  # (c, L, H)
        valid = view._pair_mask[start:stop]
        for window in range(stop - start):
            k = view._host["k"][start + window]
            self.decided[start + window] = tie_decided(chunk[window], valid[window], k, error[window])


class _HighPairs(ChunkReducer):
    """Indices of the high-CSM pairs (:attr:`index`)."""

    source = "csm"

    def __init__(self, view: Any) -> None:
        self.zscore = view.high_rule == "zscore"
        self.sentinel = view.n_pairs
        slots = 0 if self.zscore else max(view._host["k"], default=0)
        self.selected = torch.full((view.batch_size, view.n_layers, view.n_heads, slots), view.n_pairs, dtype=torch.long, device=view.device)
        self.parts: List[torch.Tensor] = []  # zscore rule: each chunk's (c, L, H, S_chunk) indices

    def update(self, view: Any, piece: Piece) -> None:
        start, stop, chunk = piece.start, piece.stop, piece.values
        if self.zscore:
            valid = view._pair_mask[start:stop].view(stop - start, 1, 1, view.n_pairs)
            self.parts.append(mask_index(zscore_pairs(chunk, valid, view.zscore), view.n_pairs))
            return
        k, valid = view._host["k"][start:stop], view._valid_chunk(start, stop, chunk.dim())
        if view._narrow_csm:
            chosen = self._certified(view, start, stop, chunk, k, valid)
        else:
            chosen = select_top(chunk, k, valid, view.n_pairs)
        self.selected[start:stop, ..., : chosen.shape[-1]] = chosen

    def _certified(self, view: Any, start: int, stop: int, chunk: torch.Tensor, k: Sequence[int], valid: Optional[torch.Tensor]) -> torch.Tensor:
        # The chunk's CSM is a float32 product: its top k are the float64 CSM's top k wherever the gap between
        # the k-th and (k+1)-th values exceeds twice the product's error bound (then every chosen float64 value
        # exceeds every other one); the kernel chose rows without that margin again from float64 products
        # (kernels.compiled_csm_walk). Rows it left (NaN), and chunks it declined, are chosen here from the float64
        # CSM, so the high pairs are always those of the float64 CSM.
        if view._kernel_walk is None:
            return select_top(view._wide_pair_values(start, stop), k, valid, view.n_pairs)
        index = view._kernel_walk.index  # chosen by the kernel that computed the chunk
        unsure = view._kernel_walk.status == UNCHOSEN  # (c, L, H)
        for window in unsure.any(-1).any(-1).nonzero().flatten().tolist():
            rows = torch.zeros_like(unsure)
            rows[window] = unsure[window]
            values = view._wide_pair_values(start, stop, rows)  # (R, P)
            row_valid = valid.expand_as(chunk)[rows] if valid is not None else None
            chosen = select_top(values[:, None], [k[window]], row_valid[:, None] if row_valid is not None else None, view.n_pairs)[:, 0]
            index[rows] = torch.nn.functional.pad(chosen, (0, index.shape[-1] - chosen.shape[-1]), value=view.n_pairs)
        return index

    @property
    def index(self) -> torch.Tensor:
        """(B, L, H, S) int64 ascending, P in unused slots (under the zscore rule S is the batch's most high pairs)."""
        return pad_slots(self.parts, self.sentinel) if self.zscore else self.selected


class _HighAttentionPairs(ChunkReducer):
    """Indices of the high-attention pairs: (B, L, H, S) int64, ascending, P in unused slots."""

    source = "attention"

    def __init__(self, view: Any) -> None:
        slots = max(view._host["k"], default=0)
        self.index = torch.full((view.batch_size, view.n_layers, view.n_heads, slots), view.n_pairs, dtype=torch.long, device=view.device)
        self.backward = view._pairs[1] * view.seq_len + view._pairs[0]  # A[j, i] of pair (i, j)
        self.done = self._by_layer(view)

    def _by_layer(self, view: Any) -> bool:
        # The compiled kernel reads each layer's (batch, head, T, T) maps as captured, whole batch at once (one
        # call per layer, no pair values gathered, no windows stacked); False where the chunks are needed
        layers = view._captured_attention_layers
        if layers is None or not compiled_available():
            return False
        for layer, maps in enumerate(layers):
            chosen = compiled_pair_top(maps.float(), view.tokens, view._host["k"], symmetric=True)
            if chosen is None:
                return False
            self.index[:, layer, :, : chosen.shape[-1]] = chosen
        return True

    def update(self, view: Any, piece: Piece) -> None:
        start, stop, chunk = piece.start, piece.stop, piece.values.flatten(1, 2)  # (c, l*H, T, T), the piece's l layers
        if self.done:
            return
        count, layers = stop - start, piece.layers
        chosen = compiled_pair_top(chunk, view.tokens[start:stop], view._host["k"][start:stop], symmetric=True)  # the square maps read
        if chosen is not None:
            self.index[start:stop, layers, :, : chosen.shape[-1]] = chosen.view(count, -1, view.n_heads, chosen.shape[-1])
            return
        pair_values = torch.maximum(view._pair_values(chunk), view._pair_values(chunk, self.backward))  # (c, l*H, P)
        pair_values = pair_values.view(count, -1, view.n_heads, view.n_pairs)
        valid = view._valid_chunk(start, stop, 4)
        if valid is not None:  # a temporary: mask it in place rather than in a copy
            pair_values.masked_fill_(~valid, float("-inf"))
        chosen = select_top(pair_values, view._host["k"][start:stop], None, view.n_pairs)
        self.index[start:stop, layers, :, : chosen.shape[-1]] = chosen


SHARED: Dict[str, Tuple[Type[ChunkReducer], ...]] = {"csm": (_ClassSums, _HighPairs), "attention": (_HighAttentionPairs,)}
"""The reducers every dense walk runs, by source (the view's high pairs, class sums and high-attention pairs)."""

__all__ = ["SHARED", "PairSums", "TieCounts"]
