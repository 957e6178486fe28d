"""A sweep's children: each measured as a child run of the parent, here or in worker processes
(``attnsim sweep ... --jobs N``, :func:`fan_out`). See :mod:`attnsim.workflows.sweep`."""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Dict, List, Optional, Tuple

from attnsim.errors import WeightsError
from attnsim.keys import RunKind, Tag

STEP_KEY = "sweep/global_step"  # the metric of a child and of the parent that holds the global step
STEP_PARAM = Tag.GLOBAL_STEP.value


def child_name(step: int) -> str:
    """A child run's name: its checkpoint's directory name, ``step-000050`` (step 0: the base model)."""
    return f"step-{int(step):06d}"


def statistic_means(summaries: Dict[str, Any]) -> Dict[str, float]:
    """Model and layer means of every statistic of every finding (no per-head values)."""
    from attnsim.tracking.summaries import summary_metrics

    metrics: Dict[str, float] = {}
    for summary in summaries.values():
        metrics.update(summary_metrics(summary, per_head=[]))
    return metrics


QUIET = ("pytorch_lightning", "pytorch_lightning.utilities.rank_zero", "lightning_fabric", "mlflow", "alembic")


def child_note(prepared: Any, parent_id: str, step: int, path: str) -> str:
    """A child's description; made in the sweep's process, which knows how the sweep was started."""
    from attnsim.tracking.store import run_note

    return run_note(prepared.cfg.description, [f"Checkpoint `{path}` (global step {step}) of sweep run {parent_id}."])


def measure(prepared: Any, parent_id: str, step: int, path: str, key: str, note: str) -> Tuple[str, Dict[str, float]]:
    """Measure one checkpoint as a child of ``parent_id``; return (child run id, its headline metrics)."""
    from attnsim.tracking.store import NOTE_TAG
    from attnsim.workflows.run import execute

    extra = {
        Tag.KIND.value: RunKind.SWEEP_CHILD.value,
        Tag.SWEEP_KEY.value: key,
        Tag.SWEEP_STEP.value: str(step),
        Tag.GLOBAL_STEP.value: str(step),
        Tag.CHECKPOINT.value: path,
        NOTE_TAG: note,
    }
    result = execute(
        prepared,
        parent_run_id=parent_id,
        run_name=child_name(step),
        extra_tags=extra,
        step=step,
        extra_params={STEP_PARAM: str(step)},
        extra_metrics={STEP_KEY: float(step)},
    )
    return result.run_id, statistic_means(result.summaries)


def worker_init(slots: Any, gpus: List[str], levels: Dict[str, int], hf_verbosity: Optional[int]) -> None:
    """A worker process's set-up: its GPU (worker slot i: ``gpus[i % len(gpus)]``) and the sweep's log levels."""
    slot = slots.get()
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=levels.get("", logging.WARNING), format="%(levelname)s %(name)s: %(message)s")
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    if hf_verbosity is not None:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity(hf_verbosity)
        hf_logging.disable_progress_bar()


def worker_measure(prepared: Any, uri: str, parent_id: str, step: int, path: str, key: str, note: str) -> Tuple[str, Dict[str, float]]:
    """:func:`measure` in a worker process, on its own connection to the tracking store ``uri``."""
    from attnsim.tracking.store import Tracker

    return measure(dataclasses.replace(prepared, tracker=Tracker(uri)), parent_id, step, path, key, note)


def visible_gpus() -> List[str]:
    """The CUDA devices a sweep's workers are spread over: ``$CUDA_VISIBLE_DEVICES``'s entries, else
    ``0 .. torch.cuda.device_count() - 1``; empty without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        return [d.strip() for d in listed.split(",") if d.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def fan_out(
    children: Dict[int, Any], pending: List[Tuple[int, str]], jobs: int, uri: str, parent_id: str, key: str
) -> Tuple[Dict[int, Tuple[str, Dict[str, float]]], Optional[BaseException], Dict[int, str]]:
    """Measure ``pending`` (step, path) children in up to ``jobs`` worker processes.

    Returns:
        (step -> (child run id, headline metrics) of every child that finished, the error of the
        lowest-step child that failed or None, step -> reason of every checkpoint whose weights could not be
        loaded (a :class:`~attnsim.errors.WeightsError`, before its child run was created: the others go on)).
        Children not started when one fails otherwise are cancelled.

    Raises:
        KeyboardInterrupt: Ctrl-C or SIGTERM here; the workers are stopped (SIGTERM ends their runs KILLED).
    """
    import multiprocessing
    from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait

    context = multiprocessing.get_context("spawn")
    workers = min(jobs, len(pending))
    slots = context.Queue()
    for i in range(workers):
        slots.put(i)
    levels = {name: logging.getLogger(name).level for name in QUIET}
    levels[""] = logging.getLogger().level
    try:
        from transformers.utils import logging as hf_logging

        hf_verbosity: Optional[int] = hf_logging.get_verbosity()
    except ImportError:
        hf_verbosity = None
    payload = {step: dataclasses.replace(children[step], tracker=None) for step, _ in pending}  # a Tracker's client stays here
    executor = ProcessPoolExecutor(workers, mp_context=context, initializer=worker_init, initargs=(slots, visible_gpus(), levels, hf_verbosity))
    futures = {
        executor.submit(worker_measure, payload[step], uri, parent_id, step, path, key, child_note(children[step], parent_id, step, path)): step
        for step, path in pending
    }
    results: Dict[int, Tuple[str, Dict[str, float]]] = {}
    errors: Dict[int, BaseException] = {}
    unreadable: Dict[int, str] = {}
    try:
        remaining = set(futures)
        while remaining:
            finished, remaining = wait(remaining, return_when=FIRST_EXCEPTION)
            for future in finished:
                if future.cancelled():
                    continue
                error = future.exception()
                if error is None:
                    results[futures[future]] = future.result()
                elif isinstance(error, WeightsError):  # an unreadable checkpoint: recorded, the others go on
                    unreadable[futures[future]] = str(error)
                else:
                    errors[futures[future]] = error
            if errors:  # let the running ones finish; start no more
                for future in remaining:
                    future.cancel()
        executor.shutdown(wait=True)
    except BaseException:
        for future in futures:
            future.cancel()
        for process in list((getattr(executor, "_processes", None) or {}).values()):  # the pool has no public terminate (Python < 3.14)
            if process.is_alive():
                process.terminate()  # SIGTERM: the worker's run ends KILLED
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    first = errors[min(errors)] if errors else None
    return results, first, unreadable
