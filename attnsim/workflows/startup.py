"""A lean start for ``attnsim run``: the heavy libraries imported once, up front, with Python's cyclic
garbage collector paused, and a process exit that does not walk every object again.

Where a default ``attnsim run`` spent its seconds before the model loaded (README, "Performance"):
importing torch, Lightning (which imports torchmetrics, SciPy's signal package and torch's
compiler front end ``torch._dynamo`` with SymPy), transformers and MLflow creates about half a
million Python objects. The cyclic garbage collector ran about 1,400 times while they were
created, each pass walking the objects of the older generations: about a fifth of the import
time. Interpreter shutdown then walked them all once more (1.5 s). Neither finds any garbage:
modules live until the process ends.

- :func:`import_libraries` imports them with the collector paused, then moves every object alive
  to the collector's permanent generation (:func:`gc.freeze`), so that later collections during
  the run skip them; objects created afterwards are collected as usual.
- :func:`freeze_if_exiting_soon` freezes again after predict in such a process, so that the
  collections while figures are drawn skip the model and the windows.
- :func:`freeze_at_exit` does the same when the interpreter exits, so that its final collections
  skip the run's objects (the operating system frees the memory).

Both are used by the command line only; :func:`attnsim.run` in a user's process changes nothing.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import sys
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

# what `attnsim run` imports before its model loads, heaviest first; matplotlib and pandas come
# later, with the figures and tables they draw
LIBRARIES = ("torch", "pytorch_lightning", "transformers", "mlflow", "mlflow.store.tracking.sqlalchemy_store", "attnsim.workflows.run")

_exit_hook = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block, then freeze what is alive (:func:`gc.freeze`).

    Reference counting still frees every object that is not part of a cycle; only the search for
    unreachable cycles waits. The collector is re-enabled only when it was enabled before.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def import_libraries(names: Sequence[str] = LIBRARIES) -> float:
    """Import ``names`` with the collector paused (:func:`collector_paused`); seconds spent.

    When every one of them is imported already, nothing is paused or frozen.

    Raises:
        ImportError: a library is missing (they are all dependencies of attnsim).
    """
    start = time.perf_counter()
    if all(name in sys.modules for name in names):  # imported before (a second run in one process): nothing to pause or freeze
        return time.perf_counter() - start
    with collector_paused():
        for name in names:
            importlib.import_module(name)
    return time.perf_counter() - start


def freeze_if_exiting_soon() -> None:
    """In a command-line process (:func:`freeze_at_exit` was called), freeze every object alive now.

    Called after predict: the model, the windows and the findings' states then stay out of the
    collections that drawing the figures starts (matplotlib makes many short-lived cycles). In a
    user's process (:func:`attnsim.run`) it does nothing, so that nothing of theirs is kept.
    """
    if _exit_hook:
        gc.freeze()


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # bytes: glibc's largest (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit)
TRIM_THRESHOLD = 1024 * 1024 * 1024  # bytes of free heap top kept before free() gives pages back


def _glibc():
    """The C library (``ctypes.CDLL(None)``) on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def release_free_memory() -> None:
    """Return the C heap's free pages to the system (glibc ``malloc_trim``; elsewhere nothing).

    Predict frees its batches' tensors into the heap, which keeps the pages resident. A forked
    helper starts with its parent's resident pages counted as its own, so trimming first keeps the
    helpers' resident memory (and the run's peak as ``ru_maxrss`` reports it) below predict's.
    """
    libc = _glibc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def keep_freed_memory() -> bool:
    """Make the C allocator keep freed blocks of up to 32 MiB for reuse (glibc ``mallopt``; elsewhere nothing).

    Every batch allocates tensors of a few MiB (a window's (layer x head, T, T) CSM is 4.5 MiB at
    T = 128, eager attention maps 24 MiB per layer at batch 32) and frees them soon after. With
    glibc's defaults such blocks come from ``mmap`` until its adaptive threshold has grown past them,
    and freed heap tops above twice that threshold go back to the system, so new tensors' pages are
    faulted in and zeroed by the kernel again (``tests/test_lean_start.py``: 8 blocks of 4.5 MiB made
    and freed 20 times fault in 183,698 pages with the defaults, none after this call). With the mmap
    threshold fixed at 32 MiB and the trim threshold at 1 GiB, freed blocks stay in the heap for reuse.
    Measured (``attnsim run`` over 256 windows, 2 alternating pairs, idle machine): predict 6.0-6.3 s
    against 6.6-6.9 s (``csm``) and 8.1-8.3 s against 8.5-9.3 s (``paper``). The run's process calls
    :func:`release_free_memory` after predict, so the kept pages go back
    before the figures.

    Only the ``attnsim`` command line calls this (a process of its own); :func:`attnsim.run` in a
    user's process leaves their allocator alone. ``ATTNSIM_MALLOC=default`` turns it off
    (``reuse`` or unset: on).

    Returns:
        Whether both parameters were set (False: not glibc, or turned off).

    Raises:
        ConfigError: ``ATTNSIM_MALLOC`` is set to anything else.
    """
    import os

    setting = os.environ.get("ATTNSIM_MALLOC", "").strip().lower()
    if setting not in ("", "reuse", "default"):
        from attnsim.errors import ConfigError

        raise ConfigError(
            f"ATTNSIM_MALLOC is {os.environ['ATTNSIM_MALLOC']!r}; give 'reuse' (the default: freed blocks kept for reuse) or 'default' (glibc's own settings), or unset it."
        )
    libc = _glibc()
    if libc is None or setting == "default" or not hasattr(libc, "mallopt"):  # not Linux, turned off, or not glibc (e.g. musl)
        return False
    import ctypes

    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) & bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


OPENMP_SPIN = "10000"
"""GNU OpenMP's busy-wait spin count (``GOMP_SPINCOUNT``) that the command line sets: libgomp's default is 300,000."""


def short_openmp_spin() -> bool:
    """Let torch's OpenMP worker threads sleep soon after each parallel region (``GOMP_SPINCOUNT=10000``).

    torch on Linux runs its CPU operations on GNU OpenMP (libgomp) threads. After each parallel region
    libgomp's workers busy-wait for the next one, 300,000 spins by default (about a millisecond), and a
    spinning worker holds its core. The statistics' compiled kernel runs right after each window's CSM
    product, on its own threads (:mod:`attnsim.stats.pairs.kernels`): on a 2-core machine the spinning
    worker took the core it needed, and the kernel's two threads ran no faster than one. With a short spin
    (10,000: the workers still catch the next of torch's closely spaced operations) the kernel's share of
    a ``csm`` batch went from 0.051-0.060 s to 0.034-0.037 s and a ``paper`` batch's statistics from
    0.34-0.40 s to 0.26-0.29 s, while the plain forward pass stayed within its run-to-run spread
    (README, "Performance").

    libgomp reads its environment once, when it loads: this must run before torch is imported. A value
    the user set (``GOMP_SPINCOUNT``, or ``OMP_WAIT_POLICY``, which chooses libgomp's spin counts) is left
    as it is; ``GOMP_SPINCOUNT=300000`` restores libgomp's default. Only the ``attnsim`` command line
    calls this (a process of its own); :func:`attnsim.run` in a user's process leaves their settings alone.

    Returns:
        Whether the variable was set (False: torch is imported already, or the user chose a setting).
    """
    import os

    if "torch" in sys.modules or "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return False
    os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN
    return True


def process_settings() -> str:
    """Make the process settings of ``attnsim run``, before torch is imported: :func:`keep_freed_memory` and
    :func:`short_openmp_spin`. The command line calls it, and so do the benchmarks that time what it does.

    Returns:
        The settings in effect, in words (for a benchmark's header line).

    Raises:
        ConfigError: ``ATTNSIM_MALLOC`` holds an unknown value (:func:`keep_freed_memory`).
    """
    import os

    reuse = keep_freed_memory()
    short_openmp_spin()
    return f"freed memory kept for reuse: {'yes' if reuse else 'no'}, GOMP_SPINCOUNT {os.environ.get('GOMP_SPINCOUNT', 'unset (300000)')}"


def freeze_at_exit() -> None:
    """Freeze every object alive when the interpreter exits (once per process, :mod:`atexit`).

    The final collections of interpreter shutdown then skip them; it took about 1.5 s of a run's
    wall time with torch, Lightning and MLflow loaded, and finds nothing a short process needs freed.
    """
    global _exit_hook
    if not _exit_hook:
        atexit.register(gc.freeze)
        _exit_hook = True
