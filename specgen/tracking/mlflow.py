"""An MLflow run of `specgen train`, and what `specgen export` adds to it (docs/tracking.md).

Through `MlflowClient` (never the fluent `mlflow.start_run`: no process-wide active run, so a notebook's own runs
are left alone). The run's ids go into the run folder's mlflow.json at its start: `--resume` continues that MLflow
run (same URI), `export --checkpoint RUN` attaches its files to it.

HTTP: MLflow's client retries a failed request 7 times with a growing backoff (about 4 minutes) and waits 120 s
for an answer. Unless the user set them, specgen asks for 2 retries, a backoff factor of 1 and a 10 s timeout:
a tracker that is down costs a run a few seconds, once (measured in docs/tracking.md), then tracking is off.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from specgen.atomic import write_atomic
from specgen.paths import shown
from specgen.spec.load import LoadedSpec
from specgen.tracking.base import FAILED, GOING_ON, RUN_FILE, RecordError, Target, Tracker, read_record, shown_uri
from specgen.tracking.params import METRICS_PER_BATCH, PARAMS_PER_BATCH, batches, metric_key, resolved_params

HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_LOGGING_LEVEL": "WARNING",
                 "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}  # the run's start line gives the URL
REASON_CHARS = 200  # of an exception's first line in a warning or error line
LOCK_WAIT = 120  # seconds a process waits for another that is opening (migrating) the same SQLite store
T = TypeVar("T")

try:
    import fcntl
except ImportError:  # not POSIX: no lock (see _store_lock)
    fcntl = None  # type: ignore[assignment]


def client(uri: str) -> Any:
    """MLflow's client for `uri` (tracking and registry), with specgen's HTTP defaults where the user set none."""
    # urllib3 logs each retry as a WARNING through Python's last-resort handler: the one warning line is specgen's.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    logging.getLogger("alembic").setLevel(logging.WARNING)  # a new sqlite store's migrations, line by line
    quiet = "MLFLOW_LOGGING_LEVEL" not in os.environ  # before the default below: a level the user set is kept
    for name, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    from mlflow import MlflowClient

    if quiet:  # MLflow logs a failed store call (ERROR, two tracebacks) and raises it: specgen's one line says it
        logging.getLogger("mlflow").setLevel(logging.CRITICAL)

    _store_folder(uri)
    with _store_lock(uri):  # the client opens the store at once: a new or older SQLite store is migrated here
        return MlflowClient(tracking_uri=uri, registry_uri=uri)


def _store_folder(uri: str) -> None:
    """A `sqlite:///PATH` store below a file: MLflow makes the missing folders and fails with `[Errno 17] File
    exists` (the file is in the way, not a folder that exists); said as what it is, naming the file."""
    if not uri.lower().startswith("sqlite:///"):
        return
    folder = Path(uri[len("sqlite:///"):].partition("?")[0]).absolute().parent
    for above in (folder, *folder.parents):
        if above.exists() or above.is_symlink():
            if not above.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", str(above))
            return


@contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """For a `sqlite:///PATH` store, an exclusive flock on the database's folder while MLflow opens the store.

    Opening a new (or older) store runs MLflow's schema migrations, and two processes migrating one file at once
    break each other (`duplicate column name`, `table _alembic_tmp_... already exists`): one of them, or both, then
    goes untracked (two `specgen train` runs started together, a sweep's parallel trials). The lock makes the second
    wait until the first has migrated; it then finds the schema current. The folder is locked, not a lock file, so
    nothing is added beside the database. Where flock is missing (another OS, some network filesystems), or another
    process holds the lock for over LOCK_WAIT seconds (stuck), MLflow opens the store unlocked, as before.
    """
    if fcntl is None or not uri.lower().startswith("sqlite:///"):
        yield
        return
    folder = Path(uri[len("sqlite:///"):].partition("?")[0]).absolute().parent
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # no such folder: MLflow says so in its own words
        yield
        return
    try:
        deadline = time.monotonic() + LOCK_WAIT
        while not _locked(fd) and time.monotonic() < deadline:
            time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock


def _locked(fd: int) -> bool:
    """Took the lock now, or cannot lock here at all (then waiting is pointless): True; held elsewhere: False."""
    assert fcntl is not None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def prepare(target: Target) -> str | None:
    """Open the store and its experiment once, in a sweep's own process before any trial starts, so its parallel
    trials find both made (no migration, no experiment race among them); the reason when it fails, else None."""
    try:
        _experiment(client(target.uri), target)
    except Exception as exc:  # any failure of the tracker: the sweep warns and its trials still try
        return reason(exc)
    return None


def reason(exc: BaseException) -> str:
    """The cause in a few words: `[Errno 111] Connection refused` rather than MLflow's request dump, and of a
    database error its first line (`(sqlite3.OperationalError) attempt to write a readonly database`), not the SQL
    statement and parameters SQLAlchemy appends; cut, saying so, past REASON_CHARS."""
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:  # the path too: `File exists:` alone
        where = f": {shown(exc.filename)}" if isinstance(exc.filename, str) else ""  # says nothing of which
        return f"[Errno {exc.errno}] {exc.strerror}{where}"
    text = " ".join(str(exc).split())
    code = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
    if code:
        return code.group(0).strip()
    if "timed out" in text.lower():
        return "the request timed out"
    first = next((" ".join(line.split()) for line in str(exc).splitlines() if line.strip()), "")
    first = re.sub(r"\s*\[SQL: .*", "", first)  # SQLAlchemy's statement, where it shares the first line
    if len(first) > REASON_CHARS:
        first = first[:REASON_CHARS].rsplit(" ", 1)[0] + " ..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class MlflowRun(Tracker):
    """One MLflow run; `dead` once a call failed (the command warned and goes on without it)."""

    def __init__(self, target: Target, what: str):
        self.target, self.what = target, what
        self.client: Any = None
        self.run_id: str | None = None
        self.dead = False

    def call(self, action: Callable[[], T]) -> T | None:
        """`action`, or None and (the first time) one warning line when it fails: the run goes on."""
        if self.dead:
            return None
        try:
            return action()
        except Exception as exc:  # any failure of the tracker (HTTP, database, disk): tracking must never stop a run
            self.dead = True
            print(f"specgen {self.what}: {FAILED}{shown_uri(self.target.uri)} failed ({reason(exc)}){GOING_ON}",
                  file=sys.stderr)
            return None

    def scalars(self, stage: str, step: int, values: dict[str, float]) -> None:
        """As TensorBoard stores them: float32 (tf.summary.scalar's dtype), so both show the same numbers."""
        if self.run_id is None or self.dead or not values:
            return
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        metrics = [Metric(metric_key(stage, name), float(np.float32(value)), stamp, step) for name, value in values.items()]
        for part in batches(metrics, METRICS_PER_BATCH):
            self.call(partial(self._log_batch, part))

    def _log_batch(self, metrics: list[Any]) -> None:
        self.client.log_batch(self.run_id, metrics=metrics, synchronous=True)

    def finish(self, status: str) -> None:
        if self.run_id is not None:
            self.call(lambda: self.client.set_terminated(self.run_id, status))


def open_run(target: Target, loaded: LoadedSpec, folder: Path, overrides: list[str], resumed: bool) -> MlflowRun:
    """A new MLflow run with the resolved spec's params, or (`resumed`, same URI) the one mlflow.json names."""
    run = MlflowRun(target, "train")
    run.client = run.call(lambda: client(target.uri))
    if run.client is None:
        return run
    saved = None
    if resumed:
        try:
            saved = read_record(folder)
        except RecordError as exc:  # its MLflow run is unknown: a new one, whose ids replace the damaged file
            print(f"specgen train: warning: {exc}; starting a new MLflow run", file=sys.stderr)
    if saved is not None and saved.uri == target.uri:
        run.run_id = run.call(lambda: _reopen(run.client, saved.run_id))
    else:
        run.run_id = run.call(lambda: _create(run.client, target, loaded, folder))
    if run.run_id is None:
        return run
    write_atomic(folder / RUN_FILE, json.dumps({"uri": target.uri, "experiment": target.experiment,
                                                "run_id": run.run_id}, indent=2) + "\n")
    run.call(lambda: _log_params(run.client, str(run.run_id), resolved_params(loaded.path, overrides)))
    resolved = folder / "spec.resolved.yaml"
    if resolved.is_file():
        run.call(lambda: run.client.log_artifact(run.run_id, str(resolved)))
    if not run.dead:
        print(f"tracking: MLflow run {run.run_id} in experiment {target.experiment!r} at {_run_page(run)}")
    return run


def _run_page(run: MlflowRun) -> str:
    """The URI as shown; for an `mlflow server`, the run's page in its UI."""
    uri = shown_uri(run.target.uri)
    if not uri.lower().startswith(("http://", "https://")):
        return uri
    found = run.call(lambda: run.client.get_run(run.run_id).info.experiment_id)
    return f"{uri.rstrip('/')}/#/experiments/{found}/runs/{run.run_id}" if found is not None else uri


def _experiment(client: Any, target: Target) -> str:
    found = client.get_experiment_by_name(target.experiment)
    if found is not None:
        return str(found.experiment_id)
    location = None
    if target.uri.startswith("sqlite:///"):  # MLflow's default is ./mlruns in whatever folder the run started from
        database = Path(target.uri.removeprefix("sqlite:///").partition("?")[0])
        location = (database.absolute().parent / "mlartifacts").as_uri()
    from mlflow.exceptions import MlflowException

    try:
        return str(client.create_experiment(target.experiment, artifact_location=location))
    except MlflowException as exc:  # another run (a sweep's parallel trial) made it first
        found = client.get_experiment_by_name(target.experiment) if exc.error_code == "RESOURCE_ALREADY_EXISTS" else None
        if found is None:
            raise
        return str(found.experiment_id)


def _create(client: Any, target: Target, loaded: LoadedSpec, folder: Path) -> str:
    tags = {"specgen.run_folder": shown(folder), "specgen.spec": shown(loaded.path), "mlflow.source.name": "specgen train",
            "mlflow.source.type": "LOCAL"}
    run = client.create_run(_experiment(client, target), run_name=folder.name or None, tags=tags)
    return str(run.info.run_id)


def _reopen(client: Any, run_id: str) -> str:
    client.update_run(run_id, status="RUNNING")
    return run_id


def _log_params(client: Any, run_id: str, params: dict[str, str]) -> None:
    """New keys as params; on a resume, a key whose value changed (a new `--set`) as the tag `specgen.resumed.KEY`:
    MLflow refuses to change a param."""
    from mlflow.entities import Param, RunTag

    logged = client.get_run(run_id).data.params
    fresh = [Param(k, v) for k, v in params.items() if k not in logged]
    changed = [RunTag(f"specgen.resumed.{k}"[:250], v) for k, v in params.items() if k in logged and logged[k] != v]
    for part in batches(fresh, PARAMS_PER_BATCH):
        client.log_batch(run_id, params=part, synchronous=True)
    for part in batches(changed, PARAMS_PER_BATCH):
        client.log_batch(run_id, tags=part, synchronous=True)
