"""Finding ``gradient_maps``: gradient-weighted rollout (Chefer et al. 2021) and CDAM (Brocki & Chung 2023).

Needs a classifier and gradients: the runner then uses
:class:`~attnsim.capture.gradients.GradientModule` with a Trainer whose
``inference_mode`` is off; the gradients are read from the raw capture the
batch's view was built from (:attr:`~attnsim.stats.pairs.PairView.capture`). The class explained is ``maps.target_class``, or
each window's predicted class.

Per layer and head: ``head_relevance`` and ``relevance_share`` (see
:class:`attnsim.stats.gradmaps.GradientMapAccumulator`). Corpus numbers
(logged as ``gradient_maps/<name>``): CDAM mass shares on token categories,
the share of positive CDAM evidence, the final gradient-weighted rollout's
readout mass on categories, the mean target-class probability.

The readout row of the gradient-weighted rollout leaves out the readout
token's own entry, which holds the identity ``R_0 = I`` (as Chefer et al.
read out ``R[CLS, 1:]`` for ViTs).

Causal (decoder) language models: the "classifier" is the LM head, the logit
explained is that of the next token after each window's last real token
(``maps.target_class`` is a token id; null: the predicted next token), and
the readout row is the last real token's (its own entry left out); the
first token's mass ``rollout_cls_mass`` is then logged too.

Figures: layer x head heatmaps of the scalars; per example window the
readout row after every layer and the CDAM scores with token labels, or for
images both drawn over the picture on the patch grid.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

import torch

from attnsim.data.windows import batch_labels
from attnsim.findings.base import Finding, Summary
from attnsim.findings.categories import TokenCategories
from attnsim.findings.rollout import depth_panels
from attnsim.plots import maps as plots
from attnsim.plots.csm import scalar_heatmaps
from attnsim.stats.gradmaps import GradientMapAccumulator, cdam, gradient_rollout, gradient_weighted_attention
from attnsim.stats.pairs import PairView

SCALARS = ("head_relevance", "relevance_share")


class GradientMapsFinding(Finding):
    """Gradient-weighted rollout and class-discriminative attention maps of a classifier (module docstring)."""

    name = "gradient_maps"
    description = "gradient-weighted rollout (Chefer et al. 2021) and CDAM (Brocki & Chung 2023) for a classifier's target class (a causal LM: the next token), per head relevance"
    statistics = SCALARS
    needs_attention = True
    needs_gradients = True
    config_keys = ("maps.target_class", "maps.num_labels")  # the class explained; the seeded head of a checkpoint without one

    def build(self):
        layout = self.context.layout
        self.vision = bool(self.context.vision)
        self.layout = layout
        self.causal = bool(getattr(self.context.model, "causal", False))
        self.categories = TokenCategories(self.context.tokenizer, self.vision, layout.extra if layout is not None else (), causal=self.causal)
        self.max_examples = int(self.context.examples or 0)
        self.examples: List[Dict[str, Any]] = []
        return {"gradients": GradientMapAccumulator(self.n_layers, self.n_heads, self.categories.names)}

    def corpus_metric_names(self) -> List[str]:
        """Names of the corpus numbers (without the finding prefix)."""
        names = [f"cdam_{c}_share" for c in self.categories.names]
        # the readout token's own entry is left out: [CLS] of an encoder; a causal model reads out the last token
        names += [f"rollout_{c}_mass" for c in self.categories.names if c != "cls" or getattr(self, "causal", False)]
        return names + ["cdam_positive_share", "target_probability", "target_is_predicted"]

    def metric_names(self) -> List[str]:
        return [f"{self.name}/{s}" for s in (*self.statistics, *self.corpus_metric_names())]

    def update(self, view: PairView) -> None:
        grads = view.capture  # the raw gradient capture the view was built from
        if grads is None or getattr(grads, "attention_gradients", None) is None:
            raise RuntimeError("gradient_maps needs the gradient capture (GradientModule); the runner selects it for findings with needs_gradients")
        batch = view.batch
        valid = batch["attention_mask"].bool()
        relevance = gradient_weighted_attention(view.attention.transpose(0, 1), grads.attention_gradients, valid)  # (L, B, H, T, T)
        rollout = gradient_rollout(relevance)  # (L, B, T, T)
        index = torch.arange(view.batch_size, device=valid.device)
        readout = self.categories.readout(batch)
        rows = rollout[:, index, readout].clone()  # (L, B, T) readout rows
        rows[:, index, readout] = 0  # its own entry holds the identity
        rows = rows * valid.to(rows.dtype)[None]
        scores = cdam(grads.final_tokens, grads.final_gradients, valid)  # (B, T)
        probability = grads.logits.float().softmax(-1)[index, grads.target]
        predicted = grads.logits.argmax(-1) == grads.target
        self.accumulators["gradients"].update(relevance, rows[-1], scores, self.categories.masks(batch), probability, predicted)
        self._record(view, rows, scores, valid, probability)
        self.windows += view.batch_size

    def _record(self, view: PairView, rows: torch.Tensor, scores: torch.Tensor, valid: torch.Tensor, probability: torch.Tensor) -> None:
        tokenizer = self.context.tokenizer
        grads = view.capture
        for b in range(view.batch_size):
            if len(self.examples) >= self.max_examples:
                return
            length = int(valid[b].sum())
            example = {
                "doc_id": view.batch["doc_ids"][b],
                "labels": batch_labels(tokenizer, view.batch, b, length),
                "rollout": rows[:, b, :length].detach().double().cpu().numpy(),  # (L, n)
                "cdam": scores[b, :length].detach().double().cpu().numpy(),  # (n,)
                "target": int(grads.target[b]),
                "predicted": int(grads.logits[b].argmax()),
                "probability": float(probability[b]),
            }
            if "images" in view.batch:
                example["image"] = view.batch["images"][b].cpu().numpy()
            self.examples.append(example)

    def summarise(self) -> Summary:
        out = self.accumulators["gradients"].compute()
        metrics = {name: float(out[name]) for name in self.corpus_metric_names()}
        return Summary(self.name, {name: out[name] for name in SCALARS}, metrics=metrics, examples=self.examples, windows=self.windows)

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        yield from scalar_heatmaps(summary.scalars, self.name)
        for e, example in enumerate(summary.examples):
            title = f"window {e} ({example['doc_id']}): class {example['target']} (predicted {example['predicted']}, p = {example['probability']:.2f})"
            if self.vision and self.layout is not None and "image" in example:
                depths = depth_panels(self.n_layers)
                grids = [plots.grid_values(example["rollout"][d], self.layout.n_extra, self.layout.grid) for d in depths]
                grids.append(plots.grid_values(example["cdam"], self.layout.n_extra, self.layout.grid))
                names = [f"grad. rollout, layer {d}" for d in depths] + ["CDAM (signed)"]
                yield f"figures/gradient_maps/window{e}_overlay.png", plots.saliency_overlay(example["image"], grids, names, f"Gradient maps of image {title}")
                continue
            rows = [f"after layer {d}" for d in range(example["rollout"].shape[0])]
            yield (
                f"figures/gradient_maps/window{e}_rollout.png",
                plots.token_strip(
                    example["rollout"],
                    example["labels"],
                    rows,
                    f"Gradient-weighted rollout, {self.categories.readout_name} row, {title}",
                    plots_cfg.max_tokens,
                    unit="relevance (logit units)",
                ),
            )
            yield (
                f"figures/gradient_maps/window{e}_cdam.png",
                plots.token_strip(
                    example["cdam"][None],
                    example["labels"],
                    ["CDAM"],
                    f"CDAM scores (red: evidence for, blue: against), {title}",
                    plots_cfg.max_tokens,
                    signed=True,
                    unit="logit units",
                ),
            )
