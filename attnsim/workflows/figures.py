"""The findings' figures of a run, drawn in up to ``plots.processes`` processes.

Drawing is most of a run's time after predict (about 2 s of a default ``paper`` run's 23 s on
2 CPU cores), and matplotlib draws on one core, holding the GIL. :func:`log_figures` therefore
forks ``plots.processes`` helper processes right after predict, before any figure exists. Each
helper draws whole findings, the costliest first (:func:`drawing_order`), a costly finding's figures
split between helpers (:func:`drawing_tasks`), and encodes their figures
as PNG (:func:`attnsim.tracking.png.png_bytes`); this process uploads each finding's files through
the run's sink as soon as they arrive. The helpers inherit the summaries and example windows from
the fork (nothing is pickled on the way in), freeze the garbage collector's view of what they
inherited, draw with one torch thread, and exit when the findings are drawn.

Where forking is not available or not worth it, everything is drawn here, one finding after
another: on platforms other than Linux (macOS and Windows would start a new interpreter that
imports torch again), where this process may use one CPU only, with ``plots.processes=1``, and when
only one finding has figures. If a helper dies (killed, out of memory), the other helpers are
killed too and the findings not yet logged are drawn here, with a warning; an error raised by a
finding's figure code in a helper is raised here, as it would be without helpers. Helpers ignore
SIGINT (the run's process stops them on Ctrl-C), take SIGTERM's default action instead of the run's
handler, and are killed by the kernel when the run's process dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import warnings
from typing import Any, Callable, List, Optional, Sequence, Tuple

from attnsim.workflows.startup import release_free_memory

log = logging.getLogger(__name__)

__all__ = ["usable_processes", "drawing_order", "drawing_tasks", "log_figures"]

# (jobs, examples, plots config, page title, fixed-layout test) for the forked helpers: set just
# before the fork, inherited by them, cleared after
_JOB: Optional[tuple] = None

Job = Tuple[Any, Any]  # (finding, its summary)
Task = Tuple[int, int, int]  # (job index, part, parts): the figures at positions part, part + parts, ... of a finding


def usable_processes(requested: int) -> int:
    """How many processes may draw figures: ``requested``, at most the CPUs this process may use,
    and 1 where helper processes cannot be forked (platforms other than Linux)."""
    if requested <= 1 or not sys.platform.startswith("linux"):
        return 1
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(int(requested), len(os.sched_getaffinity(0))))


def drawing_order(jobs: Sequence[Job]) -> List[int]:
    """Indices of ``jobs``, the costliest finding first (``Finding.figure_cost``, default 1; ties keep
    their order): the longest tasks start first, so that no process is left drawing one alone."""
    return sorted(range(len(jobs)), key=lambda index: -float(getattr(jobs[index][0], "figure_cost", 1.0)))


def drawing_tasks(jobs: Sequence[Job], processes: int) -> List[Task]:
    """The helpers' tasks, ``(job index, part, parts)``, the costliest first.

    A costly finding (``figure_cost`` over 1, a finding of two figures) whose cost exceeds a helper's
    fair share of all the findings' costs (their sum over ``processes``) is drawn in ``parts = min(processes, ceil(cost / share))`` parts, part p drawing
    the figures at positions p, p + parts, ... of its figures (and part 0 its pages), so that one costly
    finding does not leave the other helpers idle: a ``csm`` run's csm figures took 1.2 s of its 1.4 s of
    drawing in one helper, 0.9 s in two. Other findings are drawn whole: each part builds all of its
    finding's figures (drawing only its own), so splitting where the helpers are already balanced (a
    ``paper`` run's nine findings) only adds work. Tasks are ordered by their cost (``figure_cost / parts``),
    then as :func:`drawing_order` orders the findings.
    """
    costs = [float(getattr(finding, "figure_cost", 1.0)) for finding, _ in jobs]
    share = sum(costs) / max(1, int(processes))
    tasks: List[Tuple[float, Task]] = []
    for index in drawing_order(jobs):
        cost = costs[index]
        parts = max(1, min(int(processes), math.ceil(cost / share - 1e-9))) if cost > 1.0 else 1
        tasks.extend((cost / parts, (index, part, parts)) for part in range(parts))
    return [task for _, task in sorted(tasks, key=lambda item: -item[0])]


def _draw(job: Job, part: int, parts: int, examples: Any, plots_cfg: Any, title: str, has_fixed_layout: Callable[[Any], bool]) -> List[Tuple[str, str, Any]]:
    """``(kind, artifact path, payload)`` of part ``part`` of ``parts`` of one finding: ``("png", path, PNG
    bytes)`` per figure of that part (the others are built, as the finding's generator makes them, and
    closed undrawn) and, for part 0, ``("text", path, HTML)`` per page."""
    import matplotlib.pyplot as plt

    from attnsim.tracking.png import figure_pixels, png_bytes

    finding, summary = job
    out: List[Tuple[str, str, Any]] = []
    for position, (path, figure) in enumerate(finding.figures(summary, examples, plots_cfg)):
        try:
            if position % parts != part:
                continue
            pixels = figure_pixels(figure, plots_cfg.dpi, has_fixed_layout(figure))
        finally:
            plt.close(figure)
        out.append(("png", path, png_bytes(pixels, plots_cfg.dpi)))
    if plots_cfg.explorer and part == 0:
        out.extend(("text", path, page) for path, page in finding.pages(summary, plots_cfg, title))
    return out


def _start_helper(parent: int) -> None:
    """Initialiser of a forked helper of process ``parent``."""
    import gc
    import signal

    import torch

    # the run's own handlers (end the MLflow run as KILLED) are not a helper's: Ctrl-C reaches the
    # whole process group and the run's process stops the helpers; SIGTERM ends a helper at once
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with(parent)
    gc.freeze()  # what the fork inherited is never collected here: no collection walks (and copies) it
    torch.set_num_threads(1)  # the parent's OpenMP pool does not survive a fork; draw on one thread


def _die_with(parent: int) -> None:
    # Linux: SIGKILL this helper when the run's process dies (killed, out of memory), so that no
    # helper is left behind blocked on a pipe nobody reads
    import ctypes
    import signal

    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass
    if os.getppid() != parent:  # the parent died before the request above
        os._exit(1)


def _stop(pool) -> None:
    """Kill the helpers of ``pool`` (their results are no longer wanted, and a helper writing a result
    nobody reads would block for ever)."""
    kill = getattr(pool, "kill_workers", None)  # Python 3.14+
    if kill is not None:
        kill()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.kill()


def _helper(task: Task) -> List[Tuple[str, str, Any]]:
    """Body of a forked helper: draw part ``part`` of ``parts`` of finding ``index`` of the inherited jobs."""
    jobs, examples, plots_cfg, title, fixed = _JOB  # type: ignore[misc]
    index, part, parts = task
    return _draw(jobs[index], part, parts, examples, plots_cfg, title, fixed)


def _log_here(sink, job: Job, examples: Any, plots_cfg: Any, title: str, has_fixed_layout: Callable[[Any], bool], part: int = 0, parts: int = 1) -> None:
    import matplotlib.pyplot as plt

    finding, summary = job
    for position, (path, figure) in enumerate(finding.figures(summary, examples, plots_cfg)):
        if position % parts != part:
            plt.close(figure)
            continue
        sink.log_figure(figure, path, plots_cfg.dpi, fixed_layout=has_fixed_layout(figure))
    if plots_cfg.explorer and part == 0:
        for path, page in finding.pages(summary, plots_cfg, title):
            sink.log_text(page, path)


def _log_as_completed(sink, futures: dict, logged: set) -> None:
    """Log the files of each helper's task (future -> task in ``futures``) as it finishes, adding the task to ``logged``.

    Raises:
        Whatever the helper raised; ``BrokenProcessPool`` when a helper died.
    """
    from concurrent.futures import as_completed

    for future in as_completed(futures):
        for kind, path, payload in future.result():
            if kind == "png":
                sink.log_png(payload, path)
            else:
                sink.log_text(payload, path)
        logged.add(futures[future])


def log_figures(
    sink,
    jobs: Sequence[Job],
    examples: Any,
    plots_cfg: Any,
    title: str,
    has_fixed_layout: Callable[[Any], bool],
    meanwhile: Optional[Callable[[], None]] = None,
) -> int:
    """Draw every finding's figures (and pages) and log them to the run of ``sink``.

    Args:
        sink: the run's :class:`~attnsim.tracking.sink.RunSink`; PNG files are uploaded through it
            (in its background thread) and :meth:`~attnsim.tracking.sink.RunSink.wait_for_figures`
            is left to the caller.
        jobs: ``(finding, summary)`` of each finding to draw.
        examples: the run's recorded example windows (or None).
        plots_cfg: the ``plots`` config group (``processes``, ``dpi``, ``explorer``, ...).
        title: title of the findings' HTML pages.
        has_fixed_layout: whether a figure was laid out by hand (the plots' own test).
        meanwhile: work for this process while the helpers draw (the run's metrics and tables), called
            once: after the helpers start, or first when this process draws alone.

    Returns:
        The number of processes that drew (1: this one alone).

    Raises:
        Whatever a finding's figure code raises, here or in a helper.
    """
    global _JOB
    usable = usable_processes(int(plots_cfg.processes))
    tasks = drawing_tasks(jobs, usable)
    processes = min(usable, len(tasks))
    if processes <= 1:
        if meanwhile is not None:
            meanwhile()
        for job in jobs:
            _log_here(sink, job, examples, plots_cfg, title, has_fixed_layout)
        return 1

    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    release_free_memory()
    _JOB = (list(jobs), examples, plots_cfg, title, has_fixed_layout)
    pool = None
    logged = set()
    finished = False
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns that forking a process with threads may deadlock the child; the
            # helpers only draw with matplotlib and encode with Pillow, which take none of the
            # locks the parent's threads (torch's idle pool, MLflow) hold
            warnings.filterwarnings("ignore", message=r".*fork\(\) may lead to deadlocks.*", category=DeprecationWarning)
            pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork"), initializer=_start_helper, initargs=(os.getpid(),))
            futures = {pool.submit(_helper, task): task for task in tasks}
        if meanwhile is not None:
            meanwhile()
        try:
            _log_as_completed(sink, futures, logged)
        except BrokenProcessPool as exc:
            log.warning("A process drawing figures stopped (%s); drawing the findings it left here.", exc)
            _stop(pool)  # the others' results are lost with the pool
            for index, part, parts in tasks:
                if (index, part, parts) not in logged:
                    _log_here(sink, jobs[index], examples, plots_cfg, title, has_fixed_layout, part, parts)
        finished = True
    finally:
        _JOB = None
        if pool is not None:
            if not finished:  # an error or an interrupt: nothing more is wanted from the helpers
                _stop(pool)
            pool.shutdown(wait=True, cancel_futures=True)
    return processes
