"""Finding ``sentences``: do high-CSM pairs stay within sentences? (arXiv:2512.21956).

Definitions: :mod:`attnsim.stats.sentences`.
"""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from attnsim.findings.base import Finding, Summary
from attnsim.plots.heads import scalar_mosaic
from attnsim.plots.layers import by_layer
from attnsim.stats.sentences import SCALARS, SentenceAccumulator


class SentencesFinding(Finding):
    """Same-sentence share of high-CSM pairs beside chance, distance-matched chance and boundary contrast."""

    name = "sentences"
    blockwise = True  # every statistic has a blockwise form (README, "Long contexts")
    description = "same-sentence share of high-CSM pairs vs chance, preference, boundary contrast, within-sentence spread"
    statistics = SCALARS
    needs_attention = False

    def build(self):
        return {"sentences": SentenceAccumulator(self.n_layers, self.n_heads)}

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        s = summary.scalars
        yield "figures/sentences/heads.png", scalar_mosaic(s, self.name)
        series = {"same-sentence share": s["same_sentence_share"], "distance-matched share": s["same_sentence_share_distance_matched"]}
        yield (
            "figures/sentences/same_sentence_by_layer.png",
            by_layer(series, "High-CSM pairs within one sentence", "share of high pairs", {"same-sentence share": s["same_sentence_share_chance"]}),
        )
