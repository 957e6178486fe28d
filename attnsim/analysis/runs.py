"""The one reader of logged runs: statistics by :class:`~attnsim.keys.MetricKey`, params, tags and kind.

``attnsim compare``, ``attnsim report`` and a resumed sweep read what runs logged through
these functions, so that the metric-key rule (README, "Metric keys") is parsed in one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional

from attnsim.keys import MetricKey, RunKind, Tag


def statistics(metrics: Mapping[str, float], findings: Optional[Iterable[str]] = None) -> Dict[MetricKey, float]:
    """The statistics among a run's metrics, by parsed key: model means (``csm/mean``), layer means
    (``csm/mean/L03``) and per-head values (``csm/mean/L03/H07``) of ``findings`` (all when None).

    Keys that are no statistic's (``zz_run/time_predict``, ``sweep/global_step`` ...) are left out
    when ``findings`` is given; without it, any ``a/b`` key counts as a model-level number.
    """
    wanted = set(findings) if findings is not None else None
    out: Dict[MetricKey, float] = {}
    for key, value in metrics.items():
        parsed = MetricKey.try_parse(key)
        if parsed is not None and (wanted is None or parsed.finding in wanted):
            out[parsed] = float(value)
    return out


def headline(metrics: Mapping[str, float], findings: Iterable[str]) -> Dict[str, float]:
    """The model and layer means (no per-head values) of ``findings`` among ``metrics``, by their logged keys."""
    return {key.format(): value for key, value in statistics(metrics, findings).items() if key.head is None}


def n_layers(metrics: Mapping[str, float]) -> int:
    """Number of layers of a run: one more than the highest layer of its layer-mean keys (0 when it has none)."""
    layers = [key.layer for key in statistics(metrics) if key.layer is not None]
    return max(layers) + 1 if layers else 0


def layer_values(metrics: Mapping[str, float], stat: str, layers: Optional[int] = None) -> Optional[List[float]]:
    """Layer means of statistic ``stat`` (``finding/stat``) for layers 0..L-1 (NaN where not logged), None when absent.

    Args:
        metrics: a run's metrics (key -> last value).
        stat: ``finding/stat``.
        layers: L (default :func:`n_layers` of ``metrics``).
    """
    finding, _, name = stat.partition("/")
    count = n_layers(metrics) if layers is None else layers
    values = [float(metrics.get(MetricKey(finding, name, layer).format(), math.nan)) for layer in range(count)]
    return values if any(math.isfinite(v) for v in values) else None


@dataclass
class LoggedRun:
    """What a run logged, as read back from the tracking store.

    Attributes:
        run_id, name, status, experiment_id: the MLflow run's identity and status.
        tags, params: as logged (strings).
        metrics: last value of every metric.
    """

    run_id: str
    name: str
    status: str
    experiment_id: str
    tags: Dict[str, str] = field(default_factory=dict)
    params: Dict[str, str] = field(default_factory=dict)
    metrics: Dict[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, run: Any) -> "LoggedRun":
        """From an ``mlflow.entities.Run``."""
        return cls(run.info.run_id, run.info.run_name or run.info.run_id[:8], run.info.status, run.info.experiment_id, dict(run.data.tags), dict(run.data.params), dict(run.data.metrics))

    @property
    def kind(self) -> RunKind:
        """The run's :class:`~attnsim.keys.RunKind` (a run without the tag is a measurement)."""
        return RunKind.of(self.tags)

    def tag(self, tag: Tag, default: Optional[str] = None) -> Optional[str]:
        return self.tags.get(tag.value, default)

    @property
    def partial(self) -> bool:
        """Whether the run's statistics cover only part of its corpus (tag ``attnsim.partial``)."""
        return self.tags.get(Tag.PARTIAL.value) == "true"

    @property
    def findings(self) -> List[str]:
        """The findings the run measured (param ``findings``)."""
        return [f for f in str(self.params.get("findings", "")).split(",") if f]

    def statistics(self, findings: Optional[Iterable[str]] = None) -> Dict[MetricKey, float]:
        """See :func:`statistics`."""
        return statistics(self.metrics, findings)
