"""Finding ``distance``: where high-CSM pairs lie in distance, per layer and head (arXiv:2512.21956).

Definitions: :mod:`attnsim.stats.distance`.
"""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from attnsim.findings.base import Finding, Summary
from attnsim.plots.heads import scalar_mosaic
from attnsim.plots.layers import by_layer
from attnsim.stats.distance import SCALARS, DistanceAccumulator


class DistanceFinding(Finding):
    """Mean distance, short- and long-range shares and spread of high-CSM pairs, each beside chance."""

    name = "distance"
    blockwise = True  # every statistic has a blockwise form (README, "Long contexts")
    description = "distance of high-CSM pairs: mean, short/long-range shares, spread, profile over chance"
    statistics = SCALARS
    profiles = ("distance_high_ratio",)
    profile_bins = "distance_bins"
    config_keys = ("stats.short_range",)
    needs_attention = False

    def build(self):
        return {"distance": DistanceAccumulator(self.n_layers, self.n_heads, self.seq_len, self.cfg.short_range)}

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        s = summary.scalars
        yield "figures/distance/heads.png", scalar_mosaic(s, self.name)
        series = {f"short range (d <= {self.cfg.short_range})": s["short_range_share"], "long range (d >= T/2)": s["long_range_share"]}
        chance = {f"short range (d <= {self.cfg.short_range})": s["short_range_share_chance"], "long range (d >= T/2)": s["long_range_share_chance"]}
        yield "figures/distance/by_layer.png", by_layer(series, "Share of high-CSM pairs by distance", "share of high pairs", chance)
