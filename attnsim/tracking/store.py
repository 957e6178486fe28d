"""Tracking store resolution, reachability and run lifecycle (MLflow client only).

Store: ``tracking.uri`` if set, else ``$MLFLOW_TRACKING_URI``, else an SQLite
database ``mlruns/mlflow.db`` under the current directory (absolute path)
with artifacts under ``mlruns/artifacts/``; MLflow 3 refuses the old
``./mlruns`` file store.

Concurrency (README, "Shared tracking server"): an SQLite store is created and
upgraded by :func:`prepare_sqlite` under an inter-process file lock
(``filelock``, ``<database>.lock``) before MLflow opens it, so processes started
together never run MLflow's schema migration at the same time; a store a crash
left half-migrated is refused with :class:`HalfMigratedStoreError`, which says
how to repair it. :meth:`Tracker.experiment_id` creates a missing experiment and,
when another process created it first ("already exists"), reads it again.

Reachability: a database store's port and an MLflow server's first answers are probed without MLflow's retries
(:mod:`attnsim.tracking.reach`), before any model loads.

Experiments: a name that would put its artifacts outside a folder of its own under the store's artifact root is
refused (:func:`experiment_location`); :meth:`Tracker.check_experiment` refuses an experiment deleted in
the MLflow UI or API (its name stays taken in the store) with one paragraph on
restoring it, logging elsewhere or deleting it for good; ``attnsim run``,
``sweep`` and ``finetune`` call it before any model loads.

Lifecycle: :meth:`Tracker.run` creates a run and yields a
:class:`~attnsim.tracking.sink.RunSink`; the run ends FINISHED when the block
completes, KILLED on Ctrl-C / SIGTERM, FAILED on any other exception, with
everything logged so far kept. No run is left RUNNING.

Params, tags and descriptions (README, "Tracking store"):
:func:`measure_params` is the one rule for which config keys a measurement
run logs as params: those the run reads itself and those its findings declare; tag values are fitted to MLflow's limits by
:func:`~attnsim.tracking.sink.fit_tags`; every run gets a description
(``mlflow.note.content``, :func:`run_note`): the experiment's ``description``
and how the run was started (:func:`command_line`, :func:`api_call`).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional
from urllib.parse import urlparse

from attnsim.errors import TrackingError
from attnsim.keys import Tag, experiment_name_problem
from attnsim.tracking.params import (  # noqa: F401 - the params, tags and descriptions rule, imported from here by its users
    FIGURE_KEYS,
    NOT_PARAMS,
    PREDICT_TRAINER_KEYS,
    RUN_KEYS,
    SOURCE_ONLY_CORPUS_KEYS,
    api_call,
    command_line,
    covers,
    finding_keys,
    measure_params,
    run_note,
    started,
)
from attnsim.tracking.reach import hide_password, probe_database, probe_port, probe_server  # noqa: F401 - hide_password: imported from here by its users
from attnsim.tracking.sink import RunSink, fit_tags, format_failure  # noqa: F401 - format_failure: its old home

NOTE_TAG = "mlflow.note.content"  # the run's description in the MLflow UI (Markdown)

log = logging.getLogger(__name__)


LOCK_TIMEOUT_S = 300.0  # how long a process waits for another one creating or upgrading the same SQLite store
EXPERIMENT_RETRIES = 5  # get-or-create attempts of one experiment when other processes race to create it


class HalfMigratedStoreError(TrackingError):
    """An SQLite tracking store whose MLflow schema migration was interrupted (a crash, or an old unlocked race)."""


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM."""


def default_uri(root: Optional[Path] = None) -> str:
    """``sqlite:///<root>/mlruns/mlflow.db`` (absolute), root defaulting to the current directory."""
    root = (root or Path.cwd()).resolve()
    return f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"


SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
"""File names a path given where a tracking URI belongs is taken to mean an SQLite store by (to say how to write it)."""


def missing_sqlite_store(uri: str) -> Optional[str]:
    """Why a command that reads runs refuses ``uri``: an ``sqlite:///`` store whose file does not exist (nothing was
    logged there; opening it would create an empty store). None when the store is not SQLite or its file exists.
    The message gives the path as read (relative to the current folder after ``sqlite:///``, absolute after
    ``sqlite:////``)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = Path(uri[len("sqlite:///") :])
    if path.is_file():
        return None
    read_as = "" if path.is_absolute() else f"; sqlite:/// then a relative path is read from the current folder, write sqlite:////{path} for /{path}"
    return (
        f"There is no tracking store at {path.resolve()} (from {uri}{read_as}): nothing has been logged there. "
        "Give the store that `attnsim run` printed (--uri or MLFLOW_TRACKING_URI), or run an experiment first (attnsim run csm)."
    )


def check_uri_form(uri: str) -> None:
    """Refuse a tracking URI that MLflow 3 cannot log to, from its text alone (no MLflow, nothing created).

    Raises:
        TrackingError: a bare path (``mlruns/mlflow.db``: the message writes it as ``sqlite:///ABSOLUTE``), an MLflow
            file store (``file:`` or a folder: MLflow 3 refuses them), an in-memory SQLite store (``sqlite://``: its runs
            would be gone with the process), an ``sqlite:///~/...`` path (SQLite does not expand ``~``), or an
            ``sqlite:///`` store whose folder cannot be created (a file stands in its way, or the nearest existing folder
            is not writable).
    """
    scheme = urlparse(uri).scheme
    if scheme == "" and uri.endswith(SQLITE_SUFFIXES):
        absolute = Path(uri).expanduser().resolve()
        raise TrackingError(
            f"Tracking store '{uri}' is a path, not a URI: write an SQLite store as sqlite:///{absolute} "
            f"(--uri sqlite:///{absolute}, tracking.uri=sqlite:///{absolute} in a run, or MLFLOW_TRACKING_URI)."
        )
    if scheme in ("", "file"):
        raise TrackingError(
            f"Tracking store '{uri}' is an MLflow file store, which MLflow 3 refuses. Use an SQLite database "
            f"(e.g. tracking.uri=sqlite:///{Path.cwd() / 'mlruns' / 'mlflow.db'}) or an MLflow server (http://host:port)."
        )
    if uri in ("sqlite://", "sqlite:///:memory:"):
        raise TrackingError(
            f"Tracking store '{uri}' is an in-memory SQLite database: every run logged there is gone when the process ends. "
            f"Give a file, e.g. sqlite:///{Path.cwd() / 'mlruns' / 'mlflow.db'}."
        )
    if uri.startswith("sqlite:///") and uri[len("sqlite:///") :].startswith("~"):
        raise TrackingError(
            f"Tracking store '{uri}' starts its path with '~', which SQLite does not expand (it would make a folder named '~' here). "
            f"Write the whole path: sqlite:///{Path(uri[len('sqlite:///') :]).expanduser()}."
        )
    if uri.startswith("sqlite:///"):
        folder = _sqlite_path(uri).parent.resolve()
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            why = "is a file" if not existing.is_dir() else "is not writable"
            raise TrackingError(f"Cannot create the folder {folder} of the SQLite tracking store {uri}: {existing} {why}. Give a writable path.")


def check_store(uri: Optional[str] = None) -> str:
    """The tracking URI in force (:func:`resolve_uri`), checked without MLflow and without creating anything: its
    form (:func:`check_uri_form`), and that a database server (:func:`~attnsim.tracking.reach.probe_database`) or an
    MLflow server (:func:`~attnsim.tracking.reach.probe_port`) listens, each within about 5 s. Whether a server
    answers as MLflow is asked later, with MLflow (:meth:`Tracker.check`).

    Raises:
        TrackingError: naming the store (password hidden), what is wrong and the fix.
    """
    uri = resolve_uri(uri)
    check_uri_form(uri)
    probe_database(uri)
    if urlparse(uri).scheme in ("http", "https"):
        probe_port(uri)
    return uri


def existing_tracker(uri: Optional[str] = None) -> "Tracker":
    """The :class:`Tracker` of a store that already exists, checked: for commands that read runs (``runs``, ``report``,
    ``compare``), which must not create an empty SQLite store where a path is mistyped or nothing was logged.

    Raises:
        TrackingError: an SQLite store whose file does not exist (:func:`missing_sqlite_store`), or a store that
        cannot be used (:meth:`Tracker.check`).
    """
    uri = resolve_uri(uri)
    missing = missing_sqlite_store(uri)
    if missing:
        raise TrackingError(missing)
    tracker = Tracker(uri)
    tracker.check()
    return tracker


def resolve_uri(uri: Optional[str] = None) -> str:
    """The tracking URI in force: explicit, else ``$MLFLOW_TRACKING_URI``, else :func:`default_uri`."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or default_uri()


def _process_start(pid: int) -> Optional[str]:
    """The start time of process ``pid`` in clock ticks since boot (field 22 of ``/proc/PID/stat``), None off Linux."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_tags() -> Dict[str, str]:
    """Tags naming the process that holds a run: host, pid and the process's start time (so that a reused pid is told apart)."""
    tags = {Tag.HOST.value: socket.gethostname(), Tag.PID.value: str(os.getpid())}
    start = _process_start(os.getpid())
    if start is not None:
        tags[Tag.PROCESS_START.value] = start
    return tags


def process_alive(pid: int, start: Optional[str] = None) -> bool:
    """Whether process ``pid`` still runs (and, given its recorded start time, is the same process, not a reused pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        pass
    if start is not None:
        now = _process_start(pid)
        return now is None or now == start
    return True


def process_gone(tags: Dict[str, str]) -> bool:
    """Whether the process a RUNNING run's tags name (:func:`process_tags`) ran on this machine and has ended, so
    that nothing will ever close the run; False for a run of another machine, of a live process, or without those tags."""
    pid = int(tags.get(Tag.PID.value, "0") or 0)
    return bool(pid) and tags.get(Tag.HOST.value) == socket.gethostname() and not process_alive(pid, tags.get(Tag.PROCESS_START.value))


def _artifact_root(uri: str) -> Optional[str]:
    """Artifact root for experiments created in an SQLite store: ``<db folder>/artifacts``."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///") :]).resolve().parent / "artifacts").as_uri()  # a relative path: from the current folder
    return None


def experiment_location(uri: str, name: str) -> Optional[str]:
    """The artifact location of a new experiment ``name`` in the store ``uri``: ``<artifact root>/<name>`` for an SQLite
    store (None elsewhere: a server or database store chooses it by the experiment's id).

    The name is checked for every store, so that one name works everywhere: by the rule, whose folders are all
    named, non-empty and neither ``.`` nor ``..``, ``<artifact root>/<name>`` lies strictly inside the artifact root.

    Raises:
        TrackingError: ``name`` breaks the experiment-name rule (:func:`~attnsim.keys.experiment_name_problem`).
    """
    problem = experiment_name_problem(name)
    if problem:
        raise TrackingError(f'MLflow experiment name "{name}" {problem}')
    root = _artifact_root(uri)
    return f"{root}/{name}" if root else None


def _sqlite_path(uri: str) -> Path:
    return Path(uri[len("sqlite:///") :])


def _half_migrated(uri: str, detail: str) -> HalfMigratedStoreError:
    path = _sqlite_path(uri)
    return HalfMigratedStoreError(
        f"The SQLite tracking store {path} was left half-migrated: an MLflow schema upgrade of it stopped part-way ({detail}), "
        f"so MLflow cannot use it. Repair it: stop every process using it, copy the file as a backup "
        f"(cp '{path}' '{path}.bak'), drop the leftover temporary tables "
        f"(sqlite3 '{path}' \"SELECT name FROM sqlite_master WHERE name LIKE '_alembic_tmp_%'\" lists them; DROP TABLE each), "
        f"then run `mlflow db upgrade '{uri}'`. If the upgrade still fails, restore a backup, or move the file aside "
        f"and log to a new store (tracking.uri / --uri / MLFLOW_TRACKING_URI)."
    )


def prepare_sqlite(uri: str, timeout_s: float = LOCK_TIMEOUT_S) -> None:
    """Create or upgrade the SQLite tracking store ``uri`` to MLflow's current schema, under an inter-process lock.

    MLflow creates and migrates an SQLite database the first time a process opens it, with no lock
    between processes: several processes started together against a new or old store run the
    migration at once and fail (``duplicate column name``) or leave it half-migrated. This does that
    work first, holding ``<database>.lock`` (:class:`filelock.FileLock`), so MLflow then finds the
    schema current and migrates nothing. Cheap when the store is current (one schema read).

    Args:
        uri: ``sqlite:///PATH`` (its folder must exist).
        timeout_s: seconds to wait for another process holding the lock.

    Raises:
        HalfMigratedStoreError: the store holds leftovers of an interrupted migration (``_alembic_tmp_*``
            tables) or its upgrade fails; the message says how to repair it.
        TrackingError: the lock was not obtained within ``timeout_s`` or cannot be created, or the file
            is not an SQLite database.
    """
    import sqlalchemy
    from filelock import FileLock, Timeout
    from mlflow.store.db import utils as db_utils

    path = _sqlite_path(uri)
    lock = FileLock(f"{path}.lock")
    try:
        lock.acquire(timeout=timeout_s)
    except Timeout as exc:
        raise TrackingError(
            f"Another process has held the lock {path}.lock of the SQLite tracking store {path} for over {timeout_s:.0f} s while creating or upgrading it. Wait for it to finish; if no attnsim or MLflow process is running, delete the lock file."
        ) from exc
    except OSError as exc:
        raise TrackingError(
            f"Cannot create the lock file {path}.lock beside the SQLite tracking store {path}: {exc}. Give a store in a writable folder (tracking.uri / --uri / MLFLOW_TRACKING_URI)."
        ) from exc
    engine = sqlalchemy.create_engine(uri)
    try:
        try:
            tables = sqlalchemy.inspect(engine).get_table_names()
        except sqlalchemy.exc.DatabaseError as exc:
            raise TrackingError(
                f"The tracking store {path} is not an SQLite database ({str(getattr(exc, 'orig', exc))}). Point tracking.uri / --uri / MLFLOW_TRACKING_URI at an MLflow SQLite store (or a new path), or move this file aside."
            ) from exc
        leftovers = sorted(t for t in tables if t.startswith("_alembic_tmp_"))
        if leftovers:
            raise _half_migrated(uri, "leftover table(s) " + ", ".join(leftovers))
        head = db_utils._get_latest_schema_revision()
        if db_utils._all_tables_exist(engine) and db_utils._get_schema_version(engine) == head:
            return
        try:
            if db_utils._all_tables_exist(engine):
                db_utils._upgrade_db(engine)
            else:
                db_utils._initialize_tables(engine)
        except Exception as exc:  # noqa: BLE001 - alembic/sqlite raise many types; all mean the same here
            raise _half_migrated(uri, f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from exc
    finally:
        engine.dispose()
        lock.release()


def _already_exists(exc: Exception) -> bool:
    """Whether ``exc`` is MLflow's "experiment already exists" (from an SQL store or a server)."""
    code = getattr(exc, "error_code", "")
    return code == "RESOURCE_ALREADY_EXISTS" or "already exists" in str(exc)


class Tracker:
    """An MLflow tracking store: checks it, finds or creates experiments, runs runs.

    Raises:
        TrackingError: (from :meth:`check`) the store cannot be reached or used.
    """

    def __init__(self, uri: Optional[str] = None):
        from mlflow import MlflowClient

        self.uri = resolve_uri(uri)
        check_uri_form(self.uri)
        if self.uri.startswith("sqlite:///"):
            folder = Path(self.uri[len("sqlite:///") :]).parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise TrackingError(f"Cannot create the folder {folder} of the SQLite tracking store {self.uri}: {exc}. Give a writable path.") from exc
            prepare_sqlite(self.uri)
        probe_database(self.uri)  # before MLflow's own connection, which retries for about 100 s
        try:
            self.client = MlflowClient(tracking_uri=self.uri)
        except Exception as exc:  # noqa: BLE001 - MLflow raises several types for unusable URIs
            raise TrackingError(
                f"MLflow cannot use the tracking store '{self.uri}': {str(exc).splitlines()[0].rstrip('.')}. "
                "Use sqlite:///PATH/mlflow.db, http://host:port or postgresql://USER@HOST:PORT/DB."
            ) from exc

    def check(self, timeout_s: float = 5.0) -> None:
        """Fail fast when the store cannot be reached or used (before any model is loaded): an MLflow server is asked
        without MLflow's retries (:func:`~attnsim.tracking.reach.probe_server`), any other store by one search.

        Raises:
            TrackingError: the store cannot be reached, does not answer as MLflow, or fails the search.
        """
        if urlparse(self.uri).scheme in ("http", "https") and probe_server(self.uri, timeout_s):
            return
        try:
            self.client.search_experiments(max_results=1)
        except Exception as exc:  # noqa: BLE001 - any store failure is reported the same way
            raise TrackingError(
                f"The MLflow tracking store {self.uri} cannot be used: {str(exc).splitlines()[0]}. Fix tracking.uri / MLFLOW_TRACKING_URI."
            ) from exc

    def check_experiment(self, name: str) -> Optional[str]:
        """Refuse experiment ``name`` when it was deleted (MLflow UI or API); call before any model loads.

        A deleted experiment keeps its name in the store, so MLflow can neither log a run
        into it nor create a new one of that name.

        Returns:
            The id of the active experiment ``name``, or None when there is none yet (it will be created).

        Raises:
            TrackingError: the experiment is deleted; the message names it and its id and says how to
            restore it, log elsewhere (``tracking.experiment=NAME``) or delete it for good (``mlflow gc``).
            Or the name would put its artifacts outside the store's artifact root (:func:`experiment_location`).
        """
        experiment_location(self.uri, name)  # a name whose artifacts would leave the artifact root, before any request
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

    def experiment_id(self, name: str, description: str = "") -> str:
        """Id of experiment ``name``, created (with the store's artifact root) when missing.

        Safe when several processes create the same new experiment at once: when the create
        fails with "already exists" (another process won), the experiment is read again;
        up to :data:`EXPERIMENT_RETRIES` attempts. An experiment without a description gets
        ``description`` (tag ``mlflow.note.content``, shown on its page). Creating an experiment
        in an SQLite store hides MLflow's empty ``Default`` experiment (:meth:`hide_empty_default`).

        Raises:
            TrackingError: the experiment is deleted, or its name breaks the rule (see :meth:`check_experiment`).
        """
        location = experiment_location(self.uri, name)
        for attempt in range(EXPERIMENT_RETRIES):
            existing = self.check_experiment(name)
            if existing is not None:
                if description.strip() and NOTE_TAG not in self.client.get_experiment(existing).tags:
                    self.client.set_experiment_tag(existing, NOTE_TAG, fit_tags({NOTE_TAG: description.strip()})[NOTE_TAG])
                return existing
            try:
                tags = fit_tags({NOTE_TAG: description.strip()}) if description.strip() else None
                created = self.client.create_experiment(name, artifact_location=location, tags=tags)
                self.hide_empty_default()
                return created
            except Exception as exc:  # noqa: BLE001 - MlflowException (SQL store) or RestException (server)
                if not _already_exists(exc) or attempt == EXPERIMENT_RETRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def hide_empty_default(self) -> bool:
        """Delete MLflow's ``Default`` experiment (id 0) of an SQLite store when it holds no run, so that the UI lists
        only attnsim's experiments; True when it was deleted.

        MLflow creates ``Default`` with every new store. Its SQL store lets it be deleted (MLflow 3.17; the old file
        store refused) and does not create it again, since a store with any experiment, deleted or not, gets none;
        ``mlflow experiments restore --experiment-id 0`` brings it back. Left alone on a server (shared with others)
        and when it holds a run, of any state.
        """
        if not self.uri.startswith("sqlite:///"):
            return False
        try:
            default = self.client.get_experiment("0")
            if default.name != "Default" or default.lifecycle_stage != "active":
                return False
            from mlflow.entities import ViewType

            if self.client.search_runs(["0"], run_view_type=ViewType.ALL, max_results=1):
                return False
            self.client.delete_experiment("0")
        except Exception:  # noqa: BLE001 - no Default, or another process deleted it first: nothing to hide
            return False
        return True

    def end_dead_runs(self, experiment_id: str) -> List[str]:
        """End as FAILED the RUNNING runs of an experiment whose process on this machine is gone (SIGKILL, the
        out-of-memory killer, a power cut), keeping what they logged; return their ids.

        A run records its host, process id and process start time (:func:`process_tags`); a run of another machine,
        or of a live process, is left alone. MLflow itself cannot know that a run's process died.
        """
        host = socket.gethostname()
        try:
            running = self.client.search_runs(
                [experiment_id], filter_string=f"attributes.status = 'RUNNING' and tags.`{Tag.HOST.value}` = '{host}'", max_results=1000
            )
        except Exception:  # noqa: BLE001 - a store that cannot search (old server): nothing to end
            return []
        ended = []
        for run in running:
            tags = run.data.tags
            if not process_gone(tags):
                continue
            pid = int(tags[Tag.PID.value])
            self.client.set_tag(
                run.info.run_id, Tag.ERROR.value, f"process ended without closing the run (host {host}, pid {pid}); found by a later attnsim command"
            )
            self.client.set_terminated(run.info.run_id, status="FAILED")
            log.warning("run %s was left RUNNING by process %d, which has ended; marked it FAILED (what it logged is kept)", run.info.run_id, pid)
            ended.append(run.info.run_id)
        return ended

    @contextmanager
    def run(
        self,
        experiment: str,
        run_name: Optional[str] = None,
        tags: Optional[Dict[str, str]] = None,
        parent_run_id: Optional[str] = None,
        step: int = 0,
        description: str = "",
    ) -> Iterator[RunSink]:
        """Create a run, yield its sink, and always end it (FINISHED, KILLED or FAILED).

        Tag values are fitted to MLflow's limit (:func:`~attnsim.tracking.sink.fit_tags`); a run
        without a ``mlflow.note.content`` tag gets :func:`run_note` (how it was started) as its
        description. The sink logs metrics at MLflow step ``step`` unless told otherwise. ``description``: the
        experiment's, set when it has none (:meth:`experiment_id`).
        SIGTERM is turned into :class:`Terminated` (a ``KeyboardInterrupt``) while the block runs.

        Raises:
            TrackingError: a tag key longer than MLflow's 250 characters, before the run is created.
        """
        all_tags = dict(tags or {})
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        all_tags.setdefault(NOTE_TAG, run_note())
        all_tags.update(process_tags())
        all_tags = fit_tags(all_tags)
        run = self.client.create_run(self.experiment_id(experiment, description), run_name=run_name, tags=all_tags)
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
        for key, value in process_tags().items():  # this process holds it now
            self.client.set_tag(run_id, key, value)
        with self._lifecycle(RunSink(self.client, run_id)) as sink:
            yield sink

    @contextmanager
    def _lifecycle(self, sink: RunSink) -> Iterator[RunSink]:
        previous = _install_sigterm()
        try:
            yield sink
        except KeyboardInterrupt as exc:
            sink.fail(exc, status="KILLED")
            KILLED_RUNS.append(sink.run_id)
            raise
        except BaseException as exc:
            sink.fail(exc, status="FAILED")
            raise
        else:
            sink.finish("FINISHED")
        finally:
            _restore_sigterm(previous)


KILLED_RUNS: List[str] = []
"""The runs this process ended as KILLED (Ctrl-C or SIGTERM inside :meth:`Tracker.run`), in order: what the command
line says it ended when interrupted."""


RECEIVED_SIGNALS: List[int] = []
"""The signals (SIGTERM) this process turned into :class:`Terminated`: the command line exits with 128 + the signal,
as a shell reports a process the signal ended, rather than Ctrl-C's 130."""


def _raise_terminated(signum, frame):  # noqa: ANN001 - signal handler signature
    RECEIVED_SIGNALS.append(int(signum))
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
