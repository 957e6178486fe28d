"""The pair-space tables of a batch of windows: which tokens and pairs enter the statistics, each pair's distance
and classes, and per-head sums and counts over listed pairs.

Source: Halevi et al., "Self-attention vector output similarities reveal how machines pay attention",
arXiv:2512.21956: pairs (i, j), i < j, of one window's T tokens, P = T(T-1)/2 of them, in the order of
:func:`~attnsim.stats.pairs.geometry.pair_indices`; a pair's classes (same sentence, cross sentence, identical token)
and distance j - i follow :mod:`attnsim.stats.pairs.geometry`.

:class:`PairTables` is the part of :class:`~attnsim.stats.pairs.view.PairView` (and so of the blockwise view) that
depends on the batch's tokens only, not on any head's vectors or attention: it reads the view's ``batch``,
``seq_len``, ``n_pairs``, ``device``, ``positions`` and ``include_special``. Each table is made once per batch, on
first use. No I/O.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Dict, List, Tuple

import torch

from attnsim.stats.pairs.geometry import pair_classes, pair_distance, pair_indices, token_mask, valid_pairs

CLASS_TABLES = ("valid", "same", "cross", "identical", "neither")
"""Rows of :attr:`PairTables.class_counts` and :attr:`PairTables.class_counts_by_distance`: valid pairs, same-sentence,
cross-sentence, identical-token, and valid pairs that are neither same-sentence nor identical (the noise statistic's
static rest). (The CSM sums :attr:`~attnsim.stats.pairs.view.PairView.class_value_sums` follow :data:`~attnsim.stats.pairs.geometry.PAIR_CLASSES`,
whose last class is *other*: valid and not identical.)"""


class PairTables:
    """Token and pair tables of one batch (mixin of :class:`~attnsim.stats.pairs.view.PairView`); see the module docstring.

    Shapes use B windows, L layers, H heads, T tokens, P = T(T-1)/2 pairs and S slots.
    """

    @cached_property
    def tokens(self) -> torch.Tensor:
        """(batch, T) bool, tokens that enter statistics."""
        return token_mask(self.batch["attention_mask"], self.batch["special_mask"], self.include_special)

    @cached_property
    def _pairs(self) -> torch.Tensor:
        """(2, P) rows and columns of the pairs i < j."""
        return pair_indices(self.seq_len, self.device)

    @cached_property
    def _flat_pairs(self) -> torch.Tensor:
        # (P,) int64, index i * T + j of each pair in a flattened T x T matrix
        return self._pairs[0] * self.seq_len + self._pairs[1]

    def pair_ends(self, index: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(rows, cols, listed) of pair indices (..., S): each pair's two tokens (pair 0's, 0 and 1, at sentinel
        slots) and whether the slot holds a pair."""
        ends = self.__dict__.get("_ends")  # (2, P + 1) the pairs' rows and columns, and pair 0's at the sentinel P
        ends = self.__dict__.setdefault("_ends", torch.cat([self._pairs, self._pairs[:, :1]], 1)) if ends is None else ends
        return ends[0][index], ends[1][index], index < self.n_pairs

    @cached_property
    def _distance(self) -> torch.Tensor:
        """(P,) int64, distance j - i of each pair (1..T-1); with ``positions``, the rounded Euclidean
        distance on the patch grid in patches, -1 for pairs holding a token without a grid position."""
        return pair_distance(self._pairs, self.positions)

    @cached_property
    def _pair_mask(self) -> torch.Tensor:
        """(batch, P) bool, valid pairs."""
        return valid_pairs(self.tokens, self._pairs)

    def _by_distance(self, by_pair: torch.Tensor) -> torch.Tensor:
        """(L, H, P) float32 values by pair -> (L, H, T) float32 their sums at each distance (index 0 unused).

        Added pair by pair into each pair's distance column in float64, one layer at a time, and rounded once: no
        (P, T) one-hot (4·P·T bytes, 17 GB at T = 2048) is made. A pair without a distance (-1, see :attr:`_distance`)
        goes to a column past the last, dropped: it enters no distance statistic.
        """
        column = torch.where(self._distance >= 0, self._distance, self.seq_len)
        out = by_pair.new_zeros(*by_pair.shape[:-1], self.seq_len)
        for layer in range(by_pair.shape[0]):
            sums = by_pair.new_zeros(*by_pair.shape[1:-1], self.seq_len + 1, dtype=torch.float64)
            out[layer] = sums.index_add_(-1, column, by_pair[layer].double())[..., : self.seq_len]
        return out

    @cached_property
    def _pair_weights(self) -> torch.Tensor:
        """(batch, P, 5) float32 0/1 masks of the pair classes :data:`~attnsim.stats.pairs.geometry.PAIR_CLASSES`:
        valid, same-sentence, cross-sentence, identical-token and other (valid, not identical) pairs."""
        return pair_classes(self.batch, self._pair_mask, self._pairs)

    sum_dtype = torch.float32
    """Precision of the view's pair counts (:attr:`class_counts`, :attr:`class_counts_by_distance`) and of the
    statistics' per-batch arithmetic on them: float32 on the dense path, float64 on the blockwise path. Counts are
    exact integers either way; the ratios and products the statistics form from them keep the precision each path
    has always had."""

    @cached_property
    def _table_rows(self) -> torch.Tensor:
        # (batch, 5, P) float32 0/1 masks of CLASS_TABLES, one contiguous row per class
        w = self._pair_weights  # valid, same, cross, identical, other
        neither = w[..., 0] - torch.maximum(w[..., 1], w[..., 3])  # valid, neither same-sentence nor identical
        return torch.stack([w[..., 0], w[..., 1], w[..., 2], w[..., 3], neither], 1)

    @cached_property
    def class_counts(self) -> torch.Tensor:
        """(batch, 5) :attr:`sum_dtype` number of pairs of each :data:`CLASS_TABLES` row in each window (every pair,
        with or without a distance)."""
        return self._table_rows.sum(-1).to(self.sum_dtype)

    @cached_property
    def class_counts_by_distance(self) -> torch.Tensor:
        """(batch, 5, T) :attr:`sum_dtype` number of pairs of each :data:`CLASS_TABLES` row at each distance
        (index 0 unused; pairs without a distance, see :attr:`_distance`, are in no column)."""
        # added pair by pair into each pair's distance column (0/1 terms: exact counts in float32 in any order, and
        # about a sixth of the (batch, 5, P) @ (P, T) one-hot product's time); a pair without a distance goes to a
        # column past the last, dropped
        column = torch.where(self._distance >= 0, self._distance, self.seq_len)
        rows = self._table_rows
        counts = rows.new_zeros(*rows.shape[:-1], self.seq_len + 1).index_add_(-1, column, rows)
        return counts[..., : self.seq_len].to(self.sum_dtype)

    def pair_features(self, index: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Pair classes and distance of listed pairs, from their indices.

        Args:
            index: (batch, ..., S) int pair indices, P (the sentinel) in unused slots, e.g. one layer of
                :attr:`high_index`.

        Returns:
            ``valid``, ``same``, ``cross``, ``identical`` (bool) and ``distance`` (int64: j - i, or the grid distance
            with image ``positions``, -1 for a pair without one; 0 at unused slots), each shaped like ``index``;
            unused slots are in no class. The classes are those of :func:`~attnsim.stats.pairs.geometry.pair_classes`.
        """
        # one lookup per slot in the batch's tables (made once): classes as bits (1 valid, 2 same, 4 cross, 8 identical)
        flat = index.long().clamp_max(self.n_pairs).reshape(index.shape[0], -1)  # (batch, n), P: the sentinel
        codes = self._pair_tables[0].gather(1, flat).view(index.shape)
        features = {name: (codes & bit).bool() for name, bit in (("valid", 1), ("same", 2), ("cross", 4), ("identical", 8))}  # each contiguous
        features["distance"] = self._pair_tables[1].take(flat).view(index.shape)
        return features

    @cached_property
    def _pair_tables(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """(batch, P + 1) uint8 the classes of :func:`pair_classes` as bits, (P + 1,) int64 the distances; 0 at the sentinel P."""
        w, d = self._pair_weights.to(torch.uint8), self._distance  # (B, P, 5) 0/1, (P,)
        return torch.nn.functional.pad(w[..., 0] | w[..., 1] << 1 | w[..., 2] << 2 | w[..., 3] << 3, (0, 1)), torch.cat([d, d.new_zeros(1)])

    def high_sums(self, index: torch.Tensor, weigh: Any) -> torch.Tensor:
        """Per-head sums of weights of listed pairs: ``sum_s weigh(features)[b, l, h, s, k]``, one layer at a time.

        Args:
            index: (batch, layer, head, S) pair indices, P in unused slots (e.g. :attr:`high_index`).
            weigh: a function of one layer's :meth:`pair_features` (each (batch, 1, head, S)) returning the
                (batch, 1, head, S, K) weights of its pairs (0 at unused slots), in :attr:`sum_dtype`.

        Returns:
            (batch, layer, head, K) the weights summed over each head's listed pairs.
        """
        return torch.cat([weigh(features).sum(-2) for features in self._layer_features(index)], 1)

    def high_counts(self, index: torch.Tensor, select: Any) -> torch.Tensor:
        """Per-head numbers of listed pairs meeting each condition: :meth:`high_sums` for 0/1 weights, counted as
        integers (exact in any order, and cheaper than summing weights).

        Args:
            index: (batch, layer, head, S) pair indices, P in unused slots (e.g. :attr:`high_index`).
            select: a function of one layer's :meth:`pair_features` (each (batch, 1, head, S)) returning a sequence of
                K (batch, 1, head, S) bool masks of the pairs meeting each condition (False at unused slots).

        Returns:
            (batch, layer, head, K) in :attr:`sum_dtype`: the listed pairs meeting each condition.
        """
        counts = [torch.stack([mask.sum(-1) for mask in select(features)], -1) for features in self._layer_features(index)]  # int64
        return torch.cat(counts, 1).to(self.sum_dtype)

    def _layer_features(self, index: torch.Tensor) -> List[Dict[str, torch.Tensor]]:
        """:meth:`pair_features` of each layer of ``index`` (batch, layer, head, S), made once per batch and index
        (:meth:`high_sums` and :meth:`high_counts` never write to them) and kept with the index (its id not reused)."""
        entry = self.__dict__.setdefault("_features_by_index", {}).get(id(index))
        if entry is None or entry[0] is not index:
            entry = self._features_by_index[id(index)] = (index, [self.pair_features(index[:, n : n + 1]) for n in range(index.shape[1])])
        return entry[1]
