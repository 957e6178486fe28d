"""Finding ``attention_regions``: high-CSM pairs against the high-attention region (arXiv:2512.21956).

Definitions: :mod:`attnsim.stats.attention_regions`.
"""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from attnsim.findings.base import Finding, Summary
from attnsim.plots.heads import scalar_mosaic
from attnsim.plots.regions import example_regions
from attnsim.stats.attention_regions import SCALARS, AttentionRegionAccumulator


class AttentionRegionsFinding(Finding):
    """Jaccard overlap of high-attention and high-CSM pairs, CSM inside and outside the region."""

    name = "attention_regions"
    description = "high-attention pairs vs high-CSM pairs: Jaccard overlap vs chance, mean CSM inside/outside the region"
    statistics = SCALARS
    needs_attention = True

    def build(self):
        return {"attention_regions": AttentionRegionAccumulator(self.n_layers, self.n_heads)}

    def summarise(self) -> Summary:
        out = self.accumulators["attention_regions"].compute()
        return Summary(self.name, {n: out[n] for n in SCALARS}, windows=self.windows)

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        yield "figures/attention_regions/heads.png", scalar_mosaic(summary.scalars, self.name)
        yield from example_regions(examples, summary.scalars["jaccard"], self.cfg.top_fraction, plots_cfg.max_tokens)
