"""Signal and noise: which high-CSM pairs no simple rule explains, per layer and head.

A high-CSM pair (see :mod:`attnsim.stats.pairs`) is *explained* when at least
one of these holds: short distance (d = j - i <= ``short_range``), same
sentence, identical tokens, or high attention (the pair is in the window's
high-attention region, :mod:`attnsim.stats.attention_regions`). Per layer l
and head h, pooled over windows:

- ``explained_short``, ``explained_sentence``, ``explained_identical``,
  ``explained_attention``: share of high pairs meeting each rule (they overlap).
- ``unexplained_share``: share of high pairs meeting none of them (noise, or
  structure these rules do not name).
- ``unexplained_share_chance``: the same share under a uniform choice of the
  window's k high pairs among its n valid pairs: sum k * u / n over sum k,
  u the window's valid pairs meeting none of the rules for that head.
"""

from __future__ import annotations

from typing import Dict, List, Mapping

import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView

SCALARS = (
    "explained_short",
    "explained_sentence",
    "explained_identical",
    "explained_attention",
    "unexplained_share",
    "unexplained_share_chance",
)


def rule_counts(view: PairView, index: torch.Tensor, short_range: int) -> torch.Tensor:
    """Per-head numbers of listed pairs meeting each static rule: short distance (d <= ``short_range``), same
    sentence, identical tokens, and none of the three (the *rest*).

    Args:
        view: the batch's view (dense, blockwise or single-window); reads :meth:`~attnsim.stats.pairs.PairView.pair_features` (through :meth:`~attnsim.stats.pairs.PairView.high_counts`).
        index: (batch, layer, head, S) pair indices, P in unused slots (high pairs, high-attention pairs, or both).
        short_range: largest distance counted as short (tokens); a pair without a distance (-1) is never short.

    Returns:
        (batch, layer, head, 4) in the view's ``sum_dtype``: short, same-sentence, identical, rest.
    """

    def select(f: Dict[str, torch.Tensor]) -> List[torch.Tensor]:  # four (B, 1, H, S) masks
        short = f["valid"] & (f["distance"] >= 0) & (f["distance"] <= short_range)
        rest = f["valid"] & ~(short | f["same"] | f["identical"])
        return [short, f["same"], f["identical"], rest]

    return view.high_counts(index, select)


def _noise_update(
    high_rules: torch.Tensor,
    both_rest: torch.Tensor,
    region_rest: torch.Tensor,
    high_count: torch.Tensor,
    both_count: torch.Tensor,
    class_counts: torch.Tensor,
    class_counts_by_distance: torch.Tensor,
    short_range: int,
) -> Dict[str, torch.Tensor]:
    """One batch's increments of the :class:`NoiseAccumulator` states.

    Args:
        high_rules: (B, L, H, 4) :func:`rule_counts` of the high pairs.
        both_rest: (B, L, H) high pairs in the rest that are also high-attention pairs; region_rest: (B, L, H)
            high-attention pairs in the rest (the last column of :func:`rule_counts`).
        high_count: (B, L, H) number of high pairs k; both_count: (B, L, H) of pairs both high and high-attention.
        class_counts: (B, 5) pairs of each :data:`~attnsim.stats.pairs.CLASS_TABLES` row;
            class_counts_by_distance: (B, 5, T) the same at each distance. Their dtype sets the arithmetic's.
        short_range: largest distance counted as short (tokens).

    Returns:
        State name -> float64 increment, each (L, H).
    """
    k = high_count.to(class_counts.dtype)  # (B, L, H)
    n = class_counts[:, 0]  # (B,)
    # valid pairs explained by no static rule: neither same-sentence nor identical, and not short
    rest = class_counts[:, 4] - class_counts_by_distance[:, 4, : short_range + 1].sum(-1)  # (B,)
    unexplained_pairs = rest[:, None, None] - region_rest  # (B, L, H): u
    return {
        "high": k.sum(0).double(),
        "short": high_rules[..., 0].sum(0).double(),
        "sentence": high_rules[..., 1].sum(0).double(),
        "identical": high_rules[..., 2].sum(0).double(),
        "attention": both_count.sum(0).double(),
        "unexplained": (high_rules[..., 3] - both_rest).sum(0).double(),
        "unexplained_chance": (k * safe_divide(unexplained_pairs, n[:, None, None].expand_as(k)).nan_to_num(0.0)).sum(0).double(),
    }


def _noise_compute(state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Scalars from the :class:`NoiseAccumulator` states, each (layer, head) float64; NaN without high pairs."""
    high = state["high"]
    return {
        "explained_short": safe_divide(state["short"], high),
        "explained_sentence": safe_divide(state["sentence"], high),
        "explained_identical": safe_divide(state["identical"], high),
        "explained_attention": safe_divide(state["attention"], high),
        "unexplained_share": safe_divide(state["unexplained"], high),
        "unexplained_share_chance": safe_divide(state["unexplained_chance"], high),
    }


class NoiseAccumulator(Accumulator):
    """Streaming shares of high-CSM pairs explained by distance, sentence, identity and attention.

    Args:
        n_layers, n_heads: model shape.
        short_range: largest distance counted as short (tokens).

    States (float64 sums, (L, H)): high pairs, high pairs meeting each rule,
    high pairs meeting none, and the chance value of the latter.
    """

    def __init__(self, n_layers: int, n_heads: int, short_range: int = 4):
        super().__init__()
        self.short_range = short_range
        for name in ("high", "short", "sentence", "identical", "attention", "unexplained", "unexplained_chance"):
            self.add_sum(name, n_layers, n_heads)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        both_rest = rule_counts(view, view.high_in_attention_index, self.short_range)[..., 3]
        region_rest = rule_counts(view, view.attention_index, self.short_range)[..., 3]
        high = rule_counts(view, view.high_index, self.short_range)
        self.fold(
            _noise_update(
                high, both_rest, region_rest, view.high_count, view.high_in_attention, view.class_counts, view.class_counts_by_distance, self.short_range
            )
        )

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64; NaN without high pairs."""
        return _noise_compute(self.metric_state)
