"""Finding ``attention_maps``: corpus-mean attention per layer and head, positional scalars, example maps."""

from __future__ import annotations

from typing import Any, Iterator, Tuple

from attnsim.findings.base import Finding, Summary
from attnsim.plots import maps as plots
from attnsim.plots.csm import scalar_heatmaps
from attnsim.stats.attention_maps import SCALARS, AttentionMapAccumulator
from attnsim.stats.pairs import PairView


class AttentionMapsFinding(Finding):
    """Attention heatmaps per layer and head (see :mod:`attnsim.stats.attention_maps` for the statistics).

    Figures: a layer x head heatmap of each scalar, the corpus-mean attention
    map of every head (one grid per layer), and the attention maps of the
    first ``plots.examples`` windows with token labels; long windows are
    pooled to ``plots.max_tokens`` cells (:mod:`attnsim.plots.maps`).
    """

    name = "attention_maps"
    description = "corpus-mean attention map per layer and head, head confidence and positional (self/previous/next) attention, example maps with token labels"
    statistics = SCALARS
    figure_outputs = ("matrix",)
    needs_attention = True

    def build(self):
        return {"maps": AttentionMapAccumulator(self.n_layers, self.n_heads, self.seq_len, causal=bool(getattr(self.context.model, "causal", False)))}

    def update(self, view: PairView) -> None:
        self.accumulators["maps"].update(view.attention.transpose(0, 1), view.tokens)  # (L, B, H, T, T)
        self.windows += view.batch_size

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        yield from scalar_heatmaps(summary.scalars, self.name)
        yield from plots.mean_attention(summary.figure_data["matrix"], plots_cfg.max_tokens, self.name)
        yield from plots.example_attention(examples, plots_cfg.max_tokens, self.name)
