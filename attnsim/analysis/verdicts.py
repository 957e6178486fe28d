"""Verdicts beyond the paper's claims, and which runs judge which: ablation verdicts (z-score against
random heads), induction and previous-token heads (Olsson et al. 2022), degenerate heads, and the
matching of trained runs to their random-weights controls (:class:`Assessment`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from attnsim.analysis.claims import CLAIMS, Groups, Outcome, fmt
from attnsim.analysis.runs import LoggedRun
from attnsim.keys import Tag

INTERVENTION_CLAIM = "the heads the statistic singles out matter more than random heads"
Z_THRESHOLD = 2.0  # an ablated set "matters more than random heads" when its effect is >= 2 random spreads above the random mean
ABLATION_METRICS = (
    "accuracy",
    "logit_diff",
    "mlm_loss",
    "lm_loss",
    "repeat_loss",
    "first_copy_loss",
    "cosine",
    "csm_change",
)  # each measured metric gets its verdict


FEW_DRAWS = 10  # a z-score from fewer random head sets than this gets a warning beside it


def drawn_sets(run: LoggedRun) -> int:
    """``interventions.random_draws`` of an ablation run (params), 0 when absent or unreadable."""
    try:
        return int(run.params.get("interventions.random_draws", 0) or 0)
    except (TypeError, ValueError):
        return 0


def intervention_verdicts(run: LoggedRun) -> List[Tuple[str, str, str, str]]:
    """An ablation run's verdicts on its named head sets (``top`` of ``interventions.select``, ``listed``), per task metric.

    Rule: a set matters more than random heads when its effect (the metric's damage, positive = the
    ablation hurt) is at least :data:`Z_THRESHOLD` random spreads above the random sets' mean effect
    (z-score >= 2): *holds*, else *does not hold*; *not measured* without a random baseline
    (``interventions.random_draws=0``).

    Returns:
        (set, metric, verdict, values line) per named set and metric the run measured.
    """
    out = []
    for metric in ABLATION_METRICS:
        if f"ablation/clean_{metric}" not in run.metrics:
            continue
        for name in ("top", "listed"):
            z = run.metrics.get(f"ablation/{name}_{metric}_zscore")
            if z is None:
                continue
            effect = run.metrics.get(f"ablation/{name}_{metric}_effect", math.nan)
            mean = run.metrics.get(f"ablation/{name}_{metric}_random_mean", math.nan)
            std = run.metrics.get(f"ablation/{name}_{metric}_random_std", math.nan)
            verdict = "not measured" if not math.isfinite(z) else ("holds" if z >= Z_THRESHOLD else "does not hold")
            line = f"{metric} effect {fmt(effect)} against random heads {fmt(mean)} ± {fmt(std)} (z = {fmt(z, 2)}; clean {metric} {fmt(run.metrics[f'ablation/clean_{metric}'])})"
            draws = drawn_sets(run)
            if 0 < draws < FEW_DRAWS:
                line += f"; from {draws} random draws only: a rough spread, rerun with interventions.random_draws={FEW_DRAWS} or more"
            out.append((name, metric, verdict, line))
    return out


def selected_statistic(run: LoggedRun) -> str:
    """``interventions.select.metric`` of an ablation run (params), empty when it named none."""
    value = run.params.get("interventions.select.metric", "")
    return "" if value in ("", "null", "None") else value


def degenerate_heads(run: LoggedRun) -> Optional[List[Tuple[str, float]]]:
    """``(head, tie share)`` of a run's heads flagged degenerate (column ``degenerate`` of ``tables/csm_heads.csv``:
    ties at the k-th CSM value decided more than a tenth of their high pairs in most windows), strongest first;
    None when the run has no such column (runs without the ``csm`` finding, or made before it existed)."""
    table = run.head_table("csm")
    if table is None or "degenerate" not in table.columns:
        return None
    flagged = table[table["degenerate"] == 1].sort_values("tie_share", ascending=False)
    return [(f"L{int(r.layer):02d}H{int(r.head):02d}", float(r.tie_share)) for r in flagged.itertuples()]


HEAD_CLAIMS = (
    ("induction_score", "Induction heads: a head attends to the token after an earlier occurrence"),
    ("prev_token_score", "Previous-token heads: a head attends to the previous token"),
)
HEAD_FACTOR = 10.0  # a head "is" an induction (previous-token) head when its score is at least this many times chance


def head_verdicts(run: LoggedRun) -> List[Tuple[str, str, str, str]]:
    """An ``induction`` run's verdicts on induction and previous-token heads (Olsson et al. 2022).

    Rule: *holds* when the best head's score is at least :data:`HEAD_FACTOR` times its chance (uniform attention over
    the query's allowed keys), else *does not hold*; read from ``tables/induction_heads.csv``.

    Returns:
        (claim, verdict, values line, table cell) per claim; empty for a run without the induction table.
    """
    table = run.head_table("induction") if any(k.startswith("induction/") for k in run.metrics) else None
    if table is None:
        return []
    out = []
    for stat, claim in HEAD_CLAIMS:
        if stat not in table.columns or f"{stat}_chance" not in table.columns:
            continue
        best = table.loc[table[stat].idxmax()]
        ratio = float(best[stat]) / float(best[f"{stat}_chance"])
        verdict = "holds" if ratio >= HEAD_FACTOR else "does not hold"
        head = f"L{int(best['layer']):02d}H{int(best['head']):02d}"
        out.append(
            (
                claim,
                verdict,
                f"best head {head}: {fmt(float(best[stat]))} against chance {fmt(float(best[f'{stat}_chance']))} ({ratio:.0f}x)",
                f"{verdict} ({head}, {ratio:.0f}x chance)",
            )
        )
    return out


NOT_SEPARATED = "does not separate trained from random"
_RANK = {"mixed": 1, "holds": 2}


def control_key(run: LoggedRun) -> Tuple[str, ...]:
    """What a random-weights control must share with a trained run to judge it: model type, shape (layers x heads x
    d_head; the layer count where the run has no shape tag), window length and the windows' content hash."""
    t = run.tags
    shape = t.get(Tag.SHAPE.value) or f"{run.n_layers}x?"
    return (t.get(Tag.MODEL_TYPE.value, "?"), shape, t.get(Tag.SEQ_LEN.value, "?"), t.get(Tag.CORPUS_HASH.value, "?"))


def matching_controls(run: LoggedRun, runs: Sequence[LoggedRun]) -> List[int]:
    """Indices of the random-weights controls among ``runs`` that can judge ``run`` (:func:`control_key` equal)."""
    key = control_key(run)
    return [j for j, other in enumerate(runs) if other.control and control_key(other) == key]


def separates(trained: str, controls: Sequence[str]) -> bool:
    """Whether a trained run's verdict ``trained`` is one that none of the random-weights ``controls`` verdicts also earns.

    A verdict of *holds* or *mixed* does not separate trained from random when a
    control in the same report earns it too (a control that *holds* earns both;
    one that is *mixed* earns *mixed*). Other verdicts, and reports without a
    control, are never flagged.
    """
    rank = _RANK.get(trained)
    return rank is None or all(_RANK.get(control, 0) < rank for control in controls)


@dataclass
class Assessment:
    """Every run's outcome for every claim, and which trained verdicts the control also earns.

    Attributes:
        runs: the runs, in report order.
        outcomes: ``outcomes[claim index][run index]``.
        flagged: ``flagged[claim index][run index]``: the run is not a control and a control run earns its verdict (:func:`separates`).
    """

    runs: List[LoggedRun]
    outcomes: List[List[Outcome]]
    flagged: List[List[bool]]

    controls: Dict[int, List[int]] = field(default_factory=dict)
    """Trained run index -> the indices of the controls that judge it (:func:`matching_controls`)."""

    @classmethod
    def of(cls, runs: Sequence[LoggedRun]) -> "Assessment":
        """Evaluate every claim of :data:`CLAIMS` on every run; each trained run is judged by its matching controls only."""
        runs = list(runs)
        outcomes = [[claim.evaluate(run, Groups.of(run.n_layers)) for run in runs] for claim in CLAIMS]
        judges = {i: matching_controls(run, runs) for i, run in enumerate(runs) if not run.control}
        flagged = []
        for row in outcomes:
            flags = []
            for i, outcome in enumerate(row):
                controls = [row[j].verdict for j in judges.get(i, [])]
                flags.append(bool(controls) and not separates(outcome.verdict, controls))
            flagged.append(flags)
        return cls(runs, outcomes, flagged, judges)

    def control_lines(self) -> List[str]:
        """One line per trained run when the report holds controls: which control judged it, or that none matches."""
        if not any(run.control for run in self.runs):
            return []
        lines = []
        for i, judges in self.controls.items():
            run = self.runs[i]
            named = ", ".join(f"{self.runs[j].name} {self.runs[j].run_id[:8]}" for j in judges)
            lines.append(
                f"{run.name} {run.run_id[:8]}: judged by control {named}"
                if judges
                else f"{run.name} {run.run_id[:8]}: no matching control (same model type, shape, window length and windows)"
            )
        return lines

    def glance(self, number: int, index: int) -> str:
        """Verdict of claim ``number - 1`` for run ``index``, with the flag when it has one."""
        outcome = self.outcomes[number - 1][index]
        return f"{outcome.verdict} ({NOT_SEPARATED})" if self.flagged[number - 1][index] else outcome.verdict

    @property
    def any_flagged(self) -> bool:
        """Whether any verdict is flagged."""
        return any(any(row) for row in self.flagged)
