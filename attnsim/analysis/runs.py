"""The one reader of logged runs: statistics by :class:`~attnsim.keys.MetricKey`, params, tags and kind.

``attnsim compare``, ``attnsim report`` and a resumed sweep read what runs logged through
these functions, so that the metric-key rule (README, "Metric keys") is parsed in one place.

Layer means: a run logs ``finding/stat/LNN`` only for the statistics of ``stats.per_layer`` (and
``stats.per_head``); every head of every statistic is in its table ``tables/<finding>_heads.csv``.
A layer mean that was not logged is read from that table as the ``nanmean`` over the layer's heads,
the definition :func:`attnsim.tracking.summaries.summary_metrics` logs (:meth:`LoggedRun.layer_values`,
:meth:`LoggedRun.means`), so readers give the same numbers whichever way a run logged them.
"""

from __future__ import annotations

import math
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional

from attnsim.keys import MetricKey, RunKind, Tag

if TYPE_CHECKING:  # pandas is imported where tables are read
    import pandas as pd

HEAD_COLUMNS = ("layer", "head")


def run_id_list(run_ids: Any, error: type = ValueError) -> List[str]:
    """``run_ids`` as a list of strings (the ids ``report`` and ``compare`` read): one id given as a string becomes a
    list of it, not of its characters.

    Raises:
        error: an id is not a string (None, a number ...).
    """
    run_ids = [run_ids] if isinstance(run_ids, str) else list(run_ids or [])
    odd = [repr(r) for r in run_ids if not isinstance(r, str)]
    if odd:
        raise error(f"Run ids are strings of 32 hexadecimal characters, as `attnsim run` prints them; got {', '.join(odd)}.")
    return run_ids


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
    """The model and layer means (no per-head values) of ``findings`` among ``metrics``, by their logged keys
    (no table fallback: see :meth:`LoggedRun.means` for every layer mean)."""
    return {key.format(): value for key, value in statistics(metrics, findings).items() if key.head is None}


def n_layers(metrics: Mapping[str, float]) -> int:
    """Number of layers of a run: one more than the highest layer of its layer-mean keys (0 when it has none)."""
    layers = [key.layer for key in statistics(metrics) if key.layer is not None]
    return max(layers) + 1 if layers else 0


def layer_values(metrics: Mapping[str, float], stat: str, layers: Optional[int] = None) -> Optional[List[float]]:
    """Layer means of statistic ``stat`` (``finding/stat``) for layers 0..L-1 (NaN where not logged), None when absent.

    Metrics only; :func:`layer_means` also reads the run's heads table.

    Args:
        metrics: a run's metrics (key -> last value).
        stat: ``finding/stat``.
        layers: L (default :func:`n_layers` of ``metrics``).
    """
    finding, _, name = stat.partition("/")
    count = n_layers(metrics) if layers is None else layers
    values = [float(metrics.get(MetricKey(finding, name, layer).format(), math.nan)) for layer in range(count)]
    return values if any(math.isfinite(v) for v in values) else None


def download_table(client: Any, run_id: str, path: str, artifact_uri: Optional[str] = None) -> Optional["pd.DataFrame"]:
    """A CSV table the run logged (``path`` among its artifacts, e.g. ``tables/anchors_top.csv``), None when it has none.

    Args:
        client: an ``mlflow.MlflowClient`` of the run's store (or anything with its ``download_artifacts``).
        run_id: the run.
        path: the artifact's path, ``/``-separated.
        artifact_uri: the run's ``info.artifact_uri``, when known: an artifact root on this machine's filesystem
            (an SQLite store's ``file:`` URI) is read in place (:func:`attnsim.tracking.artifacts.local_artifact`),
            any other through ``client.download_artifacts``; the same table either way.
    """
    import pandas as pd

    from attnsim.tracking.artifacts import local_artifact

    local = local_artifact(artifact_uri, path)
    try:
        if local is not None:
            return pd.read_csv(local) if local.is_file() else None
        with tempfile.TemporaryDirectory() as folder:
            return pd.read_csv(client.download_artifacts(run_id, path, folder))
    except Exception:  # noqa: BLE001 - MLflow raises its own types for a missing artifact; an unreadable file counts as none too
        return None


def download_head_table(client: Any, run_id: str, finding: str, artifact_uri: Optional[str] = None) -> Optional["pd.DataFrame"]:
    """The run's per-head table ``tables/<finding>_heads.csv`` (columns ``layer``, ``head`` and one per
    statistic, a row per head), None when the run has none (no such finding, or logged without tables).
    ``artifact_uri``: as :func:`download_table`."""
    return download_table(client, run_id, f"tables/{finding}_heads.csv", artifact_uri)


def table_layers(table: Optional["pd.DataFrame"]) -> int:
    """Number of layers in a heads table: one more than its highest ``layer`` (0 for None or empty)."""
    if table is None or "layer" not in table or not len(table):
        return 0
    return int(table["layer"].max()) + 1


def table_layer_means(table: Optional["pd.DataFrame"], stat: str, layers: Optional[int] = None) -> Optional[List[float]]:
    """Layer means of column ``stat`` (the statistic's name, without its finding) of a heads table.

    Args:
        table: a heads table (:func:`attnsim.tracking.summaries.head_table`), or None.
        stat: the statistic, e.g. ``short_range_share``.
        layers: L (default :func:`table_layers`); layers the table lacks are NaN.

    Returns:
        For layers 0..L-1, ``nanmean`` over that layer's heads (an undefined head does not count;
        NaN when every head is), as :func:`attnsim.tracking.summaries.summary_metrics` logs it;
        None when the table lacks the column or has no finite value in it.
    """
    import numpy as np

    if table is None or stat not in table or stat in HEAD_COLUMNS:
        return None
    count = table_layers(table) if layers is None else layers
    column = table[stat].astype("float64")
    values = []
    for layer in range(count):
        heads = column[table["layer"] == layer].to_numpy()
        with warnings.catch_warnings():  # a layer whose heads are all undefined: NaN, as the metric would be
            warnings.simplefilter("ignore", RuntimeWarning)
            values.append(float(np.nanmean(heads)) if len(heads) else math.nan)
    return values if any(math.isfinite(v) for v in values) else None


def layer_means(
    metrics: Mapping[str, float], stat: str, table: Callable[[str], Optional["pd.DataFrame"]], layers: Optional[int] = None
) -> Optional[List[float]]:
    """Layer means of ``stat`` (``finding/stat``): the logged ``finding/stat/LNN`` metrics when the run
    logged any, else from the finding's heads table (:func:`table_layer_means`).

    Args:
        metrics: a run's metrics (key -> last value).
        stat: ``finding/stat``.
        table: finding -> the run's heads table (or None); called only when the metrics lack the layer means.
        layers: L (default: from the layer-mean metrics, else from the table).

    Returns:
        One float per layer (NaN where undefined), None when neither has the statistic.
    """
    finding, _, name = stat.partition("/")
    count = layers if layers is not None else (n_layers(metrics) or None)
    if count is not None:
        logged = layer_values(metrics, stat, count)
        if logged is not None:
            return logged
    return table_layer_means(table(finding), name, count)


@dataclass
class LoggedRun:
    """What a run logged, as read back from the tracking store.

    Attributes:
        run_id, name, status, experiment_id: the MLflow run's identity and status.
        tags, params: as logged (strings).
        metrics: last value of every metric.
        client: an ``mlflow.MlflowClient`` of the run's store, to read its heads tables (layer means
            not logged as metrics); None reads metrics only.
        artifact_uri: the run's artifact root (``info.artifact_uri``); one on this machine's filesystem is
            read in place rather than through ``client`` (:func:`download_table`).
    """

    run_id: str
    name: str
    status: str
    experiment_id: str
    tags: Dict[str, str] = field(default_factory=dict)
    params: Dict[str, str] = field(default_factory=dict)
    metrics: Dict[str, float] = field(default_factory=dict)
    client: Any = field(default=None, repr=False, compare=False)
    artifact_uri: Optional[str] = field(default=None, repr=False, compare=False)
    _tables: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, run: Any, client: Any = None) -> "LoggedRun":
        """From an ``mlflow.entities.Run`` (and the client of its store, to read its heads tables)."""
        return cls(
            run.info.run_id,
            run.info.run_name or run.info.run_id[:8],
            run.info.status,
            run.info.experiment_id,
            dict(run.data.tags),
            dict(run.data.params),
            dict(run.data.metrics),
            client,
            run.info.artifact_uri,
        )

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

    def head_table(self, finding: str) -> Optional["pd.DataFrame"]:
        """The run's ``tables/<finding>_heads.csv`` (downloaded once, then cached), None without a client or table."""
        if finding not in self._tables:
            self._tables[finding] = download_head_table(self.client, self.run_id, finding, self.artifact_uri) if self.client is not None else None
        return self._tables[finding]

    @property
    def n_layers(self) -> int:
        """Number of layers: from the layer-mean metrics, else from the heads table of the first of its findings that has one."""
        count = n_layers(self.metrics)
        for finding in self.findings if not count else ():
            count = table_layers(self.head_table(finding))
            if count:
                break
        return count

    def layer_values(self, stat: str, layers: Optional[int] = None) -> Optional[List[float]]:
        """Layer means of ``stat`` (``finding/stat``) for layers 0..L-1, logged or from the heads table (:func:`layer_means`).

        Args:
            stat: ``finding/stat``.
            layers: L (default :attr:`n_layers`).
        """
        return layer_means(self.metrics, stat, self.head_table, self.n_layers if layers is None else layers)

    def first_layer_values(self, *stats: str) -> "tuple[Optional[str], Optional[List[float]]]":
        """The first of ``stats`` (``finding/stat``) the run logged, and its layer means; ``(None, None)`` when none."""
        for stat in stats:
            values = self.layer_values(stat)
            if values is not None:
                return stat, values
        return None, None

    @property
    def control(self) -> bool:
        """Whether the run is a random-weights control: tag ``attnsim.control=random`` or param ``model.init=random``."""
        return self.tags.get(Tag.CONTROL.value) == "random" or self.params.get("model.init") == "random"

    @property
    def label(self) -> str:
        """A report's column heading: run name, short id and whether it is the control."""
        kind = "random-weights control" if self.control else self.tags.get(Tag.MODEL_INIT.value, "pretrained")
        return f"{self.name} `{self.run_id[:8]}` ({kind})"

    def means(self, findings: Optional[Iterable[str]] = None) -> Dict[MetricKey, float]:
        """Model and layer means of ``findings`` (default :attr:`findings`): every logged one, plus the layer
        means of each statistic that has a model mean but no layer-mean metric, from its heads table.

        Layer means that come out non-finite are left out, as the sink leaves them out when logging.
        """
        wanted = list(self.findings if findings is None else findings)
        out = {key: value for key, value in statistics(self.metrics, wanted).items() if key.head is None}
        with_layers = {key.name for key in out if key.layer is not None}
        for finding in wanted:
            missing = [key.stat for key in out if key.finding == finding and key.layer is None and key.name not in with_layers]
            table = self.head_table(finding) if missing else None
            for stat in missing:
                for layer, value in enumerate(table_layer_means(table, stat) or ()):
                    if math.isfinite(value):
                        out[MetricKey(finding, stat, layer)] = value
        return out
