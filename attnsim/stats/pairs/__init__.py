"""Token pairs: their geometry, the exact top-k selection of high pairs, and the per-batch view of shared quantities.

- :mod:`attnsim.stats.pairs.geometry`: pair space, distances, the CSM, pair masks and classes.
- :mod:`attnsim.stats.pairs.selection`: the high-pair rules (top fraction, z-score) and their tie rule.
- :mod:`attnsim.stats.pairs.view`: :class:`PairView`, the statistics' one contract: the published quantities
  every statistic reads, alike on the dense path, the blockwise path (:mod:`attnsim.stats.pairs.blocks`) and a
  single window (:meth:`PairView.single_window`).
- :mod:`attnsim.stats.pairs.reducers`: the reducer protocol (:class:`ChunkReducer`, :class:`Piece`): a statistic's
  per-batch sums, folded in the view's window walks on every path.
- :mod:`attnsim.stats.pairs.shared`: the dense walk's own reducers (high pairs, class sums, :class:`PairSums`,
  :class:`TieCounts`).
"""

from attnsim.stats.pairs.geometry import (
    PAIR_CLASSES,
    context_similarity,
    cross_sentence_pairs,
    distance_onehot,
    grid_distance,
    identical_pairs,
    pair_classes,
    pair_distance,
    pair_indices,
    same_sentence_pairs,
    token_mask,
    valid_pairs,
)
from attnsim.stats.pairs.reducers import SOURCES, ChunkReducer, Piece
from attnsim.stats.pairs.selection import (
    SELECTION_BLOCK,
    dense_pairs,
    exact_top,
    exact_top_per_row,
    head_sums,
    indexed_sums,
    mask_index,
    pad_slots,
    partition_top,
    select_top,
    tie_decided,
    top_fraction_counts,
    top_indices,
    zscore_pairs,
)
from attnsim.stats.pairs.shared import PairSums, TieCounts
from attnsim.stats.pairs.view import (
    CHUNK_ELEMENTS_ACCELERATOR,
    CHUNK_ELEMENTS_CPU,
    CLASS_TABLES,
    PairView,
)

__all__ = [
    "PAIR_CLASSES",
    "context_similarity",
    "cross_sentence_pairs",
    "distance_onehot",
    "grid_distance",
    "identical_pairs",
    "pair_classes",
    "pair_distance",
    "pair_indices",
    "same_sentence_pairs",
    "token_mask",
    "valid_pairs",
    "SELECTION_BLOCK",
    "dense_pairs",
    "exact_top",
    "exact_top_per_row",
    "mask_index",
    "pad_slots",
    "partition_top",
    "select_top",
    "tie_decided",
    "top_fraction_counts",
    "top_indices",
    "zscore_pairs",
    "CHUNK_ELEMENTS_ACCELERATOR",
    "CHUNK_ELEMENTS_CPU",
    "SOURCES",
    "CLASS_TABLES",
    "ChunkReducer",
    "Piece",
    "PairSums",
    "PairView",
    "TieCounts",
    "head_sums",
    "indexed_sums",
]
