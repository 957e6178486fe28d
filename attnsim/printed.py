"""What the commands print about a finished workflow: ``attnsim finetune``'s result and ``attnsim sweep``'s summary.

Plain text from the workflows' result objects, made by functions so that tests (and the tutorials' output
blocks, ``tests/test_docs_outputs.py``) check it without running the command. Standard library only; pandas
formats the sweep's metric table it is handed.
"""

from __future__ import annotations

from typing import Any, List


def format_finetune(result: Any) -> str:
    """What ``attnsim finetune`` prints when the fit has ended: the run, what it trained on, the validation accuracy,
    the checkpoints, the sweep command and where the run is (lines joined by ``\\n``).

    Args:
        result: a :class:`attnsim.workflows.finetune.FinetuneResult`.
    """
    from attnsim.tracking.links import open_hint

    accuracy = result.metrics.get("val/accuracy")
    lines = [f"run id: {result.run_id}  (experiment id {result.experiment_id}, {result.seconds:.0f} s)", f"trained on {result.summary()}"]
    if accuracy is not None:
        lines.append(f"validation accuracy: {accuracy:.3f}  (loss {result.metrics.get('val/loss', float('nan')):.3f})")
    lines += [
        f"checkpoint directory: {result.checkpoint_dir}",
        "checkpoints: " + ", ".join(f"step {step}" for step, _ in result.checkpoints),
        f"sweep them: attnsim sweep csm --checkpoints {result.checkpoint_dir}",
        f"tracking store: {result.tracking_uri}",
        open_hint(result.tracking_uri, result.experiment_id, result.run_id),
    ]
    return "\n".join(lines)


SWEEP_WIDTH = 100
"""The widest line :func:`format_sweep` prints (characters)."""

_CHECKPOINT_WIDTH = 28  # the most characters of a checkpoint's folder name in the sweep's table


def _shortened(text: str, width: int) -> str:
    """``text``, its middle replaced by ``...`` when it is longer than ``width`` characters (both ends stay readable)."""
    if len(text) <= width:
        return text
    head = (width - 3 + 1) // 2
    return text[:head] + "..." + text[len(text) - (width - 3 - head) :]


def format_sweep(result: Any, jobs: int = 1, width: int = SWEEP_WIDTH) -> str:
    """What ``attnsim sweep`` prints about a finished sweep, every line at most ``width`` characters.

    The summary (parent run, children measured now, already finished, unreadable), the runs table (step, the
    checkpoint's folder name, shortened in the middle past 28 characters, the child's run id, the status wrapped
    onto indented lines), the model means by global step (pandas' column blocks of ``width``), and the command that
    compares the children. Full checkpoint paths and reasons stay in the parent's ``sweep/runs.csv``.

    Args:
        result: a :class:`attnsim.workflows.sweep.SweepResult` (``runs``: step, checkpoint, run_id, status;
            ``metrics``: index step, one column per statistic).
        jobs: the children measured at once (``--jobs``), said when above 1.
        width: the widest line, in characters (at least 72: a step, a folder name, a 32-character run id and a status).

    Returns:
        The text, lines joined by ``\\n``; the first line starts ``sweep parent run: RUN_ID``.
    """
    import textwrap
    from pathlib import PurePath

    runs = result.runs
    measured = int((runs["status"] == "measured").sum())
    unreadable = int(runs["status"].str.startswith("unreadable").sum())
    at_once = f", up to {jobs} at once" if jobs > 1 else ""
    bad = f", {unreadable} unreadable (skipped; see the status column)" if unreadable else ""
    counts = f"{len(runs)} children: {measured} measured now{at_once}, {len(runs) - measured - unreadable} already finished{bad}"
    wrap = dict(width=width, break_long_words=False, break_on_hyphens=False)
    lines = [f"sweep parent run: {result.parent_run_id}  (experiment id {result.experiment_id})", *textwrap.wrap(counts, **wrap)]
    lines += ["", *textwrap.wrap("checkpoint: the folder's name; full paths and reasons: the parent's artifact sweep/runs.csv", **wrap)]
    header = ["step", "checkpoint", "run id", "status"]
    cells = [
        [str(row.step), _shortened(PurePath(str(row.checkpoint)).name or str(row.checkpoint), _CHECKPOINT_WIDTH), str(row.run_id or "")]
        for row in runs.itertuples()
    ]
    widths = [max(len(c[i]) for c in [header[:3], *cells]) for i in range(3)]
    indent = sum(widths) + 2 * len(widths)
    status_width = max(width - indent, 20)

    def line(first: List[str], status: str) -> List[str]:
        aligned = [first[0].rjust(widths[0]), first[1].ljust(widths[1]), first[2].ljust(widths[2])]
        parts = textwrap.wrap(status, width=status_width, break_on_hyphens=False) or [""]
        return [("  ".join(aligned) + "  " + parts[0]).rstrip()] + [" " * indent + part for part in parts[1:]]

    lines += line(header[:3], header[3])
    for cell, status in zip(cells, runs["status"]):
        lines += line(cell, str(status))
    lines += ["", "model means by global step (the parent's metric curves):"]
    lines += result.metrics.to_string(float_format=lambda v: f"{v:.4g}", line_width=width).splitlines()
    lines += ["", f"per layer side by side: attnsim compare --parent {result.parent_run_id}"]
    return "\n".join(lines)
