"""Tracking store resolution, reachability and run lifecycle (MLflow client only).

Store: ``tracking.uri`` if set, else ``$MLFLOW_TRACKING_URI``, else an SQLite
database ``mlruns/mlflow.db`` under the current directory (absolute path)
with artifacts under ``mlruns/artifacts/``; MLflow 3 refuses the old
``./mlruns`` file store.

Experiments: :meth:`Tracker.check_experiment` refuses an experiment deleted in
the MLflow UI or API (its name stays taken in the store) with one paragraph on
restoring it, logging elsewhere or deleting it for good; ``attnsim run``,
``sweep`` and ``finetune`` call it before any model loads.

Lifecycle: :meth:`Tracker.run` creates a run and yields a
:class:`~attnsim.tracking.sink.RunSink`; the run ends FINISHED when the block
completes, KILLED on Ctrl-C / SIGTERM, FAILED on any other exception, with
everything logged so far kept. No run is left RUNNING.

Params, tags and descriptions (README, "Tracking store"):
:func:`measure_params` is the one rule for which config keys a measurement
run logs as params; tag values are fitted to MLflow's limits by
:func:`~attnsim.tracking.sink.fit_tags`; every run gets a description
(``mlflow.note.content``, :func:`run_note`): the experiment's ``description``
and how the run was started (:func:`command_line`, :func:`api_call`).
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import socket
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, Optional, Sequence
from urllib.parse import urlparse

from attnsim.errors import TrackingError
from attnsim.keys import Tag
from attnsim.tracking.sink import RunSink, fit_tags, format_failure  # noqa: F401 - format_failure: its old home

NOTE_TAG = "mlflow.note.content"  # the run's description in the MLflow UI (Markdown)

log = logging.getLogger(__name__)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM."""


def default_uri(root: Optional[Path] = None) -> str:
    """``sqlite:///<root>/mlruns/mlflow.db`` (absolute), root defaulting to the current directory."""
    root = (root or Path.cwd()).resolve()
    return f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"


def resolve_uri(uri: Optional[str] = None) -> str:
    """The tracking URI in force: explicit, else ``$MLFLOW_TRACKING_URI``, else :func:`default_uri`."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_uri()


def _artifact_root(uri: str) -> Optional[str]:
    """Artifact root for experiments created in an SQLite store: ``<db folder>/artifacts``."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / "artifacts").as_uri()
    return None


class Tracker:
    """An MLflow tracking store: checks it, finds or creates experiments, runs runs.

    Raises:
        TrackingError: (from :meth:`check`) the store cannot be reached or used.
    """

    def __init__(self, uri: Optional[str] = None):
        from mlflow import MlflowClient

        self.uri = resolve_uri(uri)
        scheme = urlparse(self.uri).scheme
        if scheme in ("", "file"):
            raise TrackingError(
                f"Tracking store '{self.uri}' is an MLflow file store, which MLflow 3 refuses. Use an SQLite database "
                f"(e.g. tracking.uri=sqlite:///{Path.cwd() / 'mlruns' / 'mlflow.db'}) or an MLflow server (http://host:port)."
            )
        if self.uri.startswith("sqlite:///"):
            folder = Path(self.uri[len("sqlite:///"):]).parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise TrackingError(f"Cannot create the folder {folder} of the SQLite tracking store {self.uri}: {exc}. Give a writable path.") from exc
        try:
            self.client = MlflowClient(tracking_uri=self.uri)
        except Exception as exc:  # noqa: BLE001 - MLflow raises several types for unusable URIs
            raise TrackingError(f"MLflow cannot use the tracking store '{self.uri}': {str(exc).splitlines()[0]} Use sqlite:///PATH/mlflow.db or http://host:port.") from exc

    def check(self, timeout_s: float = 5.0) -> None:
        """Fail fast when the store cannot be reached (before any model is loaded)."""
        parsed = urlparse(self.uri)
        if parsed.scheme in ("http", "https"):
            port = parsed.port or (443 if parsed.scheme == "https" else 80)
            try:
                with socket.create_connection((parsed.hostname, port), timeout=timeout_s):
                    pass
            except OSError as exc:
                raise TrackingError(
                    f"The MLflow tracking server {self.uri} cannot be reached ({exc}). Start it (e.g. `mlflow server --host 127.0.0.1`), "
                    "or point tracking.uri / MLFLOW_TRACKING_URI at a reachable store."
                ) from exc
        try:
            self.client.search_experiments(max_results=1)
        except Exception as exc:  # noqa: BLE001 - any store failure is reported the same way
            raise TrackingError(f"The MLflow tracking store {self.uri} cannot be used: {str(exc).splitlines()[0]}. Fix tracking.uri / MLFLOW_TRACKING_URI.") from exc

    def check_experiment(self, name: str) -> Optional[str]:
        """Refuse experiment ``name`` when it was deleted (MLflow UI or API); call before any model loads.

        A deleted experiment keeps its name in the store, so MLflow can neither log a run
        into it nor create a new one of that name.

        Returns:
            The id of the active experiment ``name``, or None when there is none yet (it will be created).

        Raises:
            TrackingError: the experiment is deleted; the message names it and its id and says how to
            restore it, log elsewhere (``tracking.experiment=NAME``) or delete it for good (``mlflow gc``).
        """
        existing = self.client.get_experiment_by_name(name)
        if existing is None:
            return None
        if existing.lifecycle_stage == "deleted":
            eid = existing.experiment_id
            raise TrackingError(
                f"MLflow experiment '{name}' (id {eid}) in the tracking store {self.uri} was deleted, so no run can be logged to it "
                f"and its name cannot be used for a new experiment. Restore it with its runs: "
                f"`MLFLOW_TRACKING_URI='{self.uri}' mlflow experiments restore --experiment-id {eid}` "
                f"(or MlflowClient('{self.uri}').restore_experiment('{eid}') in Python); or log into another experiment with "
                f"tracking.experiment=OTHER_NAME; or delete it and its runs permanently, which frees the name, with "
                f"`mlflow gc --tracking-uri '{self.uri}' --experiment-ids {eid}`."
            )
        return existing.experiment_id

    def experiment_id(self, name: str) -> str:
        """Id of experiment ``name``, created (with the store's artifact root) when missing.

        Raises:
            TrackingError: the experiment is deleted (see :meth:`check_experiment`).
        """
        existing = self.check_experiment(name)
        if existing is not None:
            return existing
        root = _artifact_root(self.uri)
        location = f"{root}/{name}" if root else None
        return self.client.create_experiment(name, artifact_location=location)

    @contextmanager
    def run(self, experiment: str, run_name: Optional[str] = None, tags: Optional[Dict[str, str]] = None, parent_run_id: Optional[str] = None, step: int = 0) -> Iterator[RunSink]:
        """Create a run, yield its sink, and always end it (FINISHED, KILLED or FAILED).

        Tag values are fitted to MLflow's limit (:func:`~attnsim.tracking.sink.fit_tags`); a run
        without a ``mlflow.note.content`` tag gets :func:`run_note` (how it was started) as its
        description. The sink logs metrics at MLflow step ``step`` unless told otherwise.
        SIGTERM is turned into :class:`Terminated` (a ``KeyboardInterrupt``) while the block runs.

        Raises:
            TrackingError: a tag key longer than MLflow's 250 characters, before the run is created.
        """
        all_tags = dict(tags or {})
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        all_tags.setdefault(NOTE_TAG, run_note())
        all_tags = fit_tags(all_tags)
        run = self.client.create_run(self.experiment_id(experiment), run_name=run_name, tags=all_tags)
        with self._lifecycle(RunSink(self.client, run.info.run_id, step)) as sink:
            yield sink

    @contextmanager
    def resume(self, run_id: str) -> Iterator[RunSink]:
        """Reopen an ended run (status RUNNING again), yield its sink, and end it as :meth:`run` does.

        Used by sweeps that continue after a crash: what the run logged before is kept;
        the previous ``attnsim.error`` tag moves to ``attnsim.previous_error``.
        """
        error = self.client.get_run(run_id).data.tags.get(Tag.ERROR.value)
        if error is not None:
            self.client.set_tag(run_id, Tag.PREVIOUS_ERROR.value, error)
            self.client.delete_tag(run_id, Tag.ERROR.value)
        self.client.update_run(run_id, status="RUNNING")
        with self._lifecycle(RunSink(self.client, run_id)) as sink:
            yield sink

    @contextmanager
    def _lifecycle(self, sink: RunSink) -> Iterator[RunSink]:
        previous = _install_sigterm()
        try:
            yield sink
        except KeyboardInterrupt as exc:
            sink.fail(exc, status="KILLED")
            raise
        except BaseException as exc:
            sink.fail(exc, status="FAILED")
            raise
        else:
            sink.finish("FINISHED")
        finally:
            _restore_sigterm(previous)


def _raise_terminated(signum, frame):  # noqa: ANN001 - signal handler signature
    raise Terminated(f"received signal {signum}")


def _install_sigterm():
    try:
        return signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not in the main thread
        return None


def _restore_sigterm(previous) -> None:  # noqa: ANN001
    if previous is not None:
        try:
            signal.signal(signal.SIGTERM, previous)
        except ValueError:
            pass


# -- params, tags and descriptions ---------------------------------------------------------------
# trainer keys a predict (measurement) run uses; the rest of `trainer` is for `attnsim finetune`
PREDICT_TRAINER_KEYS = ("accelerator", "devices", "precision", "batch_size", "num_workers", "threads")
# findings that read the `maps` section (rollout: head_fusion, discard_ratio, flow_max_tokens;
# gradient_maps: target_class, num_labels)
MAPS_FINDINGS = ("rollout", "gradient_maps")


def measure_params(cfg: Any) -> Dict[str, str]:
    """The config keys a measurement run (``attnsim run``, a sweep and its children) logs as params.

    The rule, in one place: ``seed``, ``findings``, every key of ``model``, ``corpus`` and
    ``stats``; of ``trainer`` only the predict keys (:data:`PREDICT_TRAINER_KEYS`: accelerator,
    devices, precision, batch_size, num_workers, threads; not ``progress_bar`` nor the fit-only
    ``max_steps``, ``learning_rate``, ...); ``tracking`` except ``tracking.tags`` (set as the run's
    tags); ``plots`` only when ``tracking.figures`` is on; ``maps`` only when a finding of
    :data:`MAPS_FINDINGS` runs. Never ``checkpoint.*`` (an ``attnsim finetune`` run logs those),
    ``name`` (tag ``attnsim.experiment`` and the run name), ``description`` (the run's description,
    :func:`run_note`) nor ``task``. The whole resolved config is the run's ``config.yaml``.

    Args:
        cfg: a resolved config (:func:`attnsim.config.load_config`).

    Returns:
        ``dotted.key -> str(value)`` from :func:`attnsim.config.flatten`, filtered by the rule.
    """
    from attnsim.config import flatten

    sections = {"seed", "findings", "model", "corpus", "stats", "tracking"}
    if cfg.tracking.figures:
        sections.add("plots")
    if set(cfg.findings) & set(MAPS_FINDINGS):
        sections.add("maps")
    params: Dict[str, str] = {}
    for key, value in flatten(cfg).items():
        section, _, rest = key.partition(".")
        if section == "trainer":
            keep = rest in PREDICT_TRAINER_KEYS
        elif section == "tracking":
            keep = rest != "tags" and not rest.startswith("tags.")
        else:
            keep = section in sections
        if keep:
            params[key] = value
    return params


_STARTED: ContextVar[Optional[str]] = ContextVar("attnsim_started", default=None)


@contextmanager
def _started(text: str) -> Iterator[None]:
    token = _STARTED.set(text) if _STARTED.get() is None else None  # the outermost caller wins
    try:
        yield
    finally:
        if token is not None:
            _STARTED.reset(token)


def command_line(argv: Sequence[str]) -> Any:
    """Context manager: runs created inside were started by this command line (``["attnsim", "run", ...]``).

    The command line ``cli.main`` was given, joined with :func:`shlex.join`, becomes part of every
    run's description (:func:`run_note`).
    """
    return _started(f"Command line: `{shlex.join([str(a) for a in argv])}`")


def api_call(call: str) -> Any:
    """Context manager: runs created inside were started from Python by ``call`` (e.g. ``attnsim.run('csm', [])``),
    unless a command line (:func:`command_line`) is already recorded."""
    return _started(f"Started from the Python API: `{call}` (process: `{shlex.join(sys.argv)}`)")


def started() -> str:
    """How the runs being created were started: the command line, the Python call, or a fallback naming the process."""
    return _STARTED.get() or f"Started from the Python API (process: `{shlex.join(sys.argv)}`)"


def run_note(description: str = "", details: Iterable[str] = ()) -> str:
    """A run's description (tag ``mlflow.note.content``, Markdown in the MLflow UI).

    Paragraphs: the experiment's ``description`` (when not empty), how the run was started
    (:func:`started`), then each of ``details`` (e.g. which checkpoint a sweep child measured).
    """
    parts = [description.strip()] if description and description.strip() else []
    parts.append(started())
    parts.extend(d for d in details if d)
    return "\n\n".join(parts)
