"""What the soak check of `specgen serve` found, fixed: a SIGTERM while a worker restarts, a dead worker's metrics
files, prometheus_client's warning on unload, and a 413 lost to the reset of an oversized body still being sent.

In process and cheap: the supervisor's own methods with real worker processes (killed while they import), real
prometheus_client value files, the real server in a thread.
"""

from __future__ import annotations

import fcntl
import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("onnxruntime")
uvicorn = pytest.importorskip("uvicorn")

from prometheus_client import values  # noqa: E402
from serve_helpers import Served, events, metric, model_bytes  # noqa: E402

from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve import closing, metrics_fold, workers  # noqa: E402
from specgen.serve.metrics import MULTIPROC_ENV, ServerMetrics  # noqa: E402
from specgen.serve.metrics_fold import fold_dead, folder_lock  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402
from specgen.serve.options import ServeOptions  # noqa: E402
from specgen.serve.process import ServerSettings, _signals_noted  # noqa: E402
from specgen.serve.workers import Supervisor, Worker  # noqa: E402

CNN = "digits_cnn"


@pytest.fixture
def supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Supervisor]:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its metrics folder, and the stale ones it removes
    sup = Supervisor(ServerSettings(tmp_path / "repo", port=0), 2)
    yield sup
    for worker in sup.workers.values():
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()
    sup.http.close()


# Finding 1: SIGTERM while a worker is starting


def test_a_sigterm_while_a_worker_starts_is_a_clean_stop_with_no_restart_logged(
        supervisor: Supervisor, caplog: pytest.LogCaptureFixture) -> None:
    """The restarted worker is still importing when the parent gets SIGTERM. It used to be forwarded at once, inside a
    pass of watch(), which then saw the worker die and logged `worker_exited ... restarting it`; or stop() saw it die
    of the signal and the parent exited 1."""
    previous = signal.signal(signal.SIGTERM, supervisor._signal)
    try:
        worker = supervisor.spawn(0)
        worker.started -= 60  # it lived long: a death is restarted at once
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)).start()
        caplog.set_level(logging.INFO, "specgen.serve")
        supervisor.watch()
        assert supervisor.stopping == signal.SIGTERM and worker.process.poll() is None  # not signalled by the handler
        assert supervisor.stop(10) is True
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert worker.process.returncode == -signal.SIGTERM  # killed while importing: nothing to drain
    assert [r.getMessage() for r in caplog.records] == []  # no worker_exited, no restart, no unclean worker
    assert not Path(supervisor.metrics_dir).exists()


def test_a_serving_worker_killed_by_the_sigterm_is_reported(supervisor: Supervisor,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    worker = supervisor.spawn(1)
    worker.ready = True  # as if it had reported ready: it must drain, so dying of the signal is not clean
    caplog.set_level(logging.INFO, "specgen.serve")
    assert supervisor.stop(10) is False
    assert events(caplog.records, "worker_unclean") == [
        {"event": "worker_unclean", "worker": 1, "pid": worker.process.pid, "status": "SIGTERM"}]


def test_a_signal_before_uvicorn_handles_signals_still_stops_the_server() -> None:
    """A worker's own handlers, in place before uvicorn's: a SIGTERM there used to be noted and forgotten, and the
    worker served on until the parent killed it."""
    server = uvicorn.Server(uvicorn.Config(app=None))
    with _signals_noted(server) as received:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs between bytecodes of this thread
    assert received == [signal.SIGTERM] and server.should_exit is True


# Findings 3 and 2 (the warning): a dead worker's metrics files, unloading in multiprocess mode


def worker_values(monkeypatch: pytest.MonkeyPatch, pid: int, requests: int) -> ServerMetrics:
    """The metrics of a worker whose pid is `pid` (prometheus_client's own way of testing multiprocess mode)."""
    monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue(lambda: pid))
    metrics = ServerMetrics()
    metrics.model_loaded(CNN, 1, "CPUExecutionProvider", object())
    for _ in range(requests):
        metrics.model(CNN).answered(200, 0.25, None)
        metrics.batch(CNN, 1, 2, 0.5)
    metrics.connections.inc()
    return metrics


def test_dead_workers_metrics_files_are_folded_and_the_sums_kept(
        supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = supervisor.metrics_dir
    monkeypatch.setenv(MULTIPROC_ENV, folder)
    dead = [subprocess.Popen([sys.executable, "-c", ""]) for _ in range(3)]  # real pids, real exits
    for process in dead:
        process.wait()
    live = worker_values(monkeypatch, os.getpid(), 1)
    for n, process in enumerate(dead):
        worker_values(monkeypatch, process.pid, 10 ** n)

    def sums() -> list[float]:
        text = live.render().decode()
        return [metric(text, "specgen_requests_total", model=CNN, protocol="http", status="200"),
                metric(text, "specgen_request_duration_seconds_count", model=CNN),
                metric(text, "specgen_request_duration_seconds_sum", model=CNN),
                metric(text, "specgen_batch_size_bucket", model=CNN, le="2.0"),
                metric(text, "specgen_connections")]

    assert sums() == [112, 112, 28.0, 112, 4]
    for process in dead:
        r, w = os.pipe()
        os.close(w)
        supervisor._buried(Worker(0, process, r))  # type: ignore[arg-type]
        assert sums()[:4] == [112, 112, 28.0, 112]  # counters and histograms never go back
    assert sums()[4] == 1  # the dead workers' connections left the live gauge
    assert sorted(os.listdir(folder)) == sorted(
        ["counter_dead.db", "histogram_dead.db", "fold.lock"]
        + [f"{kind}_{os.getpid()}.db" for kind in ("counter", "histogram", "gauge_livesum", "gauge_livemax")])


def test_unloading_a_version_in_multiprocess_mode_prints_no_warning(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    metrics = worker_values(monkeypatch, os.getpid(), 0)
    version = object()
    metrics.model_loaded(CNN, 2, "CPUExecutionProvider", version)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # prometheus_client's "Removal of labels has not been implemented" UserWarning
        metrics.model_unloaded(CNN, 2, "CPUExecutionProvider", version)
    text = metrics.render().decode()
    assert metric(text, "specgen_model_info", model=CNN, version="2") == 0
    assert metric(text, "specgen_model_info", model=CNN, version="1") == 1


# Finding 5: a 413 for a body the client sends in full before reading


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("soak_repo")
    write_repository(repo, *model_bytes(CNN))
    with Served(load_repository(repo, provider="cpu"), ServeOptions()) as served:
        yield served


def post(address: str, body: Any, **headers: str) -> tuple[int, dict[str, Any], bool]:
    host, port = address.split(":")
    client = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        client.request("POST", f"/v2/models/{CNN}/infer", body, headers, encode_chunked=not isinstance(body, bytes))
        answer = client.getresponse()
        return answer.status, json.loads(answer.read()), answer.will_close
    finally:
        client.close()


def test_an_oversized_body_sent_in_full_gets_its_413(served: Served) -> None:
    """http.client (and requests, over it) writes the whole body before reading: the server's close with the body
    unread used to make the kernel reset the connection, and the client saw ConnectionResetError, never the 413."""
    huge = b'{"inputs": [{"name": "image", "data": [' + b"0.0, " * 3_200_000 + b"0.0]}]}"  # 16 MB, above 458,752
    status, answer, closes = post(served.http, huge, **{"Content-Type": "application/json"})
    assert (status, closes) == (413, True)
    assert answer["error"] == f"the request body has {len(huge)} bytes; this model accepts at most 458752 (its " \
                              "largest batch)"
    chunks = (huge[i:i + (1 << 16)] for i in range(0, len(huge), 1 << 16))  # chunked: refused at the bound
    assert post(served.http, chunks)[0] == 413
    assert post(served.http, json.dumps({"inputs": []}).encode())[0] == 400  # the server serves on


def test_a_refused_body_that_stops_coming_is_closed_after_the_linger(served: Served,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(closing, "LINGER_SECONDS", 0.2)
    host, port = served.http.split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(f"POST /v2/models/{CNN}/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 60000000\r\n\r\n".encode()
                     + b"0" * 100_000)  # then nothing more, the connection left open
        sock.settimeout(5)
        data = b""
        while chunk := sock.recv(65536):  # the answer, then FIN at once
            data += chunk
        assert data.startswith(b"HTTP/1.1 413 ")
        gauge = served.service.metrics.connections
        deadline = time.monotonic() + 3
        while gauge._value.get() > 0:  # the server's side closed after 0.2 s, not when the client leaves
            assert time.monotonic() < deadline, "the lingering connection was never closed"
            time.sleep(0.05)


# Review 2, findings 1 and 2: the fold never holds up the supervisor, and never kills it


def scrape_lock(folder: str, seconds: float) -> Callable[[], None]:
    """A scrape holding the folder's shared lock until the function returned is called, `seconds` at most (in a
    thread: flock is per open file, so it excludes this process's own exclusive try as it would another process's).
    The function returns once the lock is free."""
    ready, release = threading.Event(), threading.Event()

    def hold() -> None:
        with folder_lock(folder, fcntl.LOCK_SH):
            ready.set()
            release.wait(seconds)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert ready.wait(5), "the scrape did not take the lock"

    def done() -> None:
        release.set()
        thread.join(10)

    return done


def signal_when(supervisor: Supervisor, condition: Callable[[], bool]) -> list[float]:
    """SIGTERM to the supervisor (what its handler does) once `condition()` holds, 10 s at most; the list returned gets
    the time it was sent. A timer would race watch()'s passes on a loaded machine."""
    sent: list[float] = []

    def send() -> None:
        deadline = time.monotonic() + 10
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.005)
        sent.append(time.monotonic())
        supervisor._signal(signal.SIGTERM, None)

    threading.Thread(target=send, daemon=True).start()
    return sent


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_a_fold_gives_way_to_scrapes_and_the_files_stay_counted_until_it_is_done(
        supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch) -> None:
    """Overlapping scrapes (flock favours no waiting writer) used to keep the parent in flock(LOCK_EX) for as long as
    they came, deaf to SIGTERM and restarting no worker."""
    folder = supervisor.metrics_dir
    monkeypatch.setenv(MULTIPROC_ENV, folder)
    pid = dead_pid()
    live = worker_values(monkeypatch, os.getpid(), 1)
    worker_values(monkeypatch, pid, 10)
    total = metric(live.render().decode(), "specgen_requests_total", model=CNN, protocol="http", status="200")
    scrape_ends = scrape_lock(folder, 5.0)
    start = time.monotonic()
    assert fold_dead(pid, folder) is False  # given up after LOCK_WAIT_SECONDS, its files untouched
    # the old fold waited the scrape's 5 s out; 2 s leaves a loaded machine 10x LOCK_WAIT_SECONDS (0.2 s)
    assert time.monotonic() - start < 2
    assert {f"counter_{pid}.db", f"histogram_{pid}.db"} <= set(os.listdir(folder))
    scrape_ends()
    assert metric(live.render().decode(), "specgen_requests_total", model=CNN, protocol="http", status="200") == total
    supervisor.unfolded = [pid]
    signal_when(supervisor, lambda: not supervisor.unfolded)  # stops watch() once a pass has folded it (or in 10 s)
    supervisor.watch()  # its first pass folds it: the lock is free now
    assert supervisor.unfolded == [] and f"counter_{pid}.db" not in os.listdir(folder)
    assert metric(live.render().decode(), "specgen_requests_total", model=CNN, protocol="http", status="200") == total


def test_a_signal_during_a_fold_is_acted_on_within_a_poll(supervisor: Supervisor,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_fold, "LOCK_WAIT_SECONDS", 30.0)  # only the signal can end the wait
    folding = threading.Event()

    def fold(pid: int, folder: str, give_up: Callable[[], bool], wait: float | None = None) -> bool:
        def asked() -> bool:  # between tries for the lock: the fold is waiting on the scrape
            folding.set()
            return give_up()
        return fold_dead(pid, folder, asked, wait)

    monkeypatch.setattr(workers, "fold_dead", fold)
    worker = supervisor.spawn(0)
    worker.process.kill()
    worker.process.wait()
    scrape_ends = scrape_lock(supervisor.metrics_dir, 5.0)
    sent = signal_when(supervisor, folding.is_set)  # once watch()'s first pass waits in the dead worker's fold
    supervisor.watch()
    # the old fold waited the scrape's 5 s out; the signal is seen within a lock retry (5 ms): 2 s leaves a loaded
    # machine room
    assert time.monotonic() - sent[0] < 2
    scrape_ends()
    assert supervisor.unfolded == [worker.process.pid] and supervisor.workers[0] is worker  # no restart after it


def test_a_damaged_or_unwritable_fold_is_one_warning_and_the_supervisor_serves_on(
        supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    folder = Path(supervisor.metrics_dir)
    monkeypatch.setenv(MULTIPROC_ENV, str(folder))
    live = worker_values(monkeypatch, os.getpid(), 1)
    cut, full = dead_pid(), dead_pid()
    worker_values(monkeypatch, cut, 10)
    worker_values(monkeypatch, full, 100)
    counter = folder / f"counter_{cut}.db"
    counter.write_bytes(counter.read_bytes()[:100])  # cut short: its first value ends past the file's end
    caplog.set_level(logging.WARNING, "specgen.serve")
    assert fold_dead(cut, str(folder)) is True
    (folder / "histogram_dead.partial").mkdir()  # the next fold's write fails (as ENOSPC would)
    assert fold_dead(full, str(folder)) is True  # not retried: its files stay, counted as prometheus_client's own
    assert [(e["pid"], e["file"], e["error"].split(":")[0], e["files"]) for e in events(
        caplog.records, "metrics_fold_failed")] == [
        (cut, f"counter_{cut}.db", "error", "removed: prometheus_client's collector cannot read it either"),
        (full, "histogram", "IsADirectoryError", "left as they are, still counted")]
    assert sorted(p.name for p in folder.glob(f"*_{full}.db")) == [f"histogram_{full}.db"]
    text = live.render().decode()  # scrapes work: the damaged file is gone; the cut worker's histogram was folded
    assert metric(text, "specgen_requests_total", model=CNN, protocol="http", status="200") == 101
    assert metric(text, "specgen_request_duration_seconds_count", model=CNN) == 111


# Review 2, finding 3: a worker dead before the stop reached it


def test_a_worker_dead_when_the_stop_begins_is_logged_and_unclean(supervisor: Supervisor,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """It died in the poll the signal came in (watch() returned before looking at it), or it waited to be restarted:
    the parent used to exit 0 with no line about it."""
    unseen, waiting = supervisor.spawn(0), supervisor.spawn(1)
    for worker in (unseen, waiting):
        worker.process.kill()
        worker.process.wait()
    supervisor._buried(waiting)  # as watch() does (it logged its worker_exited then)
    caplog.set_level(logging.INFO, "specgen.serve")
    assert supervisor.stop(10) is False
    assert events(caplog.records, "worker_exited") == [{"event": "worker_exited", "worker": 0, "pid": unseen.process.pid,
                                                        "status": "SIGKILL", "restart_in_s": None}]
    assert [(e["worker"], e["status"]) for e in events(caplog.records, "worker_unclean")] == [
        (0, "SIGKILL"), (1, "SIGKILL")]


# Review 2, finding 4: a lingering connection whose client reads nothing


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One connection at most; accepted sockets get a small send buffer (inherited from the listener), so that a
    client that reads nothing fills the kernel's buffers within a few answers."""
    repo = tmp_path_factory.mktemp("crowded_repo")
    write_repository(repo, *model_bytes(CNN))
    with Served(load_repository(repo, provider="cpu"), ServeOptions(max_connections=1, send_timeout=0.5)) as served:
        served.server.servers[0].sockets[0].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        yield served


def unread_answers(served: Served, last: bytes) -> socket.socket:
    """Pipelined /metrics answers (~7 KB each) past what the kernel holds, then `last`: its answer waits in the
    server's write buffer (below the high-water mark: writes not paused); nothing is ever read."""
    host, port = served.http.split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 6 + last)
    return sock


def stuck_client(served: Served) -> socket.socket:
    """unread_answers, the last a body too large: its 413 is written, then the linger begins."""
    refused = served.service.metrics.failures.labels(CNN, "too_large")
    before = refused._value.get()
    sock = unread_answers(served, f"POST /v2/models/{CNN}/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 60000000"
                                  "\r\n\r\n".encode() + b"0" * 1000)
    deadline = time.monotonic() + 3
    while refused._value.get() == before:
        assert time.monotonic() < deadline, "the 413 was never answered"
        time.sleep(0.02)
    return sock


def open_connections(served: Served, count: int, within: float) -> None:
    gauge, deadline = served.service.metrics.connections, time.monotonic() + within
    while gauge._value.get() != count:
        assert time.monotonic() < deadline, f"{gauge._value.get()} connections open, not {count}"
        time.sleep(0.02)


def test_a_lingering_client_that_reads_nothing_loses_its_slot_when_the_linger_ends(
        crowded: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """The linger's end used close(), which waits for ever to flush an answer the client never reads."""
    monkeypatch.setattr(closing, "LINGER_SECONDS", 0.3)
    with stuck_client(crowded):
        open_connections(crowded, 0, within=1.5)


def test_an_eviction_takes_a_lingering_connection(crowded: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(closing, "LINGER_SECONDS", 30.0)
    evicted = crowded.service.metrics.connections_closed.labels("evicted")
    before = evicted._value.get()
    host, port = crowded.http.split(":")
    with stuck_client(crowded):
        client = http.client.HTTPConnection(host, int(port), timeout=5)
        client.request("GET", "/v2/health/ready")
        assert client.getresponse().status == 200
        client.close()
        open_connections(crowded, 0, within=1.5)  # the lingering one went at once, aborted, not 30 s later
    assert evicted._value.get() == before + 1


def test_a_close_with_answers_unread_is_aborted_after_send_timeout(crowded: Served) -> None:
    """`Connection: close` used close(), which waits for ever to flush answers the client never reads; writes were not
    paused (below the high-water mark), so no send timer ran either."""
    timeouts = crowded.service.metrics.connections_closed.labels("send_timeout")
    before = timeouts._value.get()
    with unread_answers(crowded, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"):
        open_connections(crowded, 1, within=1.0)
        open_connections(crowded, 0, within=2.0)
    assert timeouts._value.get() == before + 1
