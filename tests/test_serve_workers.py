"""`specgen serve --workers N`: several processes on the same HTTP and gRPC ports, with real clients (tritonclient).

One worker killed with SIGKILL: the other answers every request meanwhile and the parent starts a new one;
/metrics sums all workers (the dead one's counters included); SIGTERM to the parent drains and stops every worker.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
th = pytest.importorskip("tritonclient.http")
tg = pytest.importorskip("tritonclient.grpc")
httpx = pytest.importorskip("httpx")

from serve_helpers import metric, model_bytes  # noqa: E402

from specgen.runtime.triton import write_repository  # noqa: E402

CNN = "digits_cnn"


class Log:
    """The JSON lines of a process's stderr, read by a thread; `wait(event)` returns the next line of that event."""

    def __init__(self, stream: Any):
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.all: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Any) -> None:
        for raw in stream:
            line = json.loads(raw)  # every line is JSON: no traceback, no stray print
            self.all.append(line)
            self.lines.put(line)

    def wait(self, event: str, seconds: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while True:
            line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            if line.get("event") == event:
                return line


def serve(repo: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "specgen", "serve", str(repo), "--provider", "cpu", "--port", "0",
                             *args], stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def infer_http(url: str, x: np.ndarray) -> np.ndarray:
    client = th.InferenceServerClient(url)  # a new client: a new connection, accepted by whichever worker is free
    try:
        tensor = th.InferInput("image", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=True)
        return client.infer(CNN, [tensor]).as_numpy("logits")
    finally:
        client.close()


def infer_grpc(url: str, x: np.ndarray) -> np.ndarray:
    client = tg.InferenceServerClient(url)
    try:
        tensor = tg.InferInput("image", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        return client.infer(CNN, [tensor]).as_numpy("logits")
    finally:
        client.close()


def load(http: str, grpc: str, n: int) -> None:
    """`n` requests over each protocol, 4 at a time, every one answered with logits of the right shape."""
    x = np.random.default_rng(0).random((1, 8, 8, 1), dtype=np.float32)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda k: infer_http(http, x) if k % 2 else infer_grpc(grpc, x), range(2 * n)))
    assert all(r.shape == (1, 10) for r in results)


def test_workers_share_the_ports_survive_a_kill_and_drain(tmp_path: Path) -> None:
    write_repository(tmp_path, *model_bytes(CNN))
    process = serve(tmp_path, "--grpc-port", "0", "--workers", "2")
    try:
        log = Log(process.stderr)
        started = log.wait("workers")
        http, grpc, pids = started["http"], started["grpc"], started["pids"]
        assert started["workers"] == 2 and started["threads"] >= 1 and len(set(pids)) == 2

        load(http, grpc, 10)
        os.kill(pids[0], signal.SIGKILL)
        exited = log.wait("worker_exited")  # gRPC's SO_REUSEPORT: connections queued on the dying socket are reset
        assert (exited["pid"], exited["status"]) == (pids[0], "SIGKILL")
        load(http, grpc, 10)  # the other worker answers all of these, over both protocols, while the first restarts
        restarted = log.wait("worker_ready")["pid"]
        os.kill(pids[1], signal.SIGKILL)
        log.wait("worker_exited")
        load(http, grpc, 10)  # only the restarted worker is left to answer
        log.wait("worker_ready")

        text = httpx.get(f"http://{http}/metrics").text  # summed over the workers, the two killed ones included
        assert metric(text, "specgen_requests_total", model=CNN, protocol="http", status="200") == 30
        assert metric(text, "specgen_requests_total", model=CNN, protocol="grpc", status="200") == 30
        assert metric(text, "specgen_requests_in_flight", model=CNN) == 0

        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
    log.thread.join(5)
    stopped = [line for line in log.all if line.get("event") == "stopped"]
    assert [line.get("worker") for line in stopped] in ([0, 1, None], [1, 0, None])  # both workers, then the parent
    assert sum(line.get("event") == "drained" for line in log.all) == 2
    with pytest.raises(ProcessLookupError):
        os.kill(restarted, 0)
    assert not any(line.get("level") == "error" for line in log.all)


@pytest.mark.parametrize(("args", "message"), [  # --workers 0 is a usage error (test_serve_r5.py)
    (["--workers", "2", "--model-control", "explicit"], "specgen serve: error: --model-control explicit needs "
     "--workers 1: a load or unload request would reach only one worker (use --model-control poll with several "
     "workers)\n"),
])
def test_workers_refused(tmp_path: Path, args: list[str], message: str) -> None:
    """Flags that do not go together are a usage error, exit 2, like a bad value of one flag."""
    result = subprocess.run([sys.executable, "-m", "specgen", "serve", str(tmp_path), *args], capture_output=True,
                            text=True, timeout=60)
    assert (result.returncode, result.stderr) == (2, message)


def test_a_repository_that_cannot_be_served_is_reported_once(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "specgen", "serve", str(tmp_path), "--port", "0", "--workers", "2"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert [line for line in result.stderr.splitlines() if line.startswith("specgen serve: ")] == [
        line for line in result.stderr.splitlines()][:1] and "no models" in result.stderr


def test_onnxruntime_threads_are_split_between_workers() -> None:
    from specgen.serve.workers import worker_threads

    cpus = len(os.sched_getaffinity(0))
    assert [worker_threads(0, 1), worker_threads(0, 2)] == [cpus, max(1, cpus // 2)]
    assert [worker_threads(8, 2), worker_threads(3, 2), worker_threads(1, 4)] == [4, 1, 1]
