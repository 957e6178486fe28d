"""attnsim: measure what transformer attention heads do, as tracked MLflow experiments.

Implements the Context Similarity Matrix method (Halevi et al., arXiv:2512.21956)
and the attention-visualisation family, launched from YAML and run as
PyTorch Lightning ``predict`` loops.
"""

__version__ = "0.1.0"

# Bumped whenever a statistic's definition changes; runs with different values
# are not comparable (``attnsim compare`` refuses them unless forced).
STATS_VERSION = "1"

__all__ = ["__version__", "STATS_VERSION"]
