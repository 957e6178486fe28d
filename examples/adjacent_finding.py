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
from attnsim.stats.pairs import PairView, head_sums

# -- stats layer: a pure update function and a mergeable accumulator (no I/O, no MLflow) -----------------
SCALARS = ("adjacent_share", "adjacent_share_chance")


def _adjacent_update(high_index: torch.Tensor, high_count: torch.Tensor, pair_weights: torch.Tensor, distance: torch.Tensor) -> Dict[str, torch.Tensor]:
    """One batch's increments: high pairs, adjacent high pairs, and their chance count.

    Args:
        high_index: (B, L, H, S) pair indices of the high pairs, P in unused slots (``PairView.high_index``).
        high_count: (L, B, H) number of high pairs k (``PairView.high_count``).
        pair_weights: (B, P, 5) 0/1 pair classes; column 0 is "valid" (``PairView.pair_weights``).
        distance: (P,) distance j − i of each pair (``PairView.distance``).
    """
    valid = pair_weights[..., 0]  # (B, P)
    adjacent = valid * (distance == 1).float()  # (B, P) valid pairs of neighbouring tokens
    hits = head_sums(high_index, adjacent[..., None])[..., 0]  # (L, B, H) adjacent high pairs
    k = high_count.double()  # (L, B, H)
    share = safe_divide(adjacent.sum(-1).double(), valid.sum(-1).double()).nan_to_num(0.0)  # (B,) chance per pair
    return {"high": k.sum(1), "adjacent": hits.double().sum(1), "chance": (k * share[None, :, None]).sum(1)}


class AdjacentAccumulator(Accumulator):
    """Streaming sums (float64, (layer, head)); divided only in :meth:`compute`, so ranks and batches merge exactly."""

    def __init__(self, n_layers: int, n_heads: int):
        super().__init__()
        for name in ("high", "adjacent", "chance"):
            self.add_sum(name, n_layers, n_heads)

    def update(self, view: PairView) -> None:  # type: ignore[override]
        self.fold(_adjacent_update(view.high_index, view.high_count, view.pair_weights, view.distance))

    def compute(self) -> Dict[str, torch.Tensor]:
        state = self.metric_state
        return {"adjacent_share": safe_divide(state["adjacent"], state["high"]), "adjacent_share_chance": safe_divide(state["chance"], state["high"])}


# -- findings layer: a Lightning callback that declares its statistics and returns a Summary -------------
class AdjacentFinding(Finding):
    """Share of high-CSM pairs that are adjacent tokens, beside chance."""

    name = "adjacent"
    description = "share of high-CSM pairs that are adjacent tokens (j - i = 1), beside chance"
    statistics = SCALARS  # every key the finding logs: adjacent/adjacent_share[/LNN[/HNN]]

    def build(self):
        return {"adjacent": AdjacentAccumulator(self.n_layers, self.n_heads)}

    def summarise(self) -> Summary:
        out = self.accumulators["adjacent"].compute()
        return Summary(self.name, {name: out[name] for name in SCALARS}, windows=self.windows)

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        from attnsim.plots.heads import scalar_mosaic

        yield "figures/adjacent/heads.png", scalar_mosaic(summary.scalars, self.name)
