"""A worked example of a new statistic and finding: the share of high-CSM pairs that are adjacent tokens.

``adjacent/adjacent_share`` is, per layer and head, the share of a window's high pairs with j − i = 1,
pooled over the corpus; ``adjacent/adjacent_share_chance`` is the same share had each window's k high
pairs been chosen uniformly among its valid pairs. docs/architecture.md walks through it;
tests/test_docs_examples.py runs it.

Use it from Python (a finding class registered under its name is known to the config's checks):

    from attnsim.findings.registry import FINDINGS
    from examples.adjacent_finding import AdjacentFinding

    FINDINGS["adjacent"] = AdjacentFinding
    run = attnsim.run("csm", ["findings=[csm, adjacent]", "corpus.limit=64"])
    run.metrics["adjacent/adjacent_share/L02"]
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Tuple

import torch

from attnsim.findings.base import Finding, Summary
from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs import PairView

# -- stats layer: a pure update function and a mergeable accumulator (no I/O, no MLflow) -----------------
SCALARS = ("adjacent_share", "adjacent_share_chance")


def _adjacent_update(high_by_distance: torch.Tensor, chance_by_distance: torch.Tensor, high_count: torch.Tensor) -> Dict[str, torch.Tensor]:
    """One batch's increments: high pairs, adjacent high pairs, and their chance count (float64 sums).

    Args (published members of the view, :class:`attnsim.stats.pairs.PairView`):
        high_by_distance: (layer, head, T) high pairs at each distance j - i, summed over the batch's windows.
        chance_by_distance: (layer, head, T) their expected number had each window's k high pairs been chosen
            uniformly among its valid pairs.
        high_count: (batch, layer, head) number of high pairs k of each window.
    """
    return {
        "high": high_count.double().sum(0),  # (layer, head)
        "adjacent": high_by_distance[..., 1].double(),  # distance 1: neighbouring tokens
        "chance": chance_by_distance[..., 1].double(),
    }


class AdjacentAccumulator(Accumulator):
    """Streaming sums (float64, (layer, head)); divided only in :meth:`compute`, so ranks and batches merge exactly."""

    def __init__(self, n_layers: int, n_heads: int):
        super().__init__()
        for name in ("high", "adjacent", "chance"):
            self.add_sum(name, n_layers, n_heads)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        self.fold(_adjacent_update(view.high_by_distance, view.chance_by_distance, view.high_count))

    def compute(self) -> Dict[str, torch.Tensor]:
        state = self.metric_state
        return {"adjacent_share": safe_divide(state["adjacent"], state["high"]), "adjacent_share_chance": safe_divide(state["chance"], state["high"])}


# -- findings layer: a Lightning callback that declares its statistics and returns a Summary -------------
class AdjacentFinding(Finding):
    """Share of high-CSM pairs that are adjacent tokens, beside chance."""

    name = "adjacent"
    description = "share of high-CSM pairs that are adjacent tokens (j - i = 1), beside chance"
    statistics = SCALARS  # every key the finding logs (adjacent/adjacent_share[/LNN[/HNN]]); the default summarise() reads them
    blockwise = True  # it reads only the view's published members, so the blockwise path (long windows) runs it too

    def build(self):
        return {"adjacent": AdjacentAccumulator(self.n_layers, self.n_heads)}

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        from attnsim.plots.heads import scalar_mosaic

        yield "figures/adjacent/heads.png", scalar_mosaic(summary.scalars, self.name)
