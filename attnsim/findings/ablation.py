"""Finding ``ablation``: does the model's task depend on a head (or a set of heads) more than on random heads?

Each batch runs the clean pass and one pass per head set with the set's Z replaced before W_O
(:class:`attnsim.capture.interventions.InterventionModule`; zero, mean or resample ablation). Head sets
(``interventions.*``):

- ``heads: each``: every head alone (sets named ``LxxHyy``); their effects are the (layer, head)
  statistics ``<metric>_effect``, ``<metric>_random_mean``, ``<metric>_random_std``, ``<metric>_zscore``;
- ``heads: [[l, h], ...]``: one set named ``listed``;
- ``select: {run, metric, top}``: the ``top`` heads of an earlier run's statistic, one set named ``top``.

Every set of k heads is read against ``random_draws`` random sets of k heads drawn under the run's seed
(:func:`attnsim.stats.interventions.random_head_sets`; one group of draws per set size, shared by all
sets of that size). Named sets log ``ablation/<set>_<metric>_effect`` (and ``_random_mean``,
``_random_std``, ``_zscore``, and the ablated value ``ablation/<set>_<metric>``); the clean value is
``ablation/clean_<metric>``. Every set is a row of ``tables/ablation_sets.csv``. Arithmetic:
:mod:`attnsim.stats.interventions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pandas as pd
import torch

from attnsim.errors import ConfigError
from attnsim.findings.base import Finding, Summary
from attnsim.plots.common import layer_head_heatmap
from attnsim.plots.interventions import effect_scatter
from attnsim.stats.interventions import HIGHER_IS_BETTER, METRICS, MetricSums, random_head_sets, set_effects, spearman

Head = Tuple[int, int]
PARTS = ("effect", "random_mean", "random_std", "zscore")
#: verdict rule of the report: a set "matters more than random heads" when its z-score is at least this
Z_THRESHOLD = 2.0


def head_name(layer: int, head: int) -> str:
    """``L02H09``: the name of a single-head set (0-indexed)."""
    return f"L{layer:02d}H{head:02d}"


@dataclass
class AblationPlan:
    """The passes of an ablation run: the named head sets, then the random draws of each set size.

    Attributes:
        sets: (name, heads) in order; single heads of ``each`` are named :func:`head_name`.
        random_sets: set size -> its random draws (lists of heads).
        metrics: the task metrics measured (:data:`attnsim.stats.interventions.TASK_METRICS`).
        statistic_name: ``finding/stat`` of the earlier run named by ``interventions.select``, or None.
        statistic: (layer, head) values of that statistic, or None.
    """

    sets: List[Tuple[str, List[Head]]]
    random_sets: Dict[int, List[List[Head]]]
    metrics: Tuple[str, ...]
    statistic_name: Optional[str] = None
    statistic: Optional[torch.Tensor] = None
    singles: List[Head] = field(default_factory=list)

    def passes(self) -> List[List[Head]]:
        """Head sets of passes 1.. (pass 0 is clean): the named sets, then every size's random draws."""
        out = [list(heads) for _, heads in self.sets]
        for size in sorted(self.random_sets):
            out.extend(list(h) for h in self.random_sets[size])
        return out

    def random_index(self) -> Dict[int, List[int]]:
        """Set size -> pass indices (counting the clean pass as 0) of its random draws."""
        index: Dict[int, List[int]] = {}
        start = 1 + len(self.sets)
        for size in sorted(self.random_sets):
            count = len(self.random_sets[size])
            index[size] = list(range(start, start + count))
            start += count
        return index


def build_plan(
    n_layers: int,
    n_heads: int,
    heads: Any,
    top: Sequence[Head],
    draws: int,
    seed: int,
    metrics: Sequence[str],
    statistic_name: Optional[str] = None,
    statistic: Optional[torch.Tensor] = None,
) -> AblationPlan:
    """The head sets of ``interventions.heads`` and the ``top`` heads, with their random draws.

    Args:
        n_layers, n_heads: the model's layers and query heads per layer.
        heads: ``interventions.heads``: None, ``each`` or a list of [layer, head] pairs (one set).
        top: the selected heads of ``interventions.select`` (empty: no such set).
        draws: ``interventions.random_draws``.
        seed: the run's seed.

    Raises:
        ConfigError: no head set at all, or a listed head outside the model.
    """
    sets: List[Tuple[str, List[Head]]] = []
    singles: List[Head] = []
    if heads == "each":
        singles = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
        sets.extend((head_name(*h), [h]) for h in singles)
    elif heads is not None:
        listed = [(int(p[0]), int(p[1])) for p in heads]
        bad = [p for p in listed if not (p[0] < n_layers and p[1] < n_heads)]
        if bad:
            raise ConfigError(
                f"Config key 'interventions.heads' lists {bad}, outside the model's {n_layers} layers x {n_heads} heads (0-indexed). Give heads [layer, head] with layer < {n_layers} and head < {n_heads}."
            )
        sets.append(("listed", sorted(set(listed))))
    if top:
        sets.append(("top", sorted(top)))
    if not sets:
        raise ConfigError(
            "The ablation experiment has no head to ablate: set interventions.heads=each (every head alone), interventions.heads=[[layer, head], ...] (one set), or interventions.select={run: RUN_ID, metric: finding/statistic, top: 5}."
        )
    sizes = sorted({len(h) for _, h in sets})
    random_sets = {size: random_head_sets(n_layers, n_heads, size, draws, seed) for size in sizes} if draws else {}
    return AblationPlan(sets, random_sets, tuple(metrics), statistic_name, statistic, singles)


class AblationFinding(Finding):
    """Task-metric effects of ablating head sets, beside random head sets of the same size."""

    name = "ablation"
    description = "head ablation (zero / mean / resample Z before W_O): task-metric effect per head and set, beside random heads"
    statistics = tuple(f"{m}_{p}" for m in METRICS for p in PARTS)
    needs_attention = False
    needs_interventions = True
    config_keys = (
        "interventions.heads",
        "interventions.select",
        "interventions.mode",
        "interventions.random_draws",
        "interventions.split",
        "interventions.mask_fraction",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plan: Optional[AblationPlan] = None
        self.sums: Optional[MetricSums] = None

    def configure(self, plan: AblationPlan) -> None:
        """Set the run's head sets (before predict); its states are sized by them."""
        self.plan = plan
        self.sums = MetricSums(1 + len(plan.passes()))
        self.accumulators = {"sums": self.sums}

    def update(self, outputs: Any) -> None:
        if outputs is None:  # mean ablation's first pass
            return
        self.sums.update(outputs["sums"], outputs["counts"])
        self.windows += int(outputs["windows"])

    def summarise(self) -> Summary:
        plan = self.plan
        means = self.sums.compute()["mean"]
        sizes = [len(h) for _, h in plan.sets]
        results = set_effects(means, plan.metrics, len(plan.sets), plan.random_index(), sizes)
        scalars: Dict[str, torch.Tensor] = {}
        metrics: Dict[str, float] = {}
        rows: List[dict] = []
        names = [n for n, _ in plan.sets]
        for metric, r in results.items():
            metrics[f"clean_{metric}"] = float(r["clean"])
            if plan.singles:
                for part in PARTS:
                    grid = torch.full((self.n_layers, self.n_heads), float("nan"), dtype=torch.float64)
                    for s, (name, heads) in enumerate(plan.sets):
                        if name == head_name(*heads[0]) and len(heads) == 1:
                            grid[heads[0]] = r[part][s]
                    scalars[f"{metric}_{part}"] = grid
                if plan.statistic is not None:
                    rho = spearman(scalars[f"{metric}_effect"], plan.statistic)
                    metrics[f"{metric}_effect_statistic_spearman"] = float("nan") if rho is None else rho
            for s, (name, heads) in enumerate(plan.sets):
                row = {
                    "set": name,
                    "heads": " ".join(head_name(*h) for h in heads),
                    "size": len(heads),
                    "metric": metric,
                    "higher_is_better": HIGHER_IS_BETTER[metric],
                    "clean": float(r["clean"]),
                    "ablated": float(r["ablated"][s]),
                }
                row.update({part: float(r[part][s]) for part in PARTS})
                if plan.statistic is not None and len(heads) == 1:
                    row["statistic"] = float(plan.statistic[heads[0]])
                rows.append(row)
                if name in ("listed", "top"):
                    metrics[f"{name}_{metric}"] = float(r["ablated"][s])
                    metrics.update({f"{name}_{metric}_{part}": float(r[part][s]) for part in PARTS})
        summary = Summary(self.name, scalars, metrics=metrics, windows=self.windows)
        summary.tables["tables/ablation_sets.csv"] = pd.DataFrame(rows)
        summary.figure_data["names"] = names
        return summary

    def figures(self, summary: Summary, examples: Any, plots_cfg: Any) -> Iterator[Tuple[str, Any]]:
        plan = self.plan
        for metric in plan.metrics:
            key = f"{metric}_effect"
            if key not in summary.scalars:
                continue
            sign = "drop" if HIGHER_IS_BETTER[metric] else "rise"
            yield (
                f"figures/ablation/{key}.png",
                layer_head_heatmap(
                    summary.scalars[key], f"ablation/{key}: {metric} {sign} when the head alone is ablated", cmap="magma", annotate=self.n_heads
                ),
            )
            if plan.statistic is not None:
                mean = summary.scalars[f"{metric}_random_mean"].nanmean()
                std = summary.scalars[f"{metric}_random_std"].nanmean()
                yield (
                    f"figures/ablation/{key}_vs_statistic.png",
                    effect_scatter(
                        summary.scalars[key], plan.statistic, f"{metric} effect (ablation)", plan.statistic_name or "statistic", float(mean), float(std)
                    ),
                )
