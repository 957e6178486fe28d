"""Finding ``noise``: share of high-CSM pairs no simple rule explains (signal and noise).

Definitions: :mod:`attnsim.stats.noise`.
"""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from attnsim.findings.base import Finding, Summary
from attnsim.plots.heads import scalar_mosaic
from attnsim.plots.layers import by_layer
from attnsim.stats.noise import SCALARS, NoiseAccumulator


class NoiseFinding(Finding):
    """Shares of high-CSM pairs explained by short distance, same sentence, identical tokens, high attention, and by none."""

    name = "noise"
    blockwise = True  # every statistic has a blockwise form (README, "Long contexts")
    description = "signal and noise: share of high-CSM pairs explained by distance, sentence, identity, attention, or by none"
    statistics = SCALARS
    config_keys = ("stats.short_range",)
    needs_attention = True

    def build(self):
        return {"noise": NoiseAccumulator(self.n_layers, self.n_heads, self.cfg.short_range)}

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        s = summary.scalars
        yield "figures/noise/heads.png", scalar_mosaic(s, self.name)
        series = {
            f"short (d <= {self.cfg.short_range})": s["explained_short"],
            "same sentence": s["explained_sentence"],
            "identical tokens": s["explained_identical"],
            "high attention": s["explained_attention"],
            "none of these": s["unexplained_share"],
        }
        yield (
            "figures/noise/by_layer.png",
            by_layer(series, "What explains high-CSM pairs", "share of high pairs", {"none of these": s["unexplained_share_chance"]}, heads=False),
        )
