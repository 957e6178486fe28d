"""Pure tensor statistics and mergeable accumulators (no I/O, no MLflow)."""

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.csm import CSMAccumulator
from attnsim.stats.pairs import ChunkReducer, PairView, context_similarity, pair_indices, token_mask, zscore_pairs

__all__ = [
    "Accumulator",
    "safe_divide",
    "CSMAccumulator",
    "ChunkReducer",
    "PairView",
    "context_similarity",
    "pair_indices",
    "token_mask",
    "zscore_pairs",
]
