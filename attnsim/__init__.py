"""attnsim: measure what transformer attention heads do, as tracked MLflow experiments.

Implements the Context Similarity Matrix method (Halevi et al., arXiv:2512.21956)
and the attention-visualisation family, launched from YAML and run as
PyTorch Lightning ``predict`` loops.
"""

__version__ = "0.1.0"

# Bumped whenever a statistic's definition changes; runs with different values
# are not comparable (``attnsim compare`` refuses them unless forced).
STATS_VERSION = "1"

# Python API, imported on first use so that `import attnsim` stays light:
# attnsim.finetune(...), attnsim.sweep(...), attnsim.compare(...)
_LAZY = {"finetune": "attnsim.training.finetune", "sweep": "attnsim.tracking.sweep", "compare": "attnsim.tracking.compare"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnsim' has no attribute {name!r}")


__all__ = ["__version__", "STATS_VERSION", "finetune", "sweep", "compare"]
