"""Reproduction report: the CSM paper's claims beside what runs measured.

``attnsim report RUN_ID [RUN_ID ...]`` (or :func:`report`, :func:`write_report`) reads runs
through the MLflow client (e.g. a trained model and its random-weights
control) and writes the report twice, as Markdown and as HTML beside it, and
logs both as artifacts (``reports/``) of every run it read; the command also
prints the verdicts at a glance. The report has a table of verdicts (a row
per claim of Halevi et al., arXiv:2512.21956, a column per run), a table of
the runs, then a section per claim with its rule and, per run, the verdict, the
criteria met and the measured values by layer, one statistic per line. The
Markdown holds no HTML, so that MLflow's artifact viewer (which shows raw HTML
as text) renders it; the HTML version is made from it by markdown-it-py.

Verdicts follow one rule: each claim is split into criteria (stated in the
report); a claim *holds* when every measurable criterion is met, *does not
hold* when none is, and is *mixed* otherwise; *not measured* when the runs
lack the statistics (e.g. a ``csm``-only run has no sentence statistics) or
the model has too few layers to form the layer groups. A trained run's
*holds* or *mixed* is flagged "does not separate trained from random" when a
random-weights control in the same report earns it too (:func:`separates`).

Layer groups: with L layers and g = max(1, round(L / 3)), the early layers
are 0..g-1, the final layers L-g..L-1 and the middle layers those between
(none when L < 3).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

from attnsim.analysis import runs as logged
from attnsim.errors import AttnsimError, TrackingError
from attnsim.keys import RunKind, Tag
from attnsim.tracking.sink import run_key

if TYPE_CHECKING:  # pandas is imported where tables are read: `import attnsim.report` stays light
    import pandas as pd

TITLE = "Reproduction report: Halevi et al., *Self-attention vector output similarities reveal how machines pay attention* (arXiv:2512.21956)"


@dataclass
class RunData:
    """What the report needs from one run: identity, tags, metrics and (lazily) per-head tables."""

    run_id: str
    name: str
    status: str
    tags: Dict[str, str]
    metrics: Dict[str, float]
    client: object = field(repr=False, default=None)
    params: Dict[str, str] = field(default_factory=dict)
    experiment_id: str = ""
    _tables: Dict[str, Optional["pd.DataFrame"]] = field(default_factory=dict, repr=False)

    @property
    def control(self) -> bool:
        """Whether the run is a random-weights control: tag ``attnsim.control=random`` or param ``model.init=random``."""
        return self.tags.get(Tag.CONTROL.value) == "random" or self.params.get("model.init") == "random"

    @property
    def label(self) -> str:
        """Column heading: run name, short id and whether it is the control."""
        kind = "random-weights control" if self.control else self.tags.get(Tag.MODEL_INIT.value, "pretrained")
        return f"{self.name} `{self.run_id[:8]}` ({kind})"

    @property
    def n_layers(self) -> int:
        """Number of layers: from the layer-mean metric keys (``.../L03``), else from the heads table of
        the first of the run's findings (param ``findings``) that has one."""
        count = logged.n_layers(self.metrics)
        for finding in [f for f in self.params.get("findings", "").split(",") if f] if not count else ():
            count = logged.table_layers(self.head_table(finding))
            if count:
                break
        return count

    def layer_values(self, stat: str) -> Optional[List[float]]:
        """Layer means of ``finding/stat`` for every layer (NaN where undefined), None when absent: the logged
        ``finding/stat/LNN`` metrics, else the nanmean of each layer's heads in the run's heads table
        (:func:`attnsim.analysis.runs.layer_means`; ``paper`` logs layer means of its headline statistics only)."""
        return logged.layer_means(self.metrics, stat, self.head_table, self.n_layers)

    def first_layer_values(self, *stats: str) -> Tuple[Optional[str], Optional[List[float]]]:
        """The first of ``stats`` the run logged, and its layer means."""
        for stat in stats:
            values = self.layer_values(stat)
            if values is not None:
                return stat, values
        return None, None

    def head_table(self, finding: str) -> Optional["pd.DataFrame"]:
        """The per-head table ``tables/<finding>_heads.csv`` of the run (downloaded once), None when it has none."""
        if finding not in self._tables:
            self._tables[finding] = logged.download_head_table(self.client, self.run_id, finding) if self.client is not None else None
        return self._tables[finding]


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


def long_range_early(run: RunData, groups: Groups) -> Outcome:
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


def short_range_middle(run: RunData, groups: Groups) -> Outcome:
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


def sentence_wide_final(run: RunData, groups: Groups) -> Outcome:
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
    text = f"same-sentence share: {by_layer(share)} ({chance_text(chance)}); boundary contrast: {by_layer(contrast)}; within-sentence spread: {by_layer(spread)}"
    return Outcome(text, [a, b, c])


def separators_final(run: RunData, groups: Groups) -> Outcome:
    """Claim 4 (rule in :data:`CLAIMS`)."""
    mass = run.layer_values("separators/attention_separators")
    chance = run.layer_values("separators/attention_separators_chance")
    if mass is None or chance is None:
        return Outcome("not logged", [None])
    f, e, c = mean(mass, groups.final), mean(mass, groups.early), mean(chance, groups.final)
    a = criterion(lambda: f >= 2.0 * c, f, c)
    b = criterion(lambda: exceeds(f, e), f, e)
    return Outcome(f"attention mass on [CLS]/[SEP]/./,: {by_layer(mass)} ({chance_text(chance)})", [a, b])


def distinct_anchors(run: RunData, groups: Groups) -> Outcome:
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


def repetition_heads(run: RunData, groups: Groups) -> Outcome:
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


def same_sentence_preference(run: RunData, groups: Groups) -> Outcome:
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
    evaluate: Callable[[RunData, Groups], Outcome]


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


INTERVENTION_CLAIM = "the heads the statistic singles out matter more than random heads"
Z_THRESHOLD = 2.0  # an ablated set "matters more than random heads" when its effect is >= 2 random spreads above the random mean
_ABLATION_METRICS = ("accuracy", "logit_diff", "mlm_loss", "lm_loss", "repeat_loss", "first_copy_loss", "cosine", "csm_change")  # each measured metric gets its verdict


def intervention_verdicts(run: RunData) -> List[Tuple[str, str, str, str]]:
    """An ablation run's verdicts on its named head sets (``top`` of ``interventions.select``, ``listed``), per task metric.

    Rule: a set matters more than random heads when its effect (the metric's damage, positive = the
    ablation hurt) is at least :data:`Z_THRESHOLD` random spreads above the random sets' mean effect
    (z-score >= 2): *holds*, else *does not hold*; *not measured* without a random baseline
    (``interventions.random_draws=0``).

    Returns:
        (set, metric, verdict, values line) per named set and metric the run measured.
    """
    out = []
    for metric in _ABLATION_METRICS:
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
            out.append((name, metric, verdict, line))
    return out


def _selected_statistic(run: RunData) -> str:
    """``interventions.select.metric`` of an ablation run (params), empty when it named none."""
    value = run.params.get("interventions.select.metric", "")
    return "" if value in ("", "null", "None") else value


def _intervention_section(runs: Sequence[RunData]) -> str:
    """The report's "Interventions" section: each ablation run's verdict on the heads its statistic singles out."""
    ablations = [run for run in runs if any(key.startswith("ablation/clean_") for key in run.metrics)]
    if not ablations:
        return ""
    out = io.StringIO()
    out.write("\n## Interventions\n\n")
    out.write(f"Rule: {INTERVENTION_CLAIM} when ablating them hurts the task at least {Z_THRESHOLD:g} spreads more than ablating as many random heads does (z-score of the effect against `interventions.random_draws` random sets of the same size, drawn under the run's seed), one verdict per task metric.\n\n")
    for run in ablations:
        statistic = _selected_statistic(run)
        verdicts = intervention_verdicts(run)
        if not verdicts:
            out.write(f"- {_text(run.label)}: no named head set (single heads only); see `tables/ablation_sets.csv`.\n")
        for name, metric, verdict, line in verdicts:
            what = f"top {run.params.get('interventions.select.top', '?')} heads by `{_text(statistic)}` of run `{run.params.get('interventions.select.run', '?')[:8]}`" if name == "top" else "the listed heads (`interventions.heads`)"
            claim = INTERVENTION_CLAIM if name == "top" else "the listed heads matter more than random heads"
            out.write(f"- {_text(run.label)}, {what}, by {metric}: {claim}: **{verdict}**\n  - {_text(line)}\n")
        rho = {m: run.metrics.get(f"ablation/{m}_effect_statistic_spearman") for m in _ABLATION_METRICS}
        rho = {m: v for m, v in rho.items() if v is not None}
        if rho:
            out.write("  - single-head effects against the statistic, Spearman: " + ", ".join(f"{m} {fmt(v, 2)}" for m, v in rho.items()) + "\n")
    return out.getvalue()


def degenerate_heads(run: RunData) -> Optional[List[Tuple[str, float]]]:
    """``(head, tie share)`` of a run's heads flagged degenerate (column ``degenerate`` of ``tables/csm_heads.csv``:
    ties at the k-th CSM value decided more than a tenth of their high pairs in most windows), strongest first;
    None when the run has no such column (runs without the ``csm`` finding, or made before it existed)."""
    table = run.head_table("csm")
    if table is None or "degenerate" not in table.columns:
        return None
    flagged = table[table["degenerate"] == 1].sort_values("tie_share", ascending=False)
    return [(f"L{int(r.layer):02d}H{int(r.head):02d}", float(r.tie_share)) for r in flagged.itertuples()]


def _degenerate_section(runs: Sequence[RunData]) -> str:
    """The report's "Degenerate heads" section: heads whose high pairs the tie rule, not the model, chose."""
    found = [(run, degenerate_heads(run)) for run in runs]
    found = [(run, heads) for run, heads in found if heads is not None]
    if not found:
        return ""
    out = io.StringIO()
    out.write("\n## Degenerate heads\n\n")
    out.write(
        "A head is *degenerate* in a window when more pairs lie within the float32 precision of its products of the k-th "
        "CSM value than choices are left for them, and those choices (more than a tenth of its high pairs) fall to the tie rule "
        "(lowest pair index): usually an attention-sink head, whose CSM is nearly constant. Flagged: degenerate in more than half "
        "of the windows. Their high-pair statistics (distance, sentences, anchors, repetition, regions) say more about pair order "
        "than about the model; the layer means above include them, and `csm/degenerate/LNN` gives each layer's share of them.\n\n"
    )
    for run, heads in found:
        listed = ", ".join(f"{head} (tie share {fmt(share, 2)})" for head, share in heads) if heads else "none"
        out.write(f"- {_text(run.label)}: {len(heads)} flagged: {listed}\n")
    return out.getvalue()


def claim_interventions(claim: "Claim", runs: Sequence[RunData]) -> List[str]:
    """Lines for a claim's section: the verdicts of ablation runs whose selecting statistic is one of the claim's findings."""
    lines = []
    for run in runs:
        statistic = _selected_statistic(run)
        finding = statistic.split("/", 1)[0]
        if not finding or (f"`{finding}/" not in claim.measure and f"tables/{finding}_heads" not in claim.measure):
            continue
        for name, _metric, verdict, line in intervention_verdicts(run):
            if name == "top":
                lines.append(f"- intervention {_text(run.label)} (top heads by `{_text(statistic)}`): {INTERVENTION_CLAIM}: **{verdict}** ({_text(line)})\n")
    return lines


def _marks(outcome: Outcome) -> str:
    criteria = outcome.criteria
    if all(c is None for c in criteria):
        return ""
    labels = outcome.labels or [chr(ord("a") + i) for i in range(len(criteria))]
    return ", ".join(f"{label}: {'yes' if c else 'no' if c is not None else 'n/a'}" for label, c in zip(labels, criteria))


def _text(text: str) -> str:
    """Text from a run (names, tags) made inert in Markdown: no HTML (``<`` as an entity), no table breaks."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|").replace("\n", " ")


NOT_SEPARATED = "does not separate trained from random"
_RANK = {"mixed": 1, "holds": 2}


def control_key(run: RunData) -> Tuple[str, ...]:
    """What a random-weights control must share with a trained run to judge it: model type, shape (layers x heads x
    d_head; the layer count where the run has no shape tag), window length and the windows' content hash."""
    t = run.tags
    shape = t.get(Tag.SHAPE.value) or f"{run.n_layers}x?"
    return (t.get(Tag.MODEL_TYPE.value, "?"), shape, t.get(Tag.SEQ_LEN.value, "?"), t.get(Tag.CORPUS_HASH.value, "?"))


def matching_controls(run: RunData, runs: Sequence[RunData]) -> List[int]:
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

    runs: List[RunData]
    outcomes: List[List[Outcome]]
    flagged: List[List[bool]]

    controls: Dict[int, List[int]] = field(default_factory=dict)
    """Trained run index -> the indices of the controls that judge it (:func:`matching_controls`)."""

    @classmethod
    def of(cls, runs: Sequence[RunData]) -> "Assessment":
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
            lines.append(f"{run.name} {run.run_id[:8]}: judged by control {named}" if judges else f"{run.name} {run.run_id[:8]}: no matching control (same model type, shape, window length and windows)")
        return lines

    def glance(self, number: int, index: int) -> str:
        """Verdict of claim ``number - 1`` for run ``index``, with the flag when it has one."""
        outcome = self.outcomes[number - 1][index]
        return f"{outcome.verdict} ({NOT_SEPARATED})" if self.flagged[number - 1][index] else outcome.verdict

    @property
    def any_flagged(self) -> bool:
        """Whether any verdict is flagged."""
        return any(any(row) for row in self.flagged)


def render(runs: Sequence[RunData]) -> str:
    """The Markdown report for ``runs`` (module docstring): verdicts at a glance, runs, one section per claim, rules.

    Plain CommonMark with GFM tables and no HTML, so that MLflow's artifact
    viewer (react-markdown, raw HTML shown as text) and GitHub render it alike.
    """
    assessment = Assessment.of(runs)
    out = io.StringIO()
    out.write(f"# {TITLE}\n\n")
    out.write("The verdicts first, then the runs, then each claim with the values measured in each run (layers 0-indexed, layer means over heads) and the rule that decides it.\n\n")
    out.write("## Verdicts at a glance\n\n| claim | " + " | ".join(_text(run.label) for run in runs) + " |\n|---|" + "---|" * len(runs) + "\n")
    for number, claim in enumerate(CLAIMS, start=1):
        out.write(f"| {number}. {_text(claim.title)} | " + " | ".join(assessment.glance(number, i) for i in range(len(runs))) + " |\n")
    for row in _decoder_rows(runs) + _intervention_rows(runs):  # induction heads and ablations, where runs measured them
        out.write(f"| {_text(row[0])} | " + " | ".join(_text(cell) for cell in row[1:]) + " |\n")
    if assessment.any_flagged:
        out.write(f"\n*{NOT_SEPARATED}*: the random-weights control of the same architecture in this report earns the same verdict, so the pattern does not need training.\n")
    for line in assessment.control_lines():
        out.write(f"\n- {_text(line)}")
    out.write("\n\n## Runs\n\n" if assessment.control_lines() else "\n## Runs\n\n")
    out.write("| run | run id | model | weights | windows | corpus hash | experiment | status | layer groups |\n|---|---|---|---|---|---|---|---|---|\n")
    for run in runs:
        t = run.tags
        out.write(
            f"| {_text(run.name)} | `{run.run_id}` | {_text(t.get(Tag.MODEL.value, '?'))} | {'random (control)' if run.control else _text(t.get(Tag.MODEL_INIT.value, 'pretrained'))} "
            f"| {_windows(run)} | `{t.get(Tag.CORPUS_HASH.value, '?')[:12]}` | {_text(t.get(Tag.EXPERIMENT.value, '?'))} | {run.status} | {Groups.of(run.n_layers).describe()} |\n"
        )
    hashes = {run.tags.get(Tag.CORPUS_HASH.value) for run in runs}
    if len(runs) > 1:
        out.write("\nAll runs saw the same windows (same corpus hash).\n" if len(hashes) == 1 else "\nThe runs saw different windows (corpus hashes differ); compare them with care.\n")
    for number, (claim, row) in enumerate(zip(CLAIMS, assessment.outcomes), start=1):
        out.write(f"\n## {number}. {_text(claim.title)}\n\n")
        out.write(f"Measured: {claim.measure}\n\nRule: {claim.rule}\n\n")
        for index, (run, outcome) in enumerate(zip(runs, row)):
            marks = _marks(outcome)
            flag = f" - *{NOT_SEPARATED}*" if assessment.flagged[number - 1][index] else ""
            out.write(f"- {_text(run.label)}: **{outcome.verdict}**{' (' + marks + ')' if marks else ''}{flag}\n")
            for line in outcome.lines:
                out.write(f"  - {_text(line)}\n")
        for line in claim_interventions(claim, runs):
            out.write(line)
    out.write(_head_section(runs))
    out.write(_intervention_section(runs))
    out.write(_degenerate_section(runs))
    out.write("\n## Rules\n\n")
    out.write("A claim **holds** when every measurable criterion is met, **does not hold** when none is, and is **mixed** otherwise; **not measured** when the run lacks the statistics or the layer group is empty. ")
    out.write("Layer groups: with L layers and g = max(1, round(L/3)), early = layers 0..g-1, final = L-g..L-1, middle = the layers between. ")
    out.write(f"*Exceeds* means by more than {MARGIN:.0%} (relative), so that differences at the level of rounding count as none. ")
    out.write("Chance values assume the window's high pairs were chosen uniformly among its valid pairs (attnsim docs: concepts/statistics.md).")
    if any(run.control for run in runs):
        out.write(f" A trained run's *holds* or *mixed* is marked *{NOT_SEPARATED}* when a random-weights control in the report (tag `attnsim.control=random` or param `model.init=random`) earns it too: a control that holds earns both, one that is mixed earns *mixed*.")
    out.write("\n")
    return out.getvalue()


HTML_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:72rem;margin:1.5rem auto;padding:0 1rem;line-height:1.45}"
    "table{border-collapse:collapse;margin:.5rem 0}th,td{border:1px solid #bbb;padding:.25rem .5rem;text-align:left;vertical-align:top}"
    "th{background:#f0f0f0}code{font-size:.9em}h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:1.5rem}"
)


def render_html(markdown: str, title: str = "attnsim reproduction report") -> str:
    """``markdown`` (from :func:`render`) as a standalone HTML page (CommonMark + tables, by markdown-it-py; raw HTML in the text stays text)."""
    from html import escape

    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    return f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{escape(title)}</title>\n<style>{HTML_STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"


def glance_text(runs: Sequence[RunData]) -> str:
    """The verdicts at a glance as a fixed-width text table for the terminal (``*`` marks a verdict the control also earns)."""
    assessment = Assessment.of(runs)
    header = ["claim"] + [f"{run.name} {run.run_id[:8]}" + (" (control)" if run.control else "") for run in runs]
    rows = [header]
    unmeasured = []
    for number, claim in enumerate(CLAIMS, start=1):
        outcomes = assessment.outcomes[number - 1]
        if all(outcome.verdict == "not measured" for outcome in outcomes):
            unmeasured.append(number)  # no run has the statistics: one line below, not a row of blanks
            continue
        cells = [outcome.verdict + (" *" if flag else "") for outcome, flag in zip(outcomes, assessment.flagged[number - 1])]
        rows.append([f"{number}. {claim.title}"] + cells)
    rows += _decoder_rows(runs) + _intervention_rows(runs)
    if len(rows) == 1:
        rows.append(["(no claim measured)"] + ["not measured"] * len(runs))
    widths = [max(len(row[col]) for row in rows) for col in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    if assessment.any_flagged:
        lines += ["", f"* {NOT_SEPARATED}: the random-weights control of the same architecture in this report earns the same verdict"]
    controls = assessment.control_lines()
    if controls:
        lines += [""] + controls
    for run in runs:
        heads = degenerate_heads(run) or []
        if heads:
            shown = ", ".join(head for head, _ in heads[:8]) + (f" and {len(heads) - 8} more" if len(heads) > 8 else "")
            lines += ["", f"{run.name} {run.run_id[:8]}: {len(heads)} degenerate head(s), high pairs decided by ties: {shown}"]
    if unmeasured and len(unmeasured) < len(CLAIMS):
        lines += ["", f"paper claims {', '.join(map(str, unmeasured))}: not measured by these runs"]
    elif unmeasured:
        lines += ["", "the paper's claims 1-7: not measured by these runs (they come from `paper` or its findings)"]
    return "\n".join(lines) + "\n"


HEAD_CLAIMS = (
    ("induction_score", "Induction heads: a head attends to the token after an earlier occurrence"),
    ("prev_token_score", "Previous-token heads: a head attends to the previous token"),
)
HEAD_FACTOR = 10.0  # a head "is" an induction (previous-token) head when its score is at least this many times chance


def head_verdicts(run: RunData) -> List[Tuple[str, str, str, str]]:
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
        out.append((claim, verdict, f"best head {head}: {fmt(float(best[stat]))} against chance {fmt(float(best[f'{stat}_chance']))} ({ratio:.0f}x)", f"{verdict} ({head}, {ratio:.0f}x chance)"))
    return out


def _head_section(runs: Sequence[RunData]) -> str:
    """The report's "Induction and previous-token heads" section (:func:`head_verdicts`), for runs that measured them."""
    found = [(run, head_verdicts(run)) for run in runs]
    found = [(run, verdicts) for run, verdicts in found if verdicts]
    if not found:
        return ""
    out = io.StringIO()
    out.write("\n## Induction and previous-token heads\n\n")
    out.write(f"Rule (Olsson et al. 2022): a claim holds when the run's best head scores at least {HEAD_FACTOR:g} times chance (uniform attention over the query's allowed keys); from `tables/induction_heads.csv`.\n\n")
    for run, verdicts in found:
        for claim, verdict, line, _cell in verdicts:
            out.write(f"- {_text(run.label)}: {_text(claim)}: **{verdict}**\n  - {_text(line)}\n")
    return out.getvalue()


def _decoder_rows(runs: Sequence[RunData]) -> List[List[str]]:
    """The glance table's rows of :func:`head_verdicts`, a cell per run (``-`` where a run has none)."""
    rows: Dict[str, List[str]] = {}
    for index, run in enumerate(runs):
        for claim, _verdict, _line, cell in head_verdicts(run):
            rows.setdefault(claim, ["-"] * len(runs))[index] = cell
    return [[claim] + cells for claim, cells in rows.items()]


def _intervention_rows(runs: Sequence[RunData]) -> List[List[str]]:
    """The glance table's rows of ablation verdicts: one per named head set and task metric, a cell per run
    (``-`` where a run has no such row): the verdict and its z-score (:func:`intervention_verdicts`)."""
    rows: Dict[str, List[str]] = {}
    for index, run in enumerate(runs):
        statistic = _selected_statistic(run)
        for name, metric, verdict, _line in intervention_verdicts(run):
            what = f"top {run.params.get('interventions.select.top', '?')} by {statistic}" if name == "top" else "listed heads"
            label = f"ablation: {what}, {metric}"
            z = run.metrics.get(f"ablation/{name}_{metric}_zscore", math.nan)
            rows.setdefault(label, ["-"] * len(runs))[index] = f"{verdict} (z = {fmt(z, 2)})"
    return [[label] + cells for label, cells in rows.items()]


def load_runs(run_ids: Sequence[str], uri: Optional[str] = None) -> Tuple[str, List[RunData]]:
    """Read runs from the tracking store (``uri``, else ``$MLFLOW_TRACKING_URI``, else ./mlruns).

    Raises:
        TrackingError: the store cannot be used or a run id is not in it.
    """
    from attnsim.tracking.store import Tracker

    tracker = Tracker(uri)
    tracker.check()
    runs = []
    for run_id in run_ids:
        try:
            run = tracker.client.get_run(run_id)
        except Exception as exc:  # noqa: BLE001 - MLflow raises its own exception types
            raise TrackingError(f"Run '{run_id}' is not in the tracking store {tracker.uri} ({str(exc).splitlines()[0]}). Give run ids printed by `attnsim run`, and the store they were logged to (--uri or MLFLOW_TRACKING_URI).") from exc
        kind = RunKind.of(run.data.tags)
        if not kind.is_measurement:
            raise TrackingError(f"Run '{run_id}' is a {kind.value} run, not a measurement; the report reads runs of `attnsim run` (e.g. `attnsim run paper`) or a sweep's child runs.")
        runs.append(
            RunData(
                run_id, run.info.run_name or run_id[:8], run.info.status, dict(run.data.tags), dict(run.data.metrics), tracker.client,
                params=dict(run.data.params), experiment_id=run.info.experiment_id,
            )
        )
    return tracker.uri, runs


def _windows(run: RunData) -> str:
    """Windows measured: the ``zz_run/windows`` metric (what was folded in; ``attnsim/windows`` in runs
    logged before the bookkeeping group was renamed), marked when the run is partial."""
    measured = run.metrics.get(run_key("windows"), run.metrics.get("attnsim/windows"))
    count = str(int(measured)) if measured is not None else run.tags.get(Tag.WINDOWS.value, "?")
    if run.tags.get(Tag.PARTIAL.value) == "true":
        return f"{count} of {run.tags.get(Tag.WINDOWS.value, '?')} (partial run)"
    return count


class ReportError(AttnsimError):
    """The report cannot be written where asked."""


def default_path(run_ids: Sequence[str]) -> Path:
    """``reports/report-<first 8 characters of each id, joined by '-'>.md`` under the current directory."""
    return Path("reports") / f"report-{'-'.join(run_id[:8] for run_id in run_ids)}.md"


def report_paths(run_ids: Sequence[str], out: Optional[str] = None) -> Tuple[Path, Path]:
    """The Markdown file (``out``, else :func:`default_path`) and the HTML file beside it (same name, ``.html``).

    Raises:
        ReportError: ``out`` ends in ``.html`` (the HTML version would overwrite the Markdown).
    """
    path = Path(out) if out else default_path(run_ids)
    html = path.with_suffix(".html")
    if html == path:
        raise ReportError(f"--out {out} ends in .html, but it names the Markdown report; the HTML version is written beside it. Give a .md path, e.g. --out {path.with_suffix('.md')}.")
    return path, html


def write_files(runs: Sequence[RunData], path: Path, html_path: Path, log_artifact: bool = True) -> None:
    """Write the report of ``runs`` as Markdown (``path``) and HTML (``html_path``); log both under ``reports/`` of every run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    markdown = render(runs)
    path.write_text(markdown, encoding="utf-8")
    html_path.write_text(render_html(markdown), encoding="utf-8")
    if log_artifact:
        for run in runs:
            run.client.log_artifact(run.run_id, str(path), "reports")
            run.client.log_artifact(run.run_id, str(html_path), "reports")


def write_report(run_ids: Sequence[str], out: Optional[str] = None, uri: Optional[str] = None, log_artifact: bool = True) -> Path:
    """Write the reproduction report of ``run_ids`` (Markdown, and HTML beside it) and log both to each of those runs (``reports/``).

    Args:
        run_ids: MLflow run ids (e.g. a trained model's run and its random control).
        out: Markdown file to write (default :func:`default_path`); the HTML file gets the same name ending in ``.html``.
        uri: tracking URI (default ``$MLFLOW_TRACKING_URI``, else ./mlruns/mlflow.db).
        log_artifact: also log both files as artifacts of every run read.

    Returns:
        The Markdown path written.

    Raises:
        ReportError: ``out`` ends in ``.html``.
        TrackingError: the store cannot be used or a run is not in it.
        ValueError: no run id given.
    """
    if not run_ids:
        raise ValueError("Give at least one run id.")
    path, html_path = report_paths(run_ids, out)
    _, runs = load_runs(run_ids, uri)
    write_files(runs, path, html_path, log_artifact)
    return path


# -- Python API: attnsim.report(...) ---------------------------------------------------


@dataclass
class ReportResult:
    """What :func:`report` produced; ``attnsim.ReportResult``.

    Attributes:
        text: the Markdown report (as written to ``path``).
        path: the Markdown file written.
        run_ids: the runs read, in column order.
        tracking_uri: the store they were read from.
        verdicts: pandas DataFrame, one row per claim of the paper (index ``claim``: ``"1. Early layers
            pair tokens at long range"``, ...), one column per run id; each cell ``holds``,
            ``does not hold``, ``mixed`` or ``not measured`` (rules in the module docstring).
    """

    text: str
    path: Path
    run_ids: List[str]
    tracking_uri: str
    verdicts: pd.DataFrame


def report(run_ids: Sequence[str], out: Optional[str] = None, uri: Optional[str] = None, log_artifact: bool = True) -> ReportResult:
    """Write the reproduction report of ``run_ids`` (as ``attnsim report``) and return it; ``attnsim.report``.

    Example::

        result = attnsim.report([trained.run_id, control.run_id], out="report.md")
        print(result.text)                       # Markdown
        result.verdicts.loc[:, trained.run_id]   # verdict per claim

    Args:
        run_ids: MLflow run ids of measurement runs (e.g. a trained model's run and its random control);
            a single id may be given as a string.
        out: Markdown file to write (default ``reports/report-<ids>.md`` under the current directory).
        uri: tracking URI (default ``$MLFLOW_TRACKING_URI``, else ./mlruns/mlflow.db).
        log_artifact: also log the file as an artifact (``reports/``) of every run read.

    Returns:
        :class:`ReportResult`: the text, the path, and the verdicts as a DataFrame.

    Raises:
        TrackingError: the store cannot be used, a run is not in it, or no run id was given.
    """
    import pandas as pd

    run_ids = [run_ids] if isinstance(run_ids, str) else list(run_ids or [])
    if not run_ids:
        raise TrackingError("attnsim.report() needs at least one run id: give the ids that `attnsim run` (or attnsim.run(...).run_id) printed, e.g. attnsim.report([run_id]).")
    path, html_path = report_paths(run_ids, out)
    tracking_uri, runs = load_runs(run_ids, uri)  # read once: the files and the verdicts table come from the same runs
    write_files(runs, path, html_path, log_artifact)
    verdicts = pd.DataFrame(
        {run.run_id: [claim.evaluate(run, Groups.of(run.n_layers)).verdict for claim in CLAIMS] for run in runs},
        index=pd.Index([f"{number}. {claim.title}" for number, claim in enumerate(CLAIMS, start=1)], name="claim"),
    )
    return ReportResult(path.read_text(), path, run_ids, tracking_uri, verdicts)
