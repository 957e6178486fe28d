"""The CSM paper's claims (Halevi et al., arXiv:2512.21956) as rules over what a run logged.

Each claim is split into criteria; a claim *holds* when every measurable criterion is met, *does not
hold* when none is, and is *mixed* otherwise; *not measured* when the run lacks the statistics or the
model has too few layers to form the layer groups (:func:`verdict`).

Layer groups: with L layers and g = max(1, round(L / 3)), the early layers are 0..g-1, the final
layers L-g..L-1 and the middle layers those between (none when L < 3) (:class:`Groups`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

from attnsim.analysis.runs import LoggedRun


@dataclass
class Groups:
    """Early, middle and final layers (0-indexed) of a model with ``n_layers`` layers (module docstring)."""

    early: List[int]
    middle: List[int]
    final: List[int]

    @classmethod
    def of(cls, n_layers: int) -> "Groups":
        """Thirds of ``n_layers`` layers: g = max(1, round(L / 3)) early and final layers, the rest middle."""
        size = max(1, round(n_layers / 3))
        if n_layers < 2:
            return cls(list(range(n_layers)), [], [])
        early = list(range(min(size, n_layers - 1)))
        final = list(range(max(len(early), n_layers - size), n_layers))
        middle = [layer for layer in range(n_layers) if layer not in early and layer not in final]
        return cls(early, middle, final)

    def describe(self) -> str:
        """``early 0-1, middle 2-3, final 4-5``."""

        def span(layers: List[int]) -> str:
            if not layers:
                return "none"
            return f"{layers[0]}" if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"

        return f"early {span(self.early)}, middle {span(self.middle)}, final {span(self.final)}"


@dataclass
class Outcome:
    """One run's result for one claim: the measured values (statistics separated by ``"; "``), criteria and verdict."""

    values: str
    criteria: List[Optional[bool]]
    labels: Optional[List[str]] = None  # names of the criteria (default a, b, c, ...)

    @property
    def verdict(self) -> str:
        """:func:`verdict` of the criteria."""
        return verdict(self.criteria)

    @property
    def lines(self) -> List[str]:
        """The measured values, one statistic per item."""
        return self.values.split("; ")


def verdict(criteria: Sequence[Optional[bool]]) -> str:
    """``holds`` (every measurable criterion met), ``does not hold`` (none met), ``mixed``, or ``not measured``."""
    measured = [c for c in criteria if c is not None]
    if not measured:
        return "not measured"
    if all(measured):
        return "holds"
    if not any(measured):
        return "does not hold"
    return "mixed"


def mean(values: Sequence[float], layers: Sequence[int]) -> float:
    """Mean of ``values`` over ``layers`` (NaN entries and empty groups give NaN)."""
    picked = [values[layer] for layer in layers if math.isfinite(values[layer])]
    return sum(picked) / len(picked) if picked else math.nan


def fmt(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, ``n/a`` when missing or not finite."""
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}g}"


def by_layer(values: Sequence[float], digits: int = 3) -> str:
    """``L0 0.12, L1 0.34, ...`` (layers 0-indexed)."""
    return ", ".join(f"L{layer} {fmt(v, digits)}" for layer, v in enumerate(values))


def chance_text(values: Optional[Sequence[float]]) -> str:
    """One chance value when it is the same in every layer, else per layer."""
    if values is None:
        return "chance n/a"
    finite = [v for v in values if math.isfinite(v)]
    if finite and max(finite) - min(finite) <= 1e-6 * max(1.0, abs(max(finite))):
        return f"chance {fmt(finite[0])}"
    return f"chance {by_layer(values)}"


MARGIN = 0.02  # "exceeds" means by more than 2% (relative), so that rounding-level differences count as no difference


def exceeds(value: float, reference: float) -> bool:
    """Whether ``value`` exceeds a non-negative ``reference`` by more than :data:`MARGIN` (relative)."""
    return value > (1.0 + MARGIN) * reference


def criterion(condition: Callable[[], bool], *inputs: float) -> Optional[bool]:
    """``condition()`` when every input is finite, else None (not measurable)."""
    return bool(condition()) if all(x is not None and math.isfinite(x) for x in inputs) else None


def all_layers(values: Sequence[float], layers: Sequence[int], test: Callable[[int], bool]) -> Optional[bool]:
    """Whether ``test(layer)`` holds for every layer of ``layers`` with a finite value (None if none has)."""
    usable = [layer for layer in layers if math.isfinite(values[layer])]
    return all(test(layer) for layer in usable) if usable else None


# -- the claims ----------------------------------------------------------------------


def long_range_early(run: LoggedRun, groups: Groups) -> Outcome:
    """Claim 1 (rule in :data:`CLAIMS`); falls back to ``csm/long_range_share``, logged by runs made before
    the distance statistics left the ``csm`` finding."""
    stat, share = run.first_layer_values("distance/long_range_share", "csm/long_range_share")
    if share is None:
        return Outcome("not logged", [None])
    chance = run.layer_values(f"{stat}_chance")
    ratio = [s / c if chance and math.isfinite(c) and c > 0 else math.nan for s, c in zip(share, chance or [math.nan] * len(share))]
    a = all_layers(ratio, groups.early, lambda layer: ratio[layer] >= 1.0)
    b = criterion(lambda: exceeds(mean(share, groups.early), mean(share, groups.middle)), mean(share, groups.early), mean(share, groups.middle))
    return Outcome(f"long-range share: {by_layer(share)} ({chance_text(chance)})", [a, b])


def short_range_middle(run: LoggedRun, groups: Groups) -> Outcome:
    """Claim 2 (rule in :data:`CLAIMS`); falls back to ``csm/short_range_share``, logged by runs made before
    the distance statistics left the ``csm`` finding."""
    stat, share = run.first_layer_values("distance/short_range_share", "csm/short_range_share")
    if share is None:
        return Outcome("not logged", [None])
    chance = run.layer_values(f"{stat}_chance")
    a = all_layers(share, groups.middle, lambda layer: chance is not None and exceeds(share[layer], chance[layer]))
    m, e, f = mean(share, groups.middle), mean(share, groups.early), mean(share, groups.final)
    b = criterion(lambda: exceeds(m, e) and exceeds(m, f), m, e, f)
    return Outcome(f"short-range share: {by_layer(share)} ({chance_text(chance)})", [a, b])


def sentence_wide_final(run: LoggedRun, groups: Groups) -> Outcome:
    """Claim 3 (rule in :data:`CLAIMS`)."""
    share = run.layer_values("sentences/same_sentence_share")
    chance = run.layer_values("sentences/same_sentence_share_chance")
    contrast = run.layer_values("sentences/boundary_contrast")
    spread = run.layer_values("sentences/within_sentence_spread")
    if share is None or chance is None or contrast is None or spread is None:
        return Outcome("not logged", [None])
    a = all_layers(share, groups.final, lambda layer: exceeds(share[layer], chance[layer]))
    b = all_layers(contrast, groups.final, lambda layer: exceeds(contrast[layer], 1.0))
    c = criterion(lambda: exceeds(mean(spread, groups.final), mean(spread, groups.middle)), mean(spread, groups.final), mean(spread, groups.middle))
    text = (
        f"same-sentence share: {by_layer(share)} ({chance_text(chance)}); boundary contrast: {by_layer(contrast)}; within-sentence spread: {by_layer(spread)}"
    )
    return Outcome(text, [a, b, c])


def separators_final(run: LoggedRun, groups: Groups) -> Outcome:
    """Claim 4 (rule in :data:`CLAIMS`)."""
    mass = run.layer_values("separators/attention_separators")
    chance = run.layer_values("separators/attention_separators_chance")
    if mass is None or chance is None:
        return Outcome("not logged", [None])
    f, e, c = mean(mass, groups.final), mean(mass, groups.early), mean(chance, groups.final)
    a = criterion(lambda: f >= 2.0 * c, f, c)
    b = criterion(lambda: exceeds(f, e), f, e)
    return Outcome(f"attention mass on [CLS]/[SEP]/./,: {by_layer(mass)} ({chance_text(chance)})", [a, b])


def distinct_anchors(run: LoggedRun, groups: Groups) -> Outcome:
    """Claim 5 (rule in :data:`CLAIMS`); the number of heads comes from the run's anchors table."""
    distinct = run.layer_values("anchors/distinct_anchors")
    consistency = run.layer_values("anchors/anchor_consistency")
    table = run.head_table("anchors")
    if distinct is None or consistency is None:
        return Outcome("not logged", [None])
    n_heads = int(table["head"].max()) + 1 if table is not None and len(table) else None
    a = all_layers(distinct, range(len(distinct)), lambda layer: n_heads is not None and distinct[layer] >= n_heads / 2)
    overall = mean(consistency, range(len(consistency)))
    b = criterion(lambda: overall >= 0.2, overall)
    heads = f" of {n_heads} heads" if n_heads else ""
    return Outcome(f"distinct top anchors{heads}: {by_layer(distinct)}; anchor consistency: {by_layer(consistency)}", [a, b])


def repetition_heads(run: LoggedRun, groups: Groups) -> Outcome:
    """Claim 6 (rule in :data:`CLAIMS`), from the per-head table ``tables/repetition_heads.csv``."""
    table = run.head_table("repetition")
    if table is None or "repetition_score" not in table:
        return Outcome("not logged", [None])
    score = table.groupby("layer")["repetition_score"].max().reindex(range(run.n_layers)).tolist()
    if not table["repetition_score"].notna().any():
        return Outcome(f"highest repetition score per layer: {by_layer(score)}", [None])
    strong = table[table["repetition_score"] >= 10.0]
    found = strong[strong["long_identical_high_share"] >= 0.5]
    a, b = len(strong) > 0, len(found) > 0
    names = ", ".join(f"L{int(r.layer)}H{int(r.head)}" for r in found.itertuples()) or "none"
    return Outcome(f"highest repetition score per layer: {by_layer(score)}; repetition heads: {names}", [a, b])


def same_sentence_preference(run: LoggedRun, groups: Groups) -> Outcome:
    """Claim 7 (rule in :data:`CLAIMS`): one criterion per layer."""
    ratio = run.layer_values("sentences/same_sentence_ratio")
    difference = run.layer_values("sentences/same_sentence_preference")
    if ratio is None:
        return Outcome("not logged", [None])
    relative = [(r - 1.0) if math.isfinite(r) else math.nan for r in ratio]
    per_layer = [None if not math.isfinite(v) else v > 0.33 for v in relative]
    measured = [c for c in per_layer if c is not None]
    criteria: List[Optional[bool]] = list(measured) or [None]
    text = ", ".join(f"L{layer} {fmt(100 * v, 3)}%" for layer, v in enumerate(relative))
    diff = f"; share - chance: {by_layer(difference)}" if difference is not None else ""
    labels = [f"L{layer}" for layer, c in enumerate(per_layer) if c is not None]
    return Outcome(f"preference (share / chance - 1): {text}{diff}", criteria, labels or None)


@dataclass
class Claim:
    """One claim of the paper, how it is measured and the rule that decides it."""

    title: str
    measure: str
    rule: str
    evaluate: Callable[[LoggedRun, Groups], Outcome]


CLAIMS: List[Claim] = [
    Claim(
        "Early layers pair tokens at long range",
        "`distance/long_range_share` (share of high-CSM pairs with j - i ≥ T/2) by layer, beside chance",
        "(a) in every early layer the long-range share is at least its chance value; (b) the early layers' mean long-range share exceeds the middle layers'.",
        long_range_early,
    ),
    Claim(
        "Middle layers concentrate near the diagonal (short range)",
        "`distance/short_range_share` (share of high-CSM pairs with j - i ≤ 4) by layer, beside chance",
        "(a) in every middle layer the short-range share exceeds its chance value; (b) the middle layers' mean short-range share exceeds both the early and the final layers' means.",
        short_range_middle,
    ),
    Claim(
        "Final layers spread over one sentence, with a drop across sentence boundaries",
        "`sentences/same_sentence_share` beside chance, `sentences/boundary_contrast` (share / distance-matched share), `sentences/within_sentence_spread`",
        "(a) in every final layer the same-sentence share exceeds chance; (b) in every final layer the boundary contrast exceeds 1 (high pairs stop at sentence boundaries more than their distances explain); (c) the final layers' mean within-sentence spread exceeds the middle layers' (pairs spread over the sentence rather than near the diagonal).",
        sentence_wide_final,
    ),
    Claim(
        "Final-layer attention goes to separators ([CLS], [SEP], '.', ',')",
        "`separators/attention_separators` (attention mass per query on the four tokens) by layer, beside uniform attention",
        "(a) the final layers' mean separator mass is at least twice that of uniform attention; (b) it exceeds the early layers' mean.",
        separators_final,
    ),
    Claim(
        "Each head has a distinct anchor (most common) token",
        "`anchors/distinct_anchors` (distinct top anchors among a layer's heads) and `anchors/anchor_consistency` by layer",
        "(a) in every layer at least half of the heads have different top anchors (distinct anchors ≥ heads / 2); (b) the mean anchor consistency over all heads is at least 0.2 (a head's anchor is its top token in at least a fifth of the windows).",
        distinct_anchors,
    ),
    Claim(
        "Repetition heads: some heads join identical tokens across the whole input",
        "per head (`tables/repetition_heads.csv`): `repetition_score` (long-range identical pairs that are high / chance) and `long_identical_high_share`",
        "(a) at least one head has a repetition score of 10 or more; (b) at least one such head has half or more of its long-range (j - i ≥ T/2) identical-token pairs among its high pairs.",
        repetition_heads,
    ),
    Claim(
        "High-CSM pairs prefer the same sentence (paper: preference above 33%)",
        "`sentences/same_sentence_ratio` - 1 (relative excess of the same-sentence share over chance) by layer",
        "one criterion per layer: the relative preference exceeds 33% (the paper's figure read as share / chance > 1.33); holds when every layer passes, does not hold when none does.",
        same_sentence_preference,
    ),
]
