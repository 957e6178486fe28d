"""Pure tensor statistics and mergeable accumulators (no I/O, no MLflow)."""

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.csm import CSMAccumulator
from attnsim.stats.pairs import PairView, context_similarity, high_pairs_top_fraction, high_pairs_zscore, pair_indices, token_mask

__all__ = [
    "Accumulator",
    "safe_divide",
    "CSMAccumulator",
    "PairView",
    "context_similarity",
    "high_pairs_top_fraction",
    "high_pairs_zscore",
    "pair_indices",
    "token_mask",
]
