"""An HTTP client that closes its connection while its request waits for a batch: the request is dropped unrun and
counted as a failure (`cancelled`, status 499), as its gRPC twin is (tests/test_serve_grpc.py,
test_deadline_passed_in_the_queue_is_dropped_unrun), never run and counted as a success.

Two places a request waits: in the queue behind a running batch (a model held in onnxruntime until the test opens
its gate), and in the batch being gathered (a long `max_queue_delay_microseconds`). The client is a raw socket that
sends a whole request and closes."""

from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from serve_helpers import Gate, Served, events, gated, metric, model_bytes  # noqa: E402

from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.app import ServeOptions  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402

CNN = "digits_cnn"
INFER = f"/v2/models/{CNN}/infer"


def _body(rows: int, seed: int) -> bytes:
    x = np.random.default_rng(seed).standard_normal((rows, 8, 8, 1)).astype(np.float32)
    return json.dumps({"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.reshape(-1).tolist()}]}).encode()


def _request(body: bytes) -> bytes:
    return (f"POST {INFER} HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


def _until(check: object, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _waiting(served: Served) -> int:
    return int(served.service.models[CNN][1].batcher.waiting)


def _in_flight(served: Served) -> float:
    return metric(httpx.get(f"http://{served.http}/metrics").text, "specgen_requests_in_flight", model=CNN)


def _check_counted_cancelled(served: Served, records: list[logging.LogRecord], ran: int) -> None:
    """`ran` requests answered 200 and ran; the one whose client left: a failure, 499 `cancelled`, never run."""
    [stats] = served.service.statistics(CNN, None)
    assert (stats.success.count, stats.fail.count) == (ran, 1)
    assert (stats.execution_count, stats.inference_count) == (ran, ran)  # its 2 rows never ran
    text = httpx.get(f"http://{served.http}/metrics").text
    assert metric(text, "specgen_requests_total", model=CNN, protocol="http", status="200") == ran
    assert metric(text, "specgen_requests_total", model=CNN, protocol="http", status="499") == 1
    assert metric(text, "specgen_request_failures_total", model=CNN, reason="cancelled") == 1
    assert metric(text, "specgen_queue_depth", model=CNN) == 0
    [line] = [f for f in events(records, "infer") if f["status"] != 200]
    assert (line["protocol"], line["status"], line["rows"], line["error"]) == (
        "http", 499, 2, "the client closed its connection before its answer")
    assert [r.getMessage() for r in records if r.exc_info or r.levelno >= logging.ERROR] == []


def test_http_client_gone_while_queued_behind_a_batch_is_dropped_unrun(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_repository(tmp_path, *model_bytes(CNN))
    gate = Gate()
    caplog.set_level(logging.INFO, logger="specgen.serve")
    with Served([gated(m, gate) for m in load_repository(tmp_path, provider="cpu")], ServeOptions()) as served:
        address = served.http.rsplit(":", 1)
        with socket.create_connection((address[0], int(address[1]))) as first:
            first.sendall(_request(_body(1, seed=1)))
            assert gate.entered.wait(10), "the first request did not start"
            _until(lambda: _in_flight(served) == 1 and _waiting(served) == 0, "the first request did not start")
            with socket.create_connection((address[0], int(address[1]))) as gone:
                gone.sendall(_request(_body(2, seed=2)))
                _until(lambda: _waiting(served) == 1, "the second request was not queued")
            # closed while queued; the batch it waits behind is still held
            _until(lambda: _in_flight(served) == 1, "the request whose client left was not let go before its batch",
                   seconds=5)
            gate.set()
            first.settimeout(10)
            assert first.recv(65536).startswith(b"HTTP/1.1 200 ")
        _until(lambda: _waiting(served) == 0 and _in_flight(served) == 0, "the queue did not drain")
        time.sleep(0.1)
        _check_counted_cancelled(served, caplog.records, ran=1)
        gate.set()


class _WaitingAtLetGo(logging.Handler):
    """The batcher's `waiting` as each failed request's line is logged: on the event loop, in the step that lets the
    request go, so it says whether the batch was still being gathered then (a poll from the test would come later)."""

    def __init__(self, served: Served):
        super().__init__()
        self.served = served
        self.seen: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict) and fields.get("event") == "infer" and fields.get("status") != 200:
            self.seen.append(_waiting(self.served))


def test_http_client_gone_while_its_batch_is_gathered_is_dropped_unrun(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A 1 s queue delay holds the request in the batch being gathered; its client leaves meanwhile."""
    write_repository(tmp_path, *model_bytes(CNN), max_queue_delay_us=1_000_000)
    caplog.set_level(logging.INFO, logger="specgen.serve")
    with Served(load_repository(tmp_path, provider="cpu"), ServeOptions()) as served:
        at_let_go = _WaitingAtLetGo(served)
        logging.getLogger("specgen.serve").addHandler(at_let_go)
        try:
            host, port = served.http.rsplit(":", 1)
            with socket.create_connection((host, int(port))) as gone:
                gone.sendall(_request(_body(2, seed=3)))
                _until(lambda: _waiting(served) == 1, "the request did not reach the batcher")
            _until(lambda: _in_flight(served) == 0, "the request whose client left was not let go", seconds=5)
        finally:
            logging.getLogger("specgen.serve").removeHandler(at_let_go)
        # its batch was still being gathered (1 request in it) when it was let go, not after the delay ended; read on
        # the server, where a wall-clock bound in the test (< 0.8 s) also counted the test's own stalls
        assert at_let_go.seen == [1], "let go only after its batch's delay"
        _until(lambda: _waiting(served) == 0, "the batch being gathered did not end")
        time.sleep(0.1)
        _check_counted_cancelled(served, caplog.records, ran=0)
