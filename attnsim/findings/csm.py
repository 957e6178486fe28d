"""Finding ``csm``: Context Similarity Matrix statistics per layer and head (arXiv:2512.21956)."""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from attnsim.findings.base import Finding, Summary
from attnsim.plots import csm as plots
from attnsim.plots.common import layer_note, shown_layers
from attnsim.plots.heads import scalar_mosaic
from attnsim.stats.csm import SCALARS, CSMAccumulator


class CSMFinding(Finding):
    """Mean and spread of the CSM, corpus-mean matrix and distance profile (see :mod:`attnsim.stats.csm`).

    The distance scalars (mean distance, short/long-range shares of high pairs, beside chance)
    are the ``distance`` finding's; the ``csm`` experiment runs both.
    """

    name = "csm"
    figure_cost = 3.0  # measured against a finding of two figures (workflows/figures.py)
    blockwise = True  # every statistic has a blockwise form (README, "Long contexts")
    description = "CSM mean and std, corpus-mean matrix, distance profile"
    statistics = SCALARS
    profiles = ("distance_mean", "distance_high_ratio")
    profile_bins = "distance_bins"  # one bin per distance up to 512, logarithmic beyond
    figure_outputs = ("matrix",)
    needs_attention = False

    def build(self):
        return {"csm": CSMAccumulator(self.n_layers, self.n_heads, self.seq_len)}

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        """Every head's statistics (one mosaic); the distance profiles, corpus-mean and example CSMs of the
        layers :func:`~attnsim.plots.common.shown_layers` picks by the layer mean of ``csm/mean``."""
        layers = shown_layers(self.n_layers, summary.scalars["mean"])
        yield "figures/csm/heads.png", scalar_mosaic(summary.scalars, self.name)
        yield (
            "figures/csm/distance_profiles.png",
            plots.distance_profiles(
                summary.profiles["distance_mean"],
                summary.profiles["distance_high_ratio"],
                summary.profile_index.get("distance_mean"),
                layers,
                layer_note(layers, self.n_layers, plots.RULE_STATISTIC),
            ),
        )
        yield from plots.mean_matrices(summary.figure_data["matrix"], plots_cfg.max_tokens, layers)
        yield from plots.example_csms(examples, plots_cfg.max_tokens, layers)
