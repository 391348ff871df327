"""`specgen serve --workers N`: N server processes on the same ports, supervised by the parent.

One Python process is bounded by its event loop and the GIL (HTTP parsing, JSON, the batcher's
bookkeeping), so past a few thousand requests a second the way up is more processes:

- HTTP and gRPC: the parent binds both ports once and the workers share them (ports.py).
- Each worker loads its own sessions, batchers and statistics; onnxruntime's intra-op threads are
  split between them (`--threads`, or the CPUs this process may use, divided by N, at least 1).
- Metrics: prometheus_client's multiprocess mode (a fresh folder per run, removed at exit); /metrics
  of any worker sums the counters and histograms of all, live and dead, and the gauges of the live. A dead
  worker's counter and histogram files are folded into one per kind (metrics_fold.py `fold_dead`).
  The folder is named by the parent's pid: should the parent be killed (kill -9), the last worker to
  exit removes it, and a later `--workers` run removes any whose parent is gone (`stale_metrics`).
- Workers start one after another, each once the previous is ready: a repository that cannot be served
  is then reported once, by the first, and the parent exits with its status.
- SIGTERM / SIGINT to the parent: SIGTERM to every worker (each drains: in-flight requests answered,
  batchers emptied), exit 0 when every worker stopped cleanly (one still starting has nothing to drain: its
  death by that SIGTERM is clean). A worker already dead then (crashed in the poll the signal came in, or
  waiting to be restarted) is no clean stop: logged (worker_exited, if watch() had not) and counted. The
  handler only notes the signal and the main loop forwards it, so no restart follows it. Workers run in
  their own process group, so a terminal's Ctrl-C reaches only the parent, and they get SIGTERM should the
  parent die.
- A worker that dies otherwise is restarted (at once, then after 1, 2, 4 ... 30 s while it keeps dying
  within 10 s of starting); the others keep serving meanwhile. A restarted worker loads what loads (process.py
  `serve`: the start-up rule is the first start's), and says in one JSON `start_failed` line why it cannot start.
- A worker that freezes (a deadlock, SIGSTOP) would keep its share of new gRPC connections (SO_REUSEPORT hashes them
  to every bound socket) and hang them to their deadlines. So, as gunicorn's worker timeout: a serving worker writes
  a heartbeat byte every second from its event loop on its ready pipe (server.py `on_tick`), and one silent for
  `worker_timeout` (30 s; one still starting: READY_SECONDS) is killed (SIGKILL: SIGTERM would wait on the frozen
  loop), logged once (`worker_frozen`), and restarted as any worker that dies.

`--model-control explicit` needs one worker: a load or unload request would reach only one of them.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

from specgen.serve.metrics import METRICS_PREFIX, remove_stale_metrics
from specgen.serve.metrics_fold import fold_dead
from specgen.serve.options import EXPLICIT_NEEDS_ONE_WORKER, ServeOptions
from specgen.serve.ports import WorkersError, listen, reserve
from specgen.serve.process import ServerSettings, serve

log = logging.getLogger("specgen.serve")
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
READY_SECONDS = 600.0  # a worker that has not loaded its models by then is taken as failed
STABLE_SECONDS = 10.0  # a worker that lived this long before dying is restarted at once
MAX_BACKOFF = 30.0
POLL_SECONDS = 0.05
FOLD_RETRY_SECONDS = 1.0  # a dead worker's metrics fold given up (the scrapes kept the lock) is tried again after


@dataclass
class Worker:
    index: int
    process: subprocess.Popen[bytes]
    ready_fd: int
    started: float = field(default_factory=time.monotonic)
    ready: bool = False
    buried: bool = False  # its death seen, logged, and its metrics folded (or left for a later pass)
    beat: float = field(default_factory=time.monotonic)  # when its pipe last said something (ready, a heartbeat)
    killed: bool = False  # killed as frozen: its exit is awaited, not killed again


def worker_threads(threads: int, workers: int) -> int:
    """onnxruntime intra-op threads per worker: `threads` (0: the CPUs this process may use) split N ways, at least 1."""
    total = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    return max(1, total // workers)


class Supervisor:
    """Starts, watches, restarts and stops the worker processes of one `specgen serve --workers N`."""

    def __init__(self, settings: ServerSettings, workers: int):

        options = settings.options or ServeOptions()
        if workers > 1 and options.model_control == "explicit":
            raise WorkersError(EXPLICIT_NEEDS_ONE_WORKER)
        self.count = workers
        self.http = listen(settings.host, settings.port)
        self.grpc: socket.socket | None = None
        if options.grpc_port is not None:
            self.grpc = reserve(options.grpc_host, options.grpc_port)
            options = replace(options, grpc_port=self.grpc.getsockname()[1], grpc_reuse_port=True)
        self.options = options
        self.settings = replace(settings, options=options, threads=worker_threads(settings.threads, workers))
        remove_stale_metrics(Path(tempfile.gettempdir()))
        self.metrics_dir = tempfile.mkdtemp(prefix=f"{METRICS_PREFIX}{os.getpid()}-")
        self.workers: dict[int, Worker] = {}
        self.backoff: dict[int, float] = {}
        self.stopping = 0
        self.unfolded: list[int] = []  # dead workers' pids whose metrics files wait for a fold (metrics_fold.py)
        self.fold_at = 0.0

    @property
    def http_port(self) -> int:
        return int(self.http.getsockname()[1])

    def _signal(self, signum: int, frame: FrameType | None) -> None:
        """Note the signal, for `stop()` to forward (forwarded here, mid-pass, `watch()` saw the worker it had signalled
        die and logged a restart); a second signal is forwarded at once."""
        if self.stopping:
            self._forward()
        self.stopping = signum

    def signalled(self) -> bool:
        """Whether a signal asked the parent to stop (a call: a signal handler may set it at any point of a pass)."""
        return self.stopping != 0

    def _forward(self) -> list[Worker]:
        live = [w for w in self.workers.values() if w.process.poll() is None]
        for worker in live:
            worker.process.send_signal(signal.SIGTERM)
        return live

    def spawn(self, index: int, restart: bool = False) -> Worker:
        """Start worker `index`; `restart`: it replaces one that died, and loads what loads (process.py `serve`)."""
        ready_r, ready_w = os.pipe()
        env = {**os.environ, MULTIPROC_ENV: self.metrics_dir}
        child = replace(self.settings, listen_fd=self.http.fileno(), ready_fd=ready_w, worker=index, restart=restart)
        process = subprocess.Popen(
            [sys.executable, "-m", "specgen.serve.worker_process", str(os.getpid())], stdin=subprocess.PIPE, env=env,
            pass_fds=(self.http.fileno(), ready_w), process_group=0)
        os.close(ready_w)
        assert process.stdin is not None
        try:
            process.stdin.write(pickle.dumps(child))
            process.stdin.close()
        except BrokenPipeError:  # it died at once: watched, and restarted, like any worker that dies
            pass
        worker = self.workers[index] = Worker(index, process, ready_r)
        return worker

    def wait_ready(self, worker: Worker) -> bool:
        """Block until `worker` has bound its ports and warmed its models (True) or has exited (False)."""
        deadline = time.monotonic() + READY_SECONDS
        while not self.stopping and time.monotonic() < deadline:
            readable, _, _ = select.select([worker.ready_fd], [], [], POLL_SECONDS * 4)
            if readable:
                worker.ready = os.read(worker.ready_fd, 1) == b"1"
                worker.beat = time.monotonic()
                return worker.ready
        return False

    def start(self) -> int | None:
        """Start the workers one after another; None when all are ready, else the exit status to return."""
        for index in range(self.count):
            worker = self.spawn(index)
            if not self.wait_ready(worker):
                if self.stopping:
                    return None
                status = worker.process.poll()  # None: not ready in READY_SECONDS
                if status is not None:  # it has printed why, once: no worker_exited / worker_unclean lines after it
                    os.close(self.workers.pop(index).ready_fd)
                self.stop()
                return status if status and status > 0 else 1  # the worker has printed why
        http = f"{self.settings.host}:{self.http_port}"
        fields: dict[str, Any] = {"event": "workers", "workers": self.count, "threads": self.settings.threads,
                                  "http": http, "pids": [w.process.pid for w in self.workers.values()]}
        if self.grpc is not None:
            fields["grpc"] = f"{self.options.grpc_host}:{self.grpc.getsockname()[1]}"
        log.info("workers started", extra={"fields": fields})
        return None

    def watch(self) -> None:
        """Restart workers that die, until a signal asks the parent to stop (checked before every decision)."""
        restart_at: dict[int, float] = {}
        while not self.stopping:
            time.sleep(POLL_SECONDS)
            now = time.monotonic()
            self._note_ready()
            self._kill_frozen(now)
            for index, worker in list(self.workers.items()):
                if self.signalled():
                    return
                if index in restart_at or worker.process.poll() is None:
                    continue
                self._buried(worker)
                lived = now - worker.started
                delay = 0.0 if lived >= STABLE_SECONDS else min(max(self.backoff.get(index, 0.0) * 2, 1.0), MAX_BACKOFF)
                self.backoff[index] = delay
                restart_at[index] = now + delay
                _log_exit(worker, delay)
            for index, when in list(restart_at.items()):
                if self.signalled():
                    return
                if now >= when:
                    del restart_at[index]
                    new = self.spawn(index, restart=True)
                    log.info("worker restarted", extra={"fields": {"event": "worker_restarted", "worker": index,
                                                                   "pid": new.process.pid}})
            if self.unfolded and now >= self.fold_at:  # one try a pass at most: the loop stays a poll long
                self.fold_at = now + FOLD_RETRY_SECONDS
                if fold_dead(self.unfolded[0], self.metrics_dir, self.signalled):
                    self.unfolded.pop(0)

    def _note_ready(self) -> None:
        """Log restarted workers that have become ready (without waiting: the others keep being watched)."""
        for worker in self._became_ready():
            log.info("worker ready", extra={"fields": {"event": "worker_ready", "worker": worker.index,
                                                       "pid": worker.process.pid}})

    def _became_ready(self) -> list[Worker]:
        """The workers that reported ready since last asked, a dead one not yet buried included (stop() judges it by
        whether it had become ready); every pipe read without waiting, its heartbeats noted (`beat`)."""
        watched = [w for w in self.workers.values() if not w.buried]
        readable, _, _ = select.select([w.ready_fd for w in watched], [], [], 0) if watched else ([], [], [])
        ready = []
        now = time.monotonic()
        for worker in (w for w in watched if w.ready_fd in readable):
            said = os.read(worker.ready_fd, 4096)  # "1" once, then "." a second: one read takes what has piled up
            if said:
                worker.beat = now
            if said[:1] == b"1" and not worker.ready:
                worker.ready = True
                ready.append(worker)
        return ready

    def _kill_frozen(self, now: float) -> None:
        """SIGKILL a live worker whose pipe has been silent past its limit (module docstring); its death is then
        watched, logged and restarted like any other."""
        for worker in self.workers.values():
            limit = self.settings.worker_timeout if worker.ready else READY_SECONDS
            if worker.buried or worker.killed or now - worker.beat <= limit or worker.process.poll() is not None:
                continue
            worker.killed = True
            log.warning("worker frozen; killing it", extra={"fields": {
                "event": "worker_frozen", "worker": worker.index, "pid": worker.process.pid,
                "silent_s": round(now - worker.beat, 1), "limit_s": limit}})
            worker.process.kill()

    def _buried(self, worker: Worker) -> None:
        """Its live gauges leave the sums, its counters and histograms stay in them: folded now, or at a later pass when
        the scrapes hold the folder's lock (a signal stops the wait at once: the folder goes at the stop)."""
        worker.buried = True
        os.close(worker.ready_fd)
        if not fold_dead(worker.process.pid, self.metrics_dir, self.signalled):
            self.unfolded.append(worker.process.pid)

    def stop(self, timeout: float | None = None) -> bool:
        """SIGTERM to every worker, wait for them (SIGKILL after `timeout`); True when all stopped cleanly."""
        self.http.close()  # the workers hold their copies until they have drained
        if self.grpc is not None:
            self.grpc.close()
        self._became_ready()  # which of them serve (and so have requests to drain), before they are told to stop
        live = self._forward()
        for worker in self.workers.values():
            if worker not in live and not worker.buried:  # died in the poll the signal came in: watch() left it
                _log_exit(worker, None)
                self._buried(worker)
        deadline = None if timeout is None else time.monotonic() + timeout
        clean = True
        for worker in self.workers.values():  # the dead ones too: one crashed, or waiting to restart, is no clean stop
            status = worker.process.returncode
            if worker in live:
                try:
                    status = worker.process.wait(None if deadline is None else max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    worker.process.kill()
                    worker.process.wait()
                    status = None
            # one not yet serving (importing, loading) dies of the SIGTERM with nothing to drain: clean
            if status == 0 or (status == -signal.SIGTERM and not worker.ready):
                continue
            clean = False
            log.warning("worker did not stop cleanly", extra={"fields": {
                "event": "worker_unclean", "worker": worker.index, "pid": worker.process.pid,
                "status": "killed after the timeout" if status is None else _status(status)}})
        shutil.rmtree(self.metrics_dir, ignore_errors=True)
        return clean


def _log_exit(worker: Worker, delay: float | None) -> None:
    """worker_exited: its status, and when it restarts (None: not, the parent is stopping)."""
    log.warning("worker exited; restarting it" if delay is not None else "worker exited", extra={"fields": {
        "event": "worker_exited", "worker": worker.index, "pid": worker.process.pid,
        "status": _status(worker.process.returncode), "restart_in_s": delay}})


def _status(code: int | None) -> str:
    if code is not None and code < 0:
        return signal.Signals(-code).name
    return str(code)


def run_workers(settings: ServerSettings, workers: int) -> int:
    """Serve `settings` with `workers` processes until SIGTERM / SIGINT; the exit status (0: every worker drained)."""
    if workers <= 1:
        return serve(settings)
    from specgen.serve import logs

    logs.configure(settings.log_level)
    try:
        supervisor = Supervisor(settings, workers)
    except WorkersError as exc:
        print(f"specgen serve: {exc}", file=sys.stderr)
        return 1
    previous = {sig: signal.signal(sig, supervisor._signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        status = supervisor.start()
        if status is not None:
            return status
        supervisor.watch()
        grace = settings.graceful_timeout
        clean = supervisor.stop(None if grace is None else grace + 15.0)
        log.info("stopped", extra={"fields": {"event": "stopped", "signal": signal.Signals(supervisor.stopping).name,
                                              "workers": workers}})
        return 0 if clean else 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
