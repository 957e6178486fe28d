"""User-facing errors.

An :class:`AttnsimError` carries a one-paragraph message that names the problem
and the fix. The CLI prints it without a traceback and exits with status 2.
"""


class AttnsimError(Exception):
    """Bad input (config, corpus, model or tracking store) detected by attnsim."""


class ConfigError(AttnsimError):
    """The experiment configuration is invalid (unknown key, missing or bad value)."""


class CorpusError(AttnsimError):
    """The corpus cannot be read or yields no usable window."""


class ModelError(AttnsimError):
    """The model cannot be loaded or its attention heads cannot be captured."""


class WeightsError(ModelError):
    """A model's weights cannot be loaded whole: a weights file or shard is missing, damaged or truncated, or the load
    would leave parameters at random (a sweep records such a checkpoint as unreadable and measures the others)."""


class TrackingError(AttnsimError):
    """The MLflow tracking store cannot be reached or used."""
