"""Finding ``induction``: induction and previous-token heads (Olsson et al. 2022), and the CSM of repeated tokens.

Definitions: :mod:`attnsim.stats.induction`. Made for ``corpus.source=repeated_tokens``
(experiments/induction.yaml); on any other corpus the earlier occurrences come from the token ids.
"""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from attnsim.findings.base import Finding, Summary
from attnsim.plots.common import layer_head_heatmap
from attnsim.plots.heads import scalar_mosaic
from attnsim.stats.induction import SCALARS, InductionAccumulator


class InductionFinding(Finding):
    """Per head: induction score, previous-token score and CSM at the earlier occurrence, each beside chance."""

    name = "induction"
    description = "induction and previous-token heads (attention to the token after an earlier occurrence / to the previous token) and CSM at earlier occurrences, vs chance"
    statistics = SCALARS
    needs_attention = True

    def build(self):
        return {"induction": InductionAccumulator(self.n_layers, self.n_heads)}

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        s = summary.scalars
        yield "figures/induction/heads.png", scalar_mosaic(s, self.name)
        yield (
            "figures/induction/induction_score.png",
            layer_head_heatmap(
                s["induction_score"],
                "induction score: attention from a repeated token to the token after its earlier occurrence",
                chance=s["induction_score_chance"],
                cmap="magma",
                annotate=self.n_heads,
            ),
        )
        yield (
            "figures/induction/prev_token_score.png",
            layer_head_heatmap(
                s["prev_token_score"],
                "previous-token score: attention from each token to the token before it",
                chance=s["prev_token_score_chance"],
                cmap="magma",
                annotate=self.n_heads,
            ),
        )
