"""Finding ``repetition``: heads whose high-CSM pairs join repeated tokens (arXiv:2512.21956).

Definitions: :mod:`attnsim.stats.repetition`.
"""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from attnsim.findings.base import Finding, Summary
from attnsim.plots.common import layer_head_heatmap
from attnsim.plots.heads import scalar_mosaic
from attnsim.stats.repetition import SCALARS, RepetitionAccumulator


class RepetitionFinding(Finding):
    """Share of identical-token pairs that are high pairs, at any and at long distance, and the CSM ratio."""

    name = "repetition"
    blockwise = True  # every statistic has a blockwise form (README, "Long contexts")
    description = "identical-token pairs: share that are high-CSM pairs (any and long distance) vs chance, CSM ratio"
    statistics = SCALARS
    needs_attention = False

    def build(self):
        return {"repetition": RepetitionAccumulator(self.n_layers, self.n_heads)}

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        s = summary.scalars
        yield "figures/repetition/heads.png", scalar_mosaic(s, self.name)
        yield (
            "figures/repetition/repetition_score.png",
            layer_head_heatmap(
                s["repetition_score"], "repetition score: long-range (d >= T/2) identical pairs that are high / chance", cmap="magma", annotate=self.n_heads
            ),
        )
