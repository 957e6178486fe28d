"""Finding ``attention_regions``: high-CSM pairs against the high-attention region (arXiv:2512.21956).

Definitions: :mod:`attnsim.stats.attention_regions`. For the example figures the
finding also keeps the high-attention region of the first ``plots.examples``
windows (the windows the example recorder keeps), as the view computed it.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Tuple

import torch

from attnsim.findings.base import Finding, Summary
from attnsim.plots.heads import scalar_mosaic
from attnsim.plots.regions import example_regions
from attnsim.stats.attention_regions import SCALARS, AttentionRegionAccumulator
from attnsim.stats.pairs import PairView, dense_pairs


class AttentionRegionsFinding(Finding):
    """Jaccard overlap of high-attention and high-CSM pairs, CSM inside and outside the region."""

    name = "attention_regions"
    blockwise = True  # every statistic has a blockwise form (README, "Long contexts")
    description = "high-attention pairs vs high-CSM pairs: Jaccard overlap vs chance, mean CSM inside/outside the region"
    statistics = SCALARS
    needs_attention = True

    def build(self):
        self.max_examples = int(self.context.examples)
        # (L, E, H, P) bool, the example windows' high-attention pairs; above 512 tokens on the blockwise path
        # their (L, E, H, S) pair indices (the example maps are then pooled, plots.regions.pooled_region)
        self.regions: Optional[torch.Tensor] = None
        return {"attention_regions": AttentionRegionAccumulator(self.n_layers, self.n_heads)}

    def update(self, view: PairView) -> None:
        super().update(view)
        have = 0 if self.regions is None else self.regions.shape[1]
        take = min(self.max_examples - have, view.batch_size)
        if take > 0 and getattr(view, "draws_examples", True):
            region = dense_pairs(view.attention_index[:take], view.n_pairs).transpose(0, 1).cpu()  # (L, take, H, P)
            self.regions = region if self.regions is None else torch.cat([self.regions, region], 1)
        elif take > 0:  # long windows (examples recorded pooled): the pair indices, (L, take, H, S), not (L, take, H, P) masks
            index = view.attention_index[:take].transpose(0, 1).cpu()
            if self.regions is not None and self.regions.shape[-1] != index.shape[-1]:  # pad the shorter with P (no pair)
                slots = max(self.regions.shape[-1], index.shape[-1])
                self.regions, index = (torch.nn.functional.pad(t, (0, slots - t.shape[-1]), value=view.n_pairs) for t in (self.regions, index))
            self.regions = index if self.regions is None else torch.cat([self.regions, index], 1)

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        yield "figures/attention_regions/heads.png", scalar_mosaic(summary.scalars, self.name)
        yield from example_regions(examples, self.regions, summary.scalars["jaccard"], self.cfg.top_fraction, plots_cfg.max_tokens)
