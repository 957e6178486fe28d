"""One MLflow run's sink: buffered metric batches, params, tags and artifacts.

Metric keys follow one rule (README, "Metric keys"):
``<finding>/<statistic>/L<layer:02d>/H<head:02d>`` per head,
``<finding>/<statistic>/L<layer:02d>`` for layer means and
``<finding>/<statistic>`` for model means; layers and heads are 0-indexed.
Any character outside ``[A-Za-z0-9_./ -]`` becomes ``_`` (:func:`metric_key`);
two different names that would collapse into one key raise ``ValueError``.

Run bookkeeping (window count, timings, skipped values) sits under one group,
``zz_run/`` (:func:`run_key`): MLflow's chart view groups a run's metrics into
sections named by the key up to its last ``/`` and sorts the sections by name
(MLflow 3.17's ``extractChartSectionName`` and ``localeCompare``), so
``zz_run`` comes after every finding's sections and the comparison series
(``0_heads/``, ``0_layers/``; :meth:`RunSink.log_series`) before them. (``~`` would
sort later still, but MLflow refuses it in a metric name.) A key logged at one
step is drawn as a bar, a key logged at several steps as a line.

Non-finite values never reach MLflow: they are skipped with one warning per
key, their number is logged as the metric ``zz_run/skipped_nonfinite`` and their keys as the tag
``attnsim.skipped_nonfinite`` (comma-separated; shortened with a marker past 8,000 characters).

Params and tags (:func:`fit_value`, :func:`check_key`): a value longer than
MLflow's limit (6,000 characters for a param, 8,000 for a tag) is shortened
to fit and ends with a visible marker ``…[sha256:1a2b3c4d]`` (the first 8 hex
digits of the SHA-256 of the whole value), so that a cut value is never
mistaken for the whole one and two cut values can be told apart. Keys are
never cut: a key over MLflow's 250 characters raises ``TrackingError``.

Step: every metric of a run is logged at one MLflow step, the sink's
``step`` (0 for a plain run, the checkpoint's global step for a sweep's child),
except the comparison series, whose steps are heads or layers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from attnsim.errors import TrackingError
from attnsim.keys import Tag

log = logging.getLogger(__name__)

_INVALID = re.compile(r"[^A-Za-z0-9_./ \-]")
_BATCH = 1000  # MLflow's limit of metrics per log_batch call
_PARAM_BATCH = 100
# MLflow 3.x limits (mlflow.utils.validation: MAX_ENTITY_KEY_LENGTH, MAX_PARAM_VAL_LENGTH, MAX_TAG_VAL_LENGTH),
# written out so that importing this module does not import MLflow; a test checks them against MLflow's
KEY_MAX, PARAM_MAX, TAG_MAX = 250, 6000, 8000
CUT_MARKER = "…[sha256:{digest}]"  # ends a shortened value; digest = first 8 hex digits of the whole value's SHA-256


RUN_GROUP = "zz_run"  # bookkeeping metrics' group; sorts after every finding name in MLflow's chart view


def run_key(name: str) -> str:
    """Key of a run-bookkeeping metric, e.g. ``run_key("windows")`` is ``zz_run/windows`` (see module docstring)."""
    return f"{RUN_GROUP}/{name}"


def metric_key(name: str) -> str:
    """Make ``name`` a valid MLflow metric key (see module docstring)."""
    return _INVALID.sub("_", name)


def fit_value(value: object, limit: int) -> str:
    """``str(value)`` if it has at most ``limit`` characters, else its head followed by ``…[sha256:XXXXXXXX]``.

    The result has exactly ``limit`` characters when shortened; ``XXXXXXXX`` is the first 8 hex
    digits of the SHA-256 (UTF-8) of the whole value, so a shortened value is visibly marked and
    two values that share their head still differ. The whole config stays in ``config.yaml``.

    Example: ``fit_value("a" * 7000, 6000)`` is 5,982 ``a`` then ``…[sha256:e528b009]`` (6,000 characters).
    """
    text = str(value)
    if len(text) <= limit:
        return text
    marker = CUT_MARKER.format(digest=hashlib.sha256(text.encode("utf-8")).hexdigest()[:8])
    return text[: limit - len(marker)] + marker


def check_key(key: str, kind: str = "tag") -> str:
    """Return ``key`` unchanged, or raise when it is longer than MLflow's key limit (keys are never cut).

    Raises:
        TrackingError: ``key`` has more than 250 characters (MLflow's limit for param and tag keys).
    """
    if len(key) > KEY_MAX:
        raise TrackingError(
            f"The {kind} key '{key[:60]}...' has {len(key)} characters; MLflow keys hold at most {KEY_MAX}. "
            f"attnsim never cuts a key (two cut keys could become one): shorten it, e.g. in tracking.tags."
        )
    return key


def fit_tags(tags: Dict[str, object]) -> Dict[str, str]:
    """Tags ready for MLflow: keys checked (:func:`check_key`), values as strings fitted to 8,000 characters (:func:`fit_value`)."""
    return {check_key(str(k)): fit_value(v, TAG_MAX) for k, v in tags.items()}


def format_failure(exc: BaseException) -> str:
    """One-line description of an exception, for the ``attnsim.error`` tag (at most 5,000 characters)."""
    import traceback

    return "".join(traceback.format_exception_only(type(exc), exc)).strip()[:5000]


class RunSink:
    """Logs to one run through an ``MlflowClient``; metrics are buffered and sent in batches of 1,000."""

    def __init__(self, client, run_id: str, step: int = 0):
        self.client = client
        self.run_id = run_id
        self.step = int(step)  # MLflow step of every metric logged without an explicit one
        self._buffer: List = []
        self._tables: List[str] = []  # .json tables not yet listed in the mlflow.loggedArtifacts tag
        self.artifacts: List[str] = []  # every artifact path logged through this sink, in order (a run's description links them)
        self._pending: List = []  # figures being encoded and uploaded (futures)
        self._executor = None
        self._keys: Dict[str, str] = {}
        self._warned: set = set()
        self.skipped_nonfinite = 0
        self.ended: Optional[str] = None

    # -- metrics ---------------------------------------------------------------
    def _key(self, name: str) -> str:
        key = metric_key(name)
        other = self._keys.setdefault(key, name)
        if other != name:
            raise ValueError(f"Metric names '{other}' and '{name}' both become the key '{key}'; rename one of the statistics.")
        return key

    def check_keys(self, names: Iterable[str]) -> None:
        """Register ``names`` up front so that collisions fail before anything is computed."""
        for name in names:
            self._key(name)

    def log_metrics(self, metrics: Dict[str, float], step: Optional[int] = None) -> None:
        """Buffer finite metrics at MLflow ``step`` (default: the sink's :attr:`step`); non-finite ones
        are skipped and counted; flush every 1,000."""
        from mlflow.entities import Metric

        step = self.step if step is None else int(step)
        now = int(time.time() * 1000)
        for name, value in metrics.items():
            key = self._key(name)
            value = float(value)
            if not math.isfinite(value):
                self.skipped_nonfinite += 1
                if key not in self._warned:
                    self._warned.add(key)
                    log.warning("skipping non-finite value %s of metric %s (warned once per key)", value, key)
                continue
            self._buffer.append(Metric(key, value, now, step))
            if len(self._buffer) >= _BATCH:
                self.flush()

    def log_series(self, series: Dict[str, Dict[int, float]]) -> None:
        """Buffer metrics logged at several MLflow steps (key -> {step: value}), which MLflow draws as line charts
        (:func:`attnsim.tracking.summaries.comparison_series`).

        Every point repeats a value logged under its own key (a layer mean, a head's value), so a non-finite
        point is left out without being counted again in ``zz_run/skipped_nonfinite``.
        """
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for name, points in series.items():
            key = self._key(name)
            for step, value in points.items():
                if math.isfinite(float(value)):
                    self._buffer.append(Metric(key, float(value), now, int(step)))
            if len(self._buffer) >= _BATCH:
                self.flush()

    def flush(self) -> None:
        """Wait for figures being written, send buffered metrics and list the tables logged since the
        last flush in ``mlflow.loggedArtifacts``."""
        self.wait_for_figures()
        while self._buffer:
            chunk, self._buffer = self._buffer[:_BATCH], self._buffer[_BATCH:]
            self.client.log_batch(self.run_id, metrics=chunk, synchronous=True)
        if self._tables:
            tag = "mlflow.loggedArtifacts"
            listed = json.loads(self.client.get_run(self.run_id).data.tags.get(tag, "[]"))
            for path in self._tables:
                entry = {"path": path, "type": "table"}
                if entry not in listed:
                    listed.append(entry)
            self.client.set_tag(self.run_id, tag, json.dumps(listed))
            self._tables = []

    # -- params, tags, artifacts ----------------------------------------------
    def log_params(self, params: Dict[str, object]) -> None:
        """Log params in batches of 100; a value over 6,000 characters is shortened with a marker and hash
        (:func:`fit_value`).

        Raises:
            TrackingError: a key longer than 250 characters (:func:`check_key`), before anything is logged.
        """
        from mlflow.entities import Param

        items: List[Tuple[str, str]] = [(check_key(str(k), "param"), fit_value(v, PARAM_MAX)) for k, v in params.items()]
        for i in range(0, len(items), _PARAM_BATCH):
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in items[i : i + _PARAM_BATCH]], synchronous=True)

    def set_tags(self, tags: Dict[str, object]) -> None:
        """Set run tags (values as strings; over 8,000 characters shortened as by :func:`fit_tags`)."""
        from mlflow.entities import RunTag

        items = [RunTag(k, v) for k, v in fit_tags(tags).items()]
        for i in range(0, len(items), _PARAM_BATCH):
            self.client.log_batch(self.run_id, tags=items[i : i + _PARAM_BATCH], synchronous=True)

    def log_inputs(self, inputs: List[Any]) -> None:
        """Log MLflow ``DatasetInput`` records, once more if another process created the same dataset meanwhile.

        MLflow's SQL store looks a dataset (experiment, name, digest) up and inserts it if missing, in one
        transaction that is rolled back on failure; two runs of one corpus started together can both miss
        it, and the later insert then fails on the table's unique key. The second attempt finds the
        dataset and only links it to this run.

        Raises:
            MlflowException: any other failure, or the same one twice.
        """
        from mlflow.exceptions import MlflowException

        try:
            self.client.log_inputs(self.run_id, inputs)
        except MlflowException as exc:
            cause = exc.__cause__
            if cause is None or type(cause).__name__ != "IntegrityError":  # sqlalchemy.exc.IntegrityError, not imported here
                raise
            log.info("dataset already created by another run; linking it to this run")
            self.client.log_inputs(self.run_id, inputs)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.artifacts.append(artifact_file)
        self.client.log_text(self.run_id, text, artifact_file)

    def log_figure(self, figure, artifact_file: str, dpi: int = 100, fixed_layout: bool = False) -> None:
        """Save a matplotlib figure as a PNG artifact and close it.

        The caller draws the figure and says whether it was laid out by hand (``fixed_layout``; the
        workflows pass :func:`attnsim.plots.common.has_fixed_layout`), so that tracking never imports
        the plots. A figure laid out by hand is drawn here; other figures are drawn with
        ``bbox_inches="tight"``, which draws them twice. The pixels are encoded by
        :func:`attnsim.tracking.png.png_bytes` (at most 400 KB: lossless, else a 256-colour palette)
        and uploaded on a background thread, while the caller draws the next figure: Pillow's encoder
        runs without the GIL, and encoding is up to half of a large figure's cost. :meth:`flush` (and
        so the end of the run) waits for every pending figure and raises its error, if any.
        """
        import matplotlib.pyplot as plt

        from attnsim.tracking.png import figure_pixels

        self.artifacts.append(artifact_file)
        try:
            pixels = figure_pixels(figure, dpi, fixed_layout)
            self._pending.append(self._writer().submit(self._write_png, pixels, dpi, artifact_file))
        finally:
            plt.close(figure)

    def log_png(self, data: bytes, artifact_file: str) -> None:
        """Upload PNG file bytes already encoded (e.g. by :func:`attnsim.tracking.png.png_bytes` in a
        process drawing figures for this run) on the background thread of :meth:`log_figure`."""
        self.artifacts.append(artifact_file)
        self._pending.append(self._writer().submit(self._write_file, data, artifact_file))

    def _writer(self):
        # one background thread, created on first use, for figure encoding and upload
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnsim-figures")
        return self._executor

    def _write_png(self, pixels, dpi: int, artifact_file: str) -> None:
        from attnsim.tracking.png import png_bytes

        self._write_file(png_bytes(pixels, dpi), artifact_file)

    def _write_file(self, data: bytes, artifact_file: str) -> None:
        import os
        import posixpath
        import tempfile

        directory, name = posixpath.split(artifact_file)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, name)
            with open(path, "wb") as handle:
                handle.write(data)
            self.client.log_artifact(self.run_id, path, directory or None)

    def wait_for_figures(self) -> None:
        """Block until every figure passed to :meth:`log_figure` is uploaded; raise the first error."""
        pending, self._pending = self._pending, []
        errors = [future.exception() for future in pending]  # waits for each
        if self._executor is not None and not self._pending:
            self._executor.shutdown(wait=True)
            self._executor = None
        for error in errors:
            if error is not None:
                raise error

    def log_table(self, frame, artifact_file: str) -> None:
        """A pandas DataFrame as CSV (``.csv``) or as an MLflow table (``.json``, stackable with ``mlflow.load_table``).

        An MLflow table is the DataFrame as pandas "split" JSON without its index, listed in the run
        tag ``mlflow.loggedArtifacts`` (which ``mlflow.load_table`` searches). It is written here as
        a text artifact and the tag is updated once per :meth:`flush`: ``MlflowClient.log_table``
        lists the run's artifacts, reads the run and rewrites the tag for every table (~0.1 s each).

        Raises:
            ValueError: the file name ends neither in ``.csv`` nor ``.json``.
        """
        if artifact_file.endswith(".csv"):
            self.client.log_text(self.run_id, frame.to_csv(index=False), artifact_file)
        elif artifact_file.endswith(".json"):
            self.client.log_text(self.run_id, frame.to_json(orient="split", index=False, date_format="iso"), artifact_file)
            self._tables.append(artifact_file)
        else:
            raise ValueError(f"A table artifact must end in .csv or .json, not {artifact_file!r}.")
        self.artifacts.append(artifact_file)

    def log_artifact(self, local_path: str, artifact_path: Optional[str] = None) -> None:
        import os
        import posixpath

        self.artifacts.append(posixpath.join(artifact_path or "", os.path.basename(local_path)))
        self.client.log_artifact(self.run_id, local_path, artifact_path)

    # -- lifecycle ---------------------------------------------------------------
    def finish(self, status: str = "FINISHED") -> None:
        """Flush, record the skipped-value count and end the run with ``status``."""
        if self.ended:
            return
        try:
            self.flush()
            if self.skipped_nonfinite:
                self.client.log_metric(self.run_id, run_key("skipped_nonfinite"), float(self.skipped_nonfinite), step=self.step)
                # which keys: "undefined" (NaN: e.g. no pair of that kind) is then told apart from "not computed"
                self.set_tags({Tag.SKIPPED_NONFINITE.value: ",".join(sorted(self._warned))})
        finally:
            self.client.set_terminated(self.run_id, status)
            self.ended = status

    def fail(self, exc: BaseException, status: str = "FAILED") -> None:
        """Keep what was logged, tag the error, end the run as FAILED or KILLED."""
        try:
            self.client.set_tag(self.run_id, Tag.ERROR.value, format_failure(exc))
        except Exception:  # noqa: BLE001 - the store may be what failed; still try to end the run
            log.exception("could not tag the failed run %s", self.run_id)
        try:
            self.finish(status)
        except Exception as second:  # noqa: BLE001
            raise TrackingError(f"Run {self.run_id} could not be ended as {status}: {second}") from exc
