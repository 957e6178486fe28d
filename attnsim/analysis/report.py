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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from attnsim.analysis.claims import CLAIMS, MARGIN, Claim, Groups, Outcome, fmt
from attnsim.analysis.runs import LoggedRun, run_id_list
from attnsim.analysis.verdicts import (
    ABLATION_METRICS,
    FEW_DRAWS,
    HEAD_FACTOR,
    INTERVENTION_CLAIM,
    NOT_SEPARATED,
    Z_THRESHOLD,
    Assessment,
    degenerate_heads,
    drawn_sets,
    head_verdicts,
    intervention_verdicts,
    selected_statistic,
)
from attnsim.errors import AttnsimError, TrackingError
from attnsim.keys import RunKind, Tag
from attnsim.tracking.sink import run_key

if TYPE_CHECKING:  # pandas is imported where tables are read: `import attnsim.report` stays light
    import pandas as pd

TITLE = "Reproduction report: Halevi et al., *Self-attention vector output similarities reveal how machines pay attention* (arXiv:2512.21956)"


def _intervention_section(runs: Sequence[LoggedRun]) -> str:
    """The report's "Interventions" section: each ablation run's verdict on the heads its statistic singles out."""
    ablations = [run for run in runs if any(key.startswith("ablation/clean_") for key in run.metrics)]
    if not ablations:
        return ""
    out = io.StringIO()
    out.write("\n## Interventions\n\n")
    out.write(
        f"Rule: {INTERVENTION_CLAIM} when ablating them hurts the task at least {Z_THRESHOLD:g} spreads more than ablating as many random heads does (z-score of the effect against `interventions.random_draws` random sets of the same size, drawn under the run's seed), one verdict per task metric.\n\n"
    )
    for run in ablations:
        statistic = selected_statistic(run)
        verdicts = intervention_verdicts(run)
        if not verdicts:
            out.write(f"- {_text(run.label)}: no named head set (single heads only); see `tables/ablation_sets.csv`.\n")
        for name, metric, verdict, line in verdicts:
            what = (
                f"top {run.params.get('interventions.select.top', '?')} heads by `{_text(statistic)}` of run `{run.params.get('interventions.select.run', '?')[:8]}`"
                if name == "top"
                else "the listed heads (`interventions.heads`)"
            )
            claim = INTERVENTION_CLAIM if name == "top" else "the listed heads matter more than random heads"
            out.write(f"- {_text(run.label)}, {what}, by {metric}: {claim}: **{verdict}**\n  - {_text(line)}\n")
        rho = {m: run.metrics.get(f"ablation/{m}_effect_statistic_spearman") for m in ABLATION_METRICS}
        rho = {m: v for m, v in rho.items() if v is not None}
        if rho:
            out.write("  - single-head effects against the statistic, Spearman: " + ", ".join(f"{m} {fmt(v, 2)}" for m, v in rho.items()) + "\n")
    return out.getvalue()


def _degenerate_section(runs: Sequence[LoggedRun]) -> str:
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


def claim_interventions(claim: "Claim", runs: Sequence[LoggedRun]) -> List[str]:
    """Lines for a claim's section: the verdicts of ablation runs whose selecting statistic is one of the claim's findings."""
    lines = []
    for run in runs:
        statistic = selected_statistic(run)
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


def render(runs: Sequence[LoggedRun]) -> str:
    """The Markdown report for ``runs`` (module docstring): verdicts at a glance, runs, one section per claim, rules.

    Plain CommonMark with GFM tables and no HTML, so that MLflow's artifact
    viewer (react-markdown, raw HTML shown as text) and GitHub render it alike.
    """
    assessment = Assessment.of(runs)
    out = io.StringIO()
    out.write(f"# {TITLE}\n\n")
    out.write(
        "The verdicts first, then the runs, then each claim with the values measured in each run (layers 0-indexed, layer means over heads) and the rule that decides it.\n\n"
    )
    out.write("## Verdicts at a glance\n\n| claim | " + " | ".join(_text(run.label) for run in runs) + " |\n|---|" + "---|" * len(runs) + "\n")
    for number, claim in enumerate(CLAIMS, start=1):
        out.write(f"| {number}. {_text(claim.title)} | " + " | ".join(assessment.glance(number, i) for i in range(len(runs))) + " |\n")
    for row in _decoder_rows(runs) + _intervention_rows(runs):  # induction heads and ablations, where runs measured them
        out.write(f"| {_text(row[0])} | " + " | ".join(_text(cell) for cell in row[1:]) + " |\n")
    if assessment.any_flagged:
        out.write(
            f"\n*{NOT_SEPARATED}*: the random-weights control of the same architecture in this report earns the same verdict, so the pattern does not need training.\n"
        )
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
        out.write(
            "\nAll runs saw the same windows (same corpus hash).\n"
            if len(hashes) == 1
            else "\nThe runs saw different windows (corpus hashes differ); compare them with care.\n"
        )
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
    out.write(
        "A claim **holds** when every measurable criterion is met, **does not hold** when none is, and is **mixed** otherwise; **not measured** when the run lacks the statistics or the layer group is empty. "
    )
    out.write("Layer groups: with L layers and g = max(1, round(L/3)), early = layers 0..g-1, final = L-g..L-1, middle = the layers between. ")
    out.write(f"*Exceeds* means by more than {MARGIN:.0%} (relative), so that differences at the level of rounding count as none. ")
    out.write("Chance values assume the window's high pairs were chosen uniformly among its valid pairs (attnsim docs: concepts/statistics.md).")
    if any(run.control for run in runs):
        out.write(
            f" A trained run's *holds* or *mixed* is marked *{NOT_SEPARATED}* when a random-weights control in the report (tag `attnsim.control=random` or param `model.init=random`) earns it too: a control that holds earns both, one that is mixed earns *mixed*."
        )
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
    return f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{escape(title)}</title>\n<style>{HTML_STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n'


FLAGGED_NOTE = f"* {NOT_SEPARATED}: the random-weights control of the same architecture in this report earns the same verdict"
""":func:`glance_text`'s note under a table with a flagged (``*``) verdict."""

NONE_MEASURED_NOTE = "the paper's claims 1-7: not measured by these runs (they come from `paper` or its findings)"
""":func:`glance_text`'s last line when the runs measured none of the paper's claims."""


def glance_text(runs: Sequence[LoggedRun]) -> str:
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
    lines = aligned_table(rows)
    if assessment.any_flagged:
        lines += ["", FLAGGED_NOTE]
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
        lines += ["", NONE_MEASURED_NOTE]
    return "\n".join(lines) + "\n"


def aligned_table(rows: Sequence[Sequence[str]]) -> List[str]:
    """``rows`` (the header first) as :func:`glance_text`'s lines: cells left-aligned two spaces apart, each column as
    wide as its widest cell, a line of dashes under the header, no trailing spaces."""
    widths = [max(len(row[col]) for row in rows) for col in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return lines


def _head_section(runs: Sequence[LoggedRun]) -> str:
    """The report's "Induction and previous-token heads" section (:func:`head_verdicts`), for runs that measured them."""
    found = [(run, head_verdicts(run)) for run in runs]
    found = [(run, verdicts) for run, verdicts in found if verdicts]
    if not found:
        return ""
    out = io.StringIO()
    out.write("\n## Induction and previous-token heads\n\n")
    out.write(
        f"Rule (Olsson et al. 2022): a claim holds when the run's best head scores at least {HEAD_FACTOR:g} times chance (uniform attention over the query's allowed keys); from `tables/induction_heads.csv`.\n\n"
    )
    for run, verdicts in found:
        for claim, verdict, line, _cell in verdicts:
            out.write(f"- {_text(run.label)}: {_text(claim)}: **{verdict}**\n  - {_text(line)}\n")
    return out.getvalue()


def _decoder_rows(runs: Sequence[LoggedRun]) -> List[List[str]]:
    """The glance table's rows of :func:`head_verdicts`, a cell per run (``-`` where a run has none)."""
    rows: Dict[str, List[str]] = {}
    for index, run in enumerate(runs):
        for claim, _verdict, _line, cell in head_verdicts(run):
            rows.setdefault(claim, ["-"] * len(runs))[index] = cell
    return [[claim] + cells for claim, cells in rows.items()]


def _intervention_rows(runs: Sequence[LoggedRun]) -> List[List[str]]:
    """The glance table's rows of ablation verdicts: one per named head set and task metric, a cell per run
    (``-`` where a run has no such row): the verdict and its z-score (:func:`intervention_verdicts`)."""
    rows: Dict[str, List[str]] = {}
    for index, run in enumerate(runs):
        statistic = selected_statistic(run)
        for name, metric, verdict, _line in intervention_verdicts(run):
            what = f"top {run.params.get('interventions.select.top', '?')} by {statistic}" if name == "top" else "listed heads"
            label = f"ablation: {what}, {metric}"
            z = run.metrics.get(f"ablation/{name}_{metric}_zscore", math.nan)
            draws = drawn_sets(run)
            few = f", {draws} draws only" if 0 < draws < FEW_DRAWS else ""
            rows.setdefault(label, ["-"] * len(runs))[index] = f"{verdict} (z = {fmt(z, 2)}{few})"
    return [[label] + cells for label, cells in rows.items()]


def load_runs(run_ids: Sequence[str], uri: Optional[str] = None) -> Tuple[str, List[LoggedRun]]:
    """Read runs from the tracking store (``uri``, else ``$MLFLOW_TRACKING_URI``, else ./mlruns).

    Raises:
        TrackingError: the store cannot be used or does not exist, a run id is not a string or not in it, or a run
            is not a measurement or is still RUNNING.
    """
    from attnsim.tracking.store import existing_tracker

    run_ids = run_id_list(run_ids, TrackingError)
    tracker = existing_tracker(uri)
    runs = []
    for run_id in run_ids:
        try:
            run = tracker.client.get_run(run_id)
        except Exception as exc:  # noqa: BLE001 - MLflow raises its own exception types
            raise TrackingError(
                f"Run '{run_id}' is not in the tracking store {tracker.uri} ({str(exc).splitlines()[0]}). Give run ids printed by `attnsim run`, and the store they were logged to (--uri or MLFLOW_TRACKING_URI)."
            ) from exc
        kind = RunKind.of(run.data.tags)
        if not kind.is_measurement:
            raise TrackingError(
                f"Run '{run_id}' is a {kind.value} run, not a measurement; the report reads runs of `attnsim run` (e.g. `attnsim run paper`) or a sweep's child runs."
            )
        if run.info.status == "RUNNING":
            raise TrackingError(
                f"Run '{run_id}' is still RUNNING: it has not logged its statistics yet. Report it once it has ended; if its process died "
                "(`attnsim runs` shows it), the next `attnsim run` of its experiment marks it FAILED with what it had logged."
            )
        runs.append(LoggedRun.of(run, tracker.client))
    return tracker.uri, runs


def _windows(run: LoggedRun) -> str:
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
        ReportError: ``out`` ends in ``.html`` (the HTML version would overwrite the Markdown), or is a folder.
    """
    path = Path(out) if out else default_path(run_id_list(run_ids, TrackingError))
    if path.is_dir():
        raise ReportError(f"--out {out} is a folder; give the Markdown file to write, e.g. --out {path / 'report.md'} (the HTML version goes beside it).")
    html = path.with_suffix(".html")
    if html == path:
        raise ReportError(
            f"--out {out} ends in .html, but it names the Markdown report; the HTML version is written beside it. Give a .md path, e.g. --out {path.with_suffix('.md')}."
        )
    return path, html


def write_files(runs: Sequence[LoggedRun], path: Path, html_path: Path, log_artifact: bool = True) -> None:
    """Write the report of ``runs`` as Markdown (``path``) and HTML (``html_path``); log both under ``reports/`` of every run.

    Raises:
        ReportError: a file or its folder cannot be written (the folder is a file, not writable, ...).
    """
    markdown = render(runs)
    for target, text in ((path, markdown), (html_path, render_html(markdown))):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ReportError(
                f"Cannot write the report to {target}: {exc.strerror or exc}. Give --out a .md file in a folder you can write to (missing folders are created)."
            ) from exc
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

    Example (the paper's findings on a trained MiniLM and its random control; ``tests/test_docstring_examples.py`` runs it):

        >>> import attnsim
        >>> trained = attnsim.run("paper", ["corpus.limit=2", "corpus.seq_len=32", "tracking.figures=false", "plots.examples=0", "trainer.progress_bar=false"])
        >>> control = attnsim.run("paper", ["corpus.limit=2", "corpus.seq_len=32", "tracking.figures=false", "plots.examples=0", "trainer.progress_bar=false", "model.init=random"])
        >>> result = attnsim.report([trained.run_id, control.run_id], out="report.md")
        >>> result.text.startswith("# Reproduction report")
        True
        >>> result.verdicts.shape  # one row per claim of the paper, one column per run
        (7, 2)

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
        raise TrackingError(
            "attnsim.report() needs at least one run id: give the ids that `attnsim run` (or attnsim.run(...).run_id) printed, e.g. attnsim.report([run_id])."
        )
    path, html_path = report_paths(run_ids, out)
    tracking_uri, runs = load_runs(run_ids, uri)  # read once: the files and the verdicts table come from the same runs
    write_files(runs, path, html_path, log_artifact)
    verdicts = pd.DataFrame(
        {run.run_id: [claim.evaluate(run, Groups.of(run.n_layers)).verdict for claim in CLAIMS] for run in runs},
        index=pd.Index([f"{number}. {claim.title}" for number, claim in enumerate(CLAIMS, start=1)], name="claim"),
    )
    return ReportResult(path.read_text(), path, run_ids, tracking_uri, verdicts)
