"""Finding ``patching``: activation patching of each head's Z from a clean prompt into its corrupted twin.

For every prompt pair of ``interventions.pairs`` (:mod:`attnsim.data.prompt_pairs`), the clean and corrupted
runs give the logit differences logit(answer) - logit(wrong); then each head's Z alone is copied from the
clean run into the corrupted run (:class:`attnsim.capture.interventions.PatchingModule`). Per head
(layer, head statistics): ``patched_logit_diff`` (mean over pairs) and ``restored_share``
= (patched - corrupted) / (clean - corrupted) of the means (:func:`attnsim.stats.interventions.restored_share`).
Corpus-level: ``clean_logit_diff``, ``corrupted_logit_diff``, ``pairs``.
"""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from attnsim.findings.base import Finding, Summary
from attnsim.plots.common import layer_head_heatmap
from attnsim.stats.interventions import PatchSums

SCALARS = ("restored_share", "patched_logit_diff")


class PatchingFinding(Finding):
    """Restored share of the clean logit difference when one head's Z is patched clean -> corrupted."""

    name = "patching"
    description = "activation patching: share of the clean logit difference each head's Z restores in the corrupted run"
    statistics = SCALARS
    needs_attention = False
    needs_interventions = True
    config_keys = ("interventions.pairs",)

    def build(self):
        return {"patch": PatchSums(self.n_layers, self.n_heads)}

    def update(self, outputs: Any) -> None:
        self.accumulators["patch"].update(outputs["clean"], outputs["corrupted"], outputs["patched"])
        self.windows += int(outputs["clean"].numel())

    def summarise(self) -> Summary:
        out = self.accumulators["patch"].compute()
        metrics = {"clean_logit_diff": float(out["clean_logit_diff"]), "corrupted_logit_diff": float(out["corrupted_logit_diff"]), "pairs": float(self.windows)}
        return Summary(self.name, {n: out[n] for n in SCALARS}, metrics=metrics, windows=self.windows)

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        yield (
            "figures/patching/restored_share.png",
            layer_head_heatmap(
                summary.scalars["restored_share"],
                "patching/restored_share: (patched - corrupted) / (clean - corrupted) logit difference",
                cmap="RdBu_r",
                annotate=self.n_heads,
            ),
        )
