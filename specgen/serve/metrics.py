"""Prometheus metrics of one server, in its own registry (several servers may share a process, as in tests).

Series are per model, not per version: the versions of a model served at once (version_policy) add into
one series, and a version swapped in continues its model's series. Per-version figures are in the
statistics extension (stats.py). gRPC requests are counted with the HTTP status of the same outcome
(INVALID_ARGUMENT 400, NOT_FOUND 404, ...) and `protocol="grpc"`.

With `--workers N`, prometheus_client's multiprocess mode: every worker writes its values into the folder
named by PROMETHEUS_MULTIPROC_DIR, and /metrics of any worker renders the sum of all. Each worker loads the
live repository's models itself, so `specgen_model_loads_total` counts each version once per worker (N per
version): it counts loads, the work each process did, and a dashboard divides by N for versions. A worker the parent
restarts counts neither its loads nor its refusals: they are the start's, and the live workers counted the refusals.

A dead worker's counter and histogram files are folded into one file per kind (metrics_fold.py, which says how
exactly once and without the parent ever waiting on a scrape).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specgen.atomic import pid_alive
from specgen.serve.metrics_fold import LOCK_NAME, folder_lock

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # set by `--workers N` (workers.py) in each worker's environment
METRICS_PREFIX = "specgen-metrics-"  # `--workers`' folder: + the parent's pid + "-" + mkdtemp's random part
UNKNOWN_MODEL = "_unknown"  # the model label of requests for models the server does not have


class ModelMetrics:
    """One model's labelled series, looked up once (prometheus_client's `labels()` costs a lock and a dict per call)."""

    def __init__(self, metrics: ServerMetrics, model: str):
        self._metrics, self.model = metrics, model
        self._requests: dict[tuple[int, str], Counter] = {}
        self._failures: dict[str, Counter] = {}
        self.known = model != UNKNOWN_MODEL  # requests for unknown models are only counted
        if self.known:
            self.batch_rows = metrics.batch_rows.labels(model)
            self.batch_requests = metrics.batch_requests.labels(model)
            self.run_seconds = metrics.run_seconds.labels(model)
            self.latency = metrics.latency.labels(model)
            self.depth = metrics.depth.labels(model)
            self.in_flight = metrics.in_flight.labels(model)

    def answered(self, status: int, seconds: float, reason: str | None, protocol: str = "http") -> None:
        counter = self._requests.get((status, protocol))
        if counter is None:
            counter = self._requests[status, protocol] = self._metrics.requests.labels(self.model, protocol, str(status))
        counter.inc()
        if reason is not None:
            failures = self._failures.get(reason)
            if failures is None:
                failures = self._failures[reason] = self._metrics.failures.labels(self.model, reason)
            failures.inc()
        if self.known:
            self.latency.observe(seconds)


class ServerMetrics:
    """Requests by model and status, failures by reason, batch sizes, queue depth, latencies."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("specgen_requests", "Inference requests answered, by model, protocol (http, grpc) and "
                                "HTTP status (gRPC codes as the HTTP status of the same outcome).",
                                ["model", "protocol", "status"], registry=r)
        self.failures = Counter("specgen_request_failures", "Inference requests not answered with 200, by model and "
                                "reason (not_found, invalid, too_large, timeout, overloaded, queue_full, "
                                "shutting_down, inference, internal, cancelled, deadline: a gRPC deadline or the "
                                "request's timeout parameter).",
                                ["model", "reason"], registry=r)
        self.batch_rows = Histogram("specgen_batch_size", "Rows (examples) per onnxruntime run.", ["model"],
                                    buckets=BATCH_BUCKETS, registry=r)
        self.batch_requests = Histogram("specgen_batch_requests", "Requests per onnxruntime run.", ["model"],
                                        buckets=BATCH_BUCKETS, registry=r)
        self.run_seconds = Histogram("specgen_inference_duration_seconds", "Seconds per onnxruntime run (one batch).",
                                     ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.latency = Histogram("specgen_request_duration_seconds", "Seconds from receiving an inference request "
                                 "to its response, by model.", ["model"], buckets=LATENCY_BUCKETS, registry=r)
        # With --workers N (multiprocess mode) the gauges are summed over the live workers; model_info is 1 where any
        # live worker serves that version.
        self.depth = Gauge("specgen_queue_depth", "Requests admitted and waiting to run, by model.", ["model"], registry=r,
                           multiprocess_mode="livesum")
        self.in_flight = Gauge("specgen_requests_in_flight", "Inference requests received and not yet answered.",
                               ["model"], registry=r, multiprocess_mode="livesum")
        self.info = Gauge("specgen_model_info", "Served models: version and onnxruntime provider (value 1).",
                          ["model", "version", "provider"], registry=r, multiprocess_mode="livemax")
        self.loads = Counter("specgen_model_loads", "Model versions loaded while serving (result=loaded), refused "
                             "(result=refused: failed to load, warm up, or match config.pbtxt) and unloaded.",
                             ["model", "result"], registry=r)
        self.connections = Gauge("specgen_connections", "Open HTTP connections.", registry=r, multiprocess_mode="livesum")
        self.connections_closed = Counter("specgen_connections_closed", "Connections the server closed to protect "
                                          "itself, by reason (header_timeout, header_too_large, send_timeout, evicted, "
                                          "refused).", ["reason"], registry=r)
        self.models: dict[str, ModelMetrics] = {UNKNOWN_MODEL: ModelMetrics(self, UNKNOWN_MODEL)}
        self._holders: dict[tuple[str, str, str], set[int]] = {}  # model_info's labels -> the loaded copies holding them

    def connection_closed(self, reason: str) -> None:
        self.connections_closed.labels(reason).inc()

    def model_loaded(self, model: str, version: int, provider: str, copy: object) -> None:
        """Create every series of a model, so /metrics lists it (at zero) before its first request.

        `copy` is the loaded object (registry.py's Version): a version loaded again under the same number (a replaced
        model.onnx, a config edit) is installed before the copy it replaces is retired, so both hold the same labels
        for a moment; the sample goes only when the last copy holding its labels is unloaded."""
        labels = (model, str(version), provider)
        self._holders.setdefault(labels, set()).add(id(copy))
        self.info.labels(*labels).set(1)
        if model not in self.models:
            self.models[model] = ModelMetrics(self, model)

    def model_unloaded(self, model: str, version: int, provider: str, copy: object) -> None:
        labels = (model, str(version), provider)
        holders = self._holders.get(labels, set())
        holders.discard(id(copy))
        if holders:  # another copy (the one that replaced it) still serves these labels
            return
        self._holders.pop(labels, None)
        try:
            self.info.labels(*labels).set(0)  # multiprocess mode: the value file outlives the series
            if not multiprocess_mode():  # there remove() cannot remove (prometheus_client's docs say so) and would
                self.info.remove(*labels)  # print a UserWarning, a line that is not JSON, to stderr: the 0 stands
        except KeyError:
            pass

    def load_result(self, model: str, result: str) -> None:
        self.loads.labels(model, result).inc()

    def model(self, name: str) -> ModelMetrics:
        return self.models.get(name) or self.models[UNKNOWN_MODEL]

    def queue_depth(self, model: str, depth: int) -> None:
        self.models[model].depth.set(depth)

    def observer(self) -> VersionObserver:
        return VersionObserver(self)

    def batch(self, model: str, requests: int, rows: int, seconds: float) -> None:
        series = self.models[model]
        series.batch_rows.observe(rows)
        series.batch_requests.observe(requests)
        series.run_seconds.observe(seconds)

    def render(self) -> bytes:
        folder = os.environ.get(MULTIPROC_ENV)
        if not folder:
            return generate_latest(self.registry)
        from prometheus_client import multiprocess

        merged = CollectorRegistry()  # every worker's series, read from the shared folder at each scrape
        multiprocess.MultiProcessCollector(merged, path=folder)
        with folder_lock(folder, fcntl.LOCK_SH):  # not while a dead worker's files are being folded
            return generate_latest(merged)

    def served_by_live_workers(self) -> dict[str, set[int]]:
        """--workers N: the models some live worker serves, and their versions (`specgen_model_info` at 1: the max
        over the live workers' gauge files; a dead worker's leave the folder before it is restarted,
        metrics_fold.py); none with one process. A restarted worker loads or compares what it serves by them
        (process.py `_restore`)."""
        folder = os.environ.get(MULTIPROC_ENV)
        if not folder:
            return {}
        from prometheus_client import multiprocess

        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged, path=folder)
        with folder_lock(folder, fcntl.LOCK_SH):
            families = list(merged.collect())
        served: dict[str, set[int]] = {}
        for sample in (s for family in families if family.name == "specgen_model_info" for s in family.samples):
            if sample.value == 1:
                served.setdefault(sample.labels["model"], set()).add(int(sample.labels["version"]))
        return served


class VersionObserver:
    """The batch observer of one version's batcher: its queue depth added into its model's gauge, runs counted."""

    def __init__(self, metrics: ServerMetrics):
        self.metrics, self.depth = metrics, 0

    def queue_depth(self, model: str, depth: int) -> None:
        self.metrics.models[model].depth.inc(depth - self.depth)
        self.depth = depth

    def batch(self, model: str, requests: int, rows: int, seconds: float) -> None:
        self.metrics.batch(model, requests, rows, seconds)


def multiprocess_mode() -> bool:
    """Whether prometheus_client writes this process's values to files (`--workers N`), as it decides it."""
    return MULTIPROC_ENV in os.environ or MULTIPROC_ENV.lower() in os.environ


def remove_stale_metrics(folder: Path) -> list[Path]:
    """Remove the metrics folders in `folder` whose parent process is gone (killed before it could remove them)."""
    removed = []
    for path in folder.glob(f"{METRICS_PREFIX}*-*"):
        pid = path.name.removeprefix(METRICS_PREFIX).split("-", 1)[0]
        if pid.isdigit() and path.is_dir() and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def remove_orphaned_metrics() -> None:
    """The parent died without removing the metrics folder: remove this worker's files, and the folder once no other
    live process has files in it (prometheus_client names them <kind>_<pid>.db), so the last worker out removes it."""
    folder = os.environ.get(MULTIPROC_ENV)
    if not folder:
        return
    for path in Path(folder).glob("*.db"):
        pid = path.stem.rsplit("_", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid() or not pid_alive(int(pid)):
            path.unlink(missing_ok=True)
    if not any(Path(folder).glob("*.db")):  # and what a fold in the killed parent may have left
        for path in [Path(folder, LOCK_NAME), *Path(folder).glob("*.partial"), *Path(folder).glob("*.folded")]:
            path.unlink(missing_ok=True)
    try:
        os.rmdir(folder)
    except OSError:  # another worker still has files there: the last one out removes it
        pass
