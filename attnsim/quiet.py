"""Keep a terminal or a notebook for attnsim's own output: the libraries' chatter is hidden.

``attnsim`` on the command line and the Python API (``attnsim.run``, ``attnsim.report`` ...) call
:func:`quiet_libraries` before they work, so both show the same: attnsim's own messages, warnings
and one progress bar per run. Hidden: Lightning's start-up INFO lines ("GPU available ...") and
its tips, a deprecation warning inside Lightning's own pytree helper, MLflow's and Alembic's
database-migration INFO lines, MLflow's "Downloading artifacts" bars, and transformers'
weight-loading reports and bars (which also print tqdm's "IProgress not found" in a notebook
without ipywidgets). ``attnsim -v`` or the environment variable ``ATTNSIM_VERBOSE=1`` shows them.
"""

from __future__ import annotations

import logging
import os

VERBOSE_ENV = "ATTNSIM_VERBOSE"
_QUIETED: set = set()  # "light" (MLflow's chatter) and "heavy" (Lightning's and transformers' too), once done


def verbose_requested() -> bool:
    """Whether ``$ATTNSIM_VERBOSE`` asks for the libraries' own output (``1``, ``true`` or ``yes``)."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes")


def quiet_libraries(verbose: bool = False, heavy: bool = True) -> None:
    """Hide the libraries' start-up lines, tips, migration logs and download/loading bars (module docstring).

    Args:
        verbose: keep everything (``attnsim -v``); ``$ATTNSIM_VERBOSE`` does the same.
        heavy: also quiet Lightning and transformers (importing Lightning); False for callers that only
            read runs (``report``, ``compare``), which import neither.
    """
    if verbose or verbose_requested() or (heavy and "heavy" in _QUIETED) or (not heavy and _QUIETED):
        return  # already done in this process (the API calls it on every access to attnsim.run, ...)
    import warnings

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # "Downloading artifacts" bars
    # tqdm.autonotebook (imported by transformers and MLflow) warns in a notebook without ipywidgets; its bars are hidden here
    warnings.filterwarnings("ignore", message=r"IProgress not found")
    import mlflow  # noqa: F401 - it configures its logger when imported; set the level after

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    _QUIETED.add("light")
    if not heavy:
        return
    import pytorch_lightning  # noqa: F401 - it sets its loggers' levels when imported; override after

    for name in ("pytorch_lightning", "pytorch_lightning.utilities.rank_zero", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # a deprecation inside Lightning's own pytree helper, not actionable by users
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:  # transformers is a dependency; nothing to quiet without it
        pass
    _QUIETED.add("heavy")
