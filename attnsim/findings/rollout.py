"""Finding ``rollout``: attention rollout and attention flow (Abnar & Zuidema 2020), for text and images.

Corpus summaries per layer depth (heads are fused, so each statistic has one
value per layer, logged under head index 0 in the per-head table): rollout
mass on the token categories of :mod:`attnsim.findings.categories` beside
uniform mixing, the share a token keeps of itself, and the entropy of the
readout row (:class:`attnsim.stats.rollout.RolloutAccumulator`): the [CLS]
row of an encoder, the *last* real token's row of a causal (decoder) model
(:class:`~attnsim.findings.categories.TokenCategories`). A causal model's
attention is lower-triangular, so its rollout is too: token i mixes only
tokens 0..i, and only the last token's row covers the whole window.

Examples: the readout row after every layer, the final rollout matrix, and
for windows of at most ``maps.flow_max_tokens`` real tokens the attention flow
of the readout token beside its rollout (also as a table). For images the
readout rows are drawn over the picture on the patch grid.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

import numpy as np
import pandas as pd
import torch

from attnsim.data.windows import batch_labels
from attnsim.findings.base import Finding, Summary
from attnsim.findings.categories import TokenCategories
from attnsim.plots import maps as plots
from attnsim.plots.common import matrix_grid
from attnsim.stats.pairs import PairView
from attnsim.stats.rollout import RolloutAccumulator, attention_flow, attention_rollout, residual_attention


def depth_panels(n_layers: int, most: int = 4) -> List[int]:
    """Layer depths drawn on image overlays: every layer up to ``most``, else evenly spaced ending at the last."""
    if n_layers <= most:
        return list(range(n_layers))
    return sorted({int(round(x)) for x in np.linspace(0, n_layers - 1, most)})


class RolloutFinding(Finding):
    """Attention rollout per depth, attention flow for short examples (module docstring)."""

    name = "rollout"
    description = "attention rollout (Abnar & Zuidema 2020) per layer depth: mass on the first token ([CLS]/BOS), other specials and punctuation, readout entropy ([CLS] row; a decoder: last token); attention flow for short inputs; image overlays for ViTs"
    needs_attention = True
    config_keys = ("maps.head_fusion", "maps.discard_ratio", "maps.flow_max_tokens")

    def build(self):
        context = self.context
        layout = context.layout
        self.vision = bool(context.vision)
        self.layout = layout
        self.causal = bool(getattr(context.model, "causal", False))
        self.categories = TokenCategories(context.tokenizer, self.vision, layout.extra if layout is not None else (), causal=self.causal)
        self.maps_cfg = context.maps
        self.max_examples = int(context.examples or 0)
        self.examples: List[Dict[str, Any]] = []
        self.statistics = self._statistics()
        return {"rollout": RolloutAccumulator(self.n_layers, self.seq_len, self.categories.names)}

    def _statistics(self) -> tuple:
        names: List[str] = []
        for category in self.categories.names:
            names += [f"{category}_mass", f"{category}_mass_chance"]
        return tuple(names + ["self_mass", "readout_entropy"])

    @property
    def _fusion(self) -> str:
        return self.maps_cfg.head_fusion if self.maps_cfg is not None else "mean"

    @property
    def _discard(self) -> float:
        return float(self.maps_cfg.discard_ratio) if self.maps_cfg is not None else 0.0

    def update(self, view: PairView) -> None:
        batch = view.batch
        valid = batch["attention_mask"].bool()  # rollout runs over every real token, specials included
        keep = self.categories.keep(batch)
        rollout = attention_rollout(view.attention.transpose(0, 1), valid, self._fusion, self._discard, keep)  # (L, B, T, T)
        readout = self.categories.readout(batch)
        self.accumulators["rollout"].update(rollout, valid, self.categories.masks(batch), readout)
        self._record(view, rollout, valid, keep, readout)
        self.windows += view.batch_size

    def _record(self, view: PairView, rollout: torch.Tensor, valid: torch.Tensor, keep: torch.Tensor, readout: torch.Tensor) -> None:
        """Keep the first windows' readout rows, final matrix and (short ones) flow inputs."""
        flow_max = int(self.maps_cfg.flow_max_tokens) if self.maps_cfg is not None else 0
        tokenizer = self.context.tokenizer
        for b in range(view.batch_size):
            if len(self.examples) >= self.max_examples:
                return
            length = int(valid[b].sum())  # real tokens are a prefix: padding sits at the end
            row = int(readout[b])  # 0 ([CLS]) or, for a causal model, the last real token
            example: Dict[str, Any] = {
                "doc_id": view.batch["doc_ids"][b],
                "labels": batch_labels(tokenizer, view.batch, b, length),
                "readout_position": row,
                "readout": rollout[:, b, row, :length].detach().double().cpu().numpy(),  # (L, n)
                "matrix": rollout[-1, b, :length, :length].detach().double().cpu().numpy(),  # (n, n)
            }
            if "images" in view.batch:
                example["image"] = view.batch["images"][b].cpu().numpy()
            if 0 < length <= flow_max:
                attention = view.attention.transpose(0, 1)[:, b : b + 1, :, :length, :length]
                example["residual"] = residual_attention(attention, None, self._fusion, self._discard, keep[b : b + 1, :length])[:, 0].detach().cpu()
            self.examples.append(example)

    def summarise(self) -> Summary:
        out = self.accumulators["rollout"].compute()
        scalars = {name: out[name] for name in self.statistics}
        tables: Dict[str, pd.DataFrame] = {}
        for e, example in enumerate(self.examples):
            if "residual" in example:
                # max-flow runs are only done for the recorded short examples
                example["flow"] = attention_flow(example["residual"], sources=[example["readout_position"]])[0].numpy()
                tables[f"tables/rollout_flow_window{e}.csv"] = pd.DataFrame(
                    {"position": np.arange(len(example["labels"])), "token": example["labels"], "rollout": example["readout"][-1], "flow": example["flow"]}
                )
        return Summary(self.name, scalars, tables=tables, figure_data={"readout_mean": out["readout_mean"]}, examples=self.examples, windows=self.windows)

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        max_tokens = plots_cfg.max_tokens
        fusion = f"{self._fusion} fusion, discard {self._discard:g}"
        yield "figures/rollout/depth_profile.png", plots.depth_profiles(summary.scalars, self.name, f"Rollout mass on token categories by depth ({fusion})")
        mean = summary.figure_data["readout_mean"].detach().cpu().double().numpy()  # (L, T)
        if self.vision and self.layout is not None:
            grids = [plots.grid_values(mean[d], self.layout.n_extra, self.layout.grid) for d in depth_panels(self.n_layers)]
            yield (
                "figures/rollout/mean_readout_grid.png",
                plots.grid_heatmaps(
                    grids, [f"after layer {d}" for d in depth_panels(self.n_layers)], f"Corpus-mean [CLS] rollout on the patch grid ({fusion})", unit="share"
                ),
            )
        else:
            labels = [str(p) for p in range(mean.shape[1])]
            mean[:, -1 if self.causal else 0] = np.nan  # the readout token's own share (a full causal window's last token)
            yield (
                "figures/rollout/mean_readout.png",
                plots.token_strip(
                    mean,
                    labels,
                    [f"layer {d}" for d in range(mean.shape[0])],
                    f"Corpus-mean readout ({self.categories.readout_name}) rollout row by position ({fusion}; own entry left blank)",
                    max_tokens,
                    unit="share",
                ),
            )
        for e, example in enumerate(summary.examples):
            yield from self._example_figures(e, example, max_tokens, fusion)

    def _example_figures(self, e: int, example: Dict[str, Any], max_tokens: int, fusion: str) -> Iterator[Tuple[str, Any]]:
        labels, readout = example["labels"], example["readout"]
        title = f"window {e} ({example['doc_id']})"
        if self.vision and self.layout is not None and "image" in example:
            depths = depth_panels(self.n_layers)
            grids = [plots.grid_values(readout[d], self.layout.n_extra, self.layout.grid) for d in depths]
            names = [f"rollout after layer {d}" for d in depths]
            if "flow" in example:
                grids.append(plots.grid_values(example["flow"], self.layout.n_extra, self.layout.grid))
                names.append("attention flow")
            yield (
                f"figures/rollout/window{e}_overlay.png",
                plots.saliency_overlay(example["image"], grids, names, f"[CLS] rollout of image {e} ({example['doc_id']}, {fusion})"),
            )
            return
        rows = [f"after layer {d}" for d in range(readout.shape[0])]
        shown = readout.copy()
        own = example.get("readout_position", 0)
        name = self.categories.readout_name
        shown[:, own] = np.nan  # the readout token's own share (mostly the residual) would flatten every other token's colour
        yield (
            f"figures/rollout/window{e}_readout.png",
            plots.token_strip(shown, labels, rows, f"{name} rollout row of {title} ({fusion}; {name}'s own entry left blank)", max_tokens, unit="share"),
        )
        yield (
            f"figures/rollout/window{e}_matrix.png",
            matrix_grid(
                example["matrix"][None],
                ["final"],
                f"Rollout through every layer, {title} (rows: output token, columns: input token)",
                max_tokens,
                labels,
                cmap="viridis",
                cols=1,
            ),
        )
        if "flow" in example:
            flow, last = example["flow"].copy(), readout[-1].copy()
            flow[own] = last[own] = np.nan
            yield (
                f"figures/rollout/window{e}_flow.png",
                plots.flow_and_rollout(flow, last, labels, f"Attention flow and rollout of the {name}, {title} (its own entry left blank)", max_tokens),
            )

    def metric_names(self) -> List[str]:
        return [f"{self.name}/{s}" for s in self.statistics]
