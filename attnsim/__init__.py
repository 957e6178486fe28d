"""attnsim: measure what transformer attention heads do, as tracked MLflow experiments.

Implements the Context Similarity Matrix method (Halevi et al., arXiv:2512.21956)
and the attention-visualisation family, launched from YAML and run as
PyTorch Lightning ``predict`` loops.

Python API (README, "Python API"); each call returns a documented result object:

- :func:`attnsim.run` ``(experiment, overrides=None)`` -> :class:`RunResult`
- :func:`attnsim.report` ``(run_ids, out=None, uri=None, log_artifact=True)`` -> :class:`ReportResult`
- :func:`attnsim.finetune` ``(experiment="finetune_bbc", overrides=None)`` -> :class:`FinetuneResult`
- :func:`attnsim.sweep` ``(experiment, checkpoints, overrides=None, base=None)`` -> :class:`SweepResult`
- :func:`attnsim.compare` ``(run_ids=None, experiment=None, parent=None, ...)`` -> pandas DataFrame
- :func:`attnsim.list_runs` ``(uri=None, experiment=None, limit=20)`` -> list of dicts (``attnsim runs``)
- :func:`attnsim.describe_run` ``(run_id, uri=None)`` -> :class:`RunDescription` (``attnsim runs RUN_ID``)
- :func:`attnsim.view` ``(text, model="bundled", run=None, ...)`` -> :class:`attnsim.explore.notebook.View` (inline explorer)
- :func:`attnsim.trace` ``(text_or_texts, model="bundled", names=None)`` -> :class:`attnsim.capture.record.Trace` (one forward
  pass, every layer's ``pattern``, ``z``, ``result``, ``attn_out``, ``mlp_out``, ``resid_pre/mid/post``, in TransformerLens's names)

``import attnsim`` stays light: each name imports its module on first use. The calls are as quiet as
the command line (:mod:`attnsim.quiet`; ``ATTNSIM_VERBOSE=1`` shows the libraries' own output).
"""

import importlib as _importlib

__version__ = "0.1.0"

# Bumped whenever a statistic's definition changes; runs with different values
# are not comparable (``attnsim compare`` refuses them unless forced).
STATS_VERSION = "1"

# name -> module holding it, imported on first use so that `import attnsim` stays light
_LAZY = {
    "run": "attnsim.workflows.run",
    "RunResult": "attnsim.workflows.run",
    "report": "attnsim.report",
    "ReportResult": "attnsim.analysis.report",
    "finetune": "attnsim.workflows.finetune",
    "FinetuneResult": "attnsim.workflows.finetune",
    "sweep": "attnsim.workflows.sweep",
    "SweepResult": "attnsim.workflows.sweep",
    "compare": "attnsim.analysis.compare",
    "list_runs": "attnsim.analysis.listing",
    "describe_run": "attnsim.analysis.listing",
    "RunDescription": "attnsim.analysis.listing",
    "AttnsimError": "attnsim.errors",
    "view": "attnsim.explore.notebook",
    "trace": "attnsim.capture.trace",
    "Trace": "attnsim.capture.record",
}


# the API's calls: the libraries' chatter is hidden before they first load (attnsim.quiet; ATTNSIM_VERBOSE=1 keeps it)
_HEAVY_CALLS = ("run", "finetune", "sweep", "view", "trace")
_LIGHT_CALLS = ("report", "compare", "list_runs", "describe_run")


def __getattr__(name: str):
    if name in _HEAVY_CALLS or name in _LIGHT_CALLS:
        from attnsim.quiet import quiet_libraries

        quiet_libraries(heavy=name in _HEAVY_CALLS)
    if name == "report":
        # the module attnsim.report, which is callable as report(...) (it replaces this attribute once imported)
        return _importlib.import_module("attnsim.report")
    if name in _LAZY:
        return getattr(_importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnsim' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["__version__", "STATS_VERSION", *_LAZY]
