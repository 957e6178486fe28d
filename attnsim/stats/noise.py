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

from typing import Dict

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
        weights = view.pair_weights  # (B, P, 5): valid, same, cross, identical, other
        valid, same, identical = weights[..., 0], weights[..., 1], weights[..., 3]
        short = valid * ((view.distance >= 0) & (view.distance <= self.short_range)).float()  # (B, P); -1: pair without a distance
        static = torch.maximum(torch.maximum(short, same), identical)  # (B, P): explained without attention
        # not explained by the static rules: (1 - static) on valid pairs
        rest = valid - static  # (B, P) 0/1
        counts = view.high_sums(torch.stack([short, same, identical, rest], -1))  # (L, B, H, 4)
        # high pairs in the rest that are also high-attention; high-attention pairs in the rest
        high_rest_region = view.high_in_attention_sums(rest[..., None])[..., 0]  # (L, B, H)
        region_rest = view.attention_sums(rest[..., None])[..., 0]  # (L, B, H)
        k = view.high_count.float()  # (L, B, H)
        n = valid.sum(-1)  # (B,)
        unexplained_pairs = rest.sum(-1)[None, :, None] - region_rest  # (L, B, H): u
        self.high += k.sum(1).double()
        self.short += counts[..., 0].sum(1).double()
        self.sentence += counts[..., 1].sum(1).double()
        self.identical += counts[..., 2].sum(1).double()
        self.attention += view.high_in_attention.sum(1).double()
        self.unexplained += (counts[..., 3] - high_rest_region).sum(1).double()
        self.unexplained_chance += (k * safe_divide(unexplained_pairs, n[None, :, None].expand_as(k)).nan_to_num(0.0)).sum(1).double()

    def compute(self) -> Dict[str, torch.Tensor]:
        """Scalars, each (layer, head) float64; NaN without high pairs."""
        return {
            "explained_short": safe_divide(self.short, self.high),
            "explained_sentence": safe_divide(self.sentence, self.high),
            "explained_identical": safe_divide(self.identical, self.high),
            "explained_attention": safe_divide(self.attention, self.high),
            "unexplained_share": safe_divide(self.unexplained, self.high),
            "unexplained_share_chance": safe_divide(self.unexplained_chance, self.high),
        }
