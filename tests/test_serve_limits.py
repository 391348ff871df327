"""`specgen serve` under hostile clients: oversized and slow bodies, trickled headers, too many connections,
clients that leave, and values that cannot become the declared datatype.

Real uvicorn servers on free loopback ports, real sockets (raw ones where the test must control
every byte and its timing), real onnxruntime sessions: the digits CNN with random weights, and a
small model of Identity nodes with one input per served datatype.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("onnxruntime")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from port_helpers import bound_port  # noqa: E402

from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime.onnx_export import with_weights  # noqa: E402
from specgen.runtime.parity import random_weights  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.app import ServeOptions, create_app  # noqa: E402
from specgen.serve.limits import body_limit  # noqa: E402
from specgen.serve.logs import JsonFormatter  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402
from specgen.serve.server import server_config  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CNN = "digits_cnn"
INFER = f"/v2/models/{CNN}/infer"
TYPES = {"f32": ("FP32", TensorProto.FLOAT), "f64": ("FP64", TensorProto.DOUBLE),
         "i32": ("INT32", TensorProto.INT32), "i64": ("INT64", TensorProto.INT64)}


def write_typed_model(root: Path, delay_us: int = 100) -> None:
    """`typed`: one [batch, 2] input per served datatype, each returned unchanged (Identity) as out_<name>."""
    inputs = [helper.make_tensor_value_info(n, t, ["batch", 2]) for n, (_, t) in TYPES.items()]
    outputs = [helper.make_tensor_value_info(f"out_{n}", t, ["batch", 2]) for n, (_, t) in TYPES.items()]
    nodes = [helper.make_node("Identity", [n], [f"out_{n}"]) for n in TYPES]
    model = helper.make_model(helper.make_graph(nodes, "typed", inputs, outputs), opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (root / "typed" / "1").mkdir(parents=True)
    onnx.save(model, root / "typed" / "1" / "model.onnx")
    tensors = lambda kind, prefix: ", ".join(  # noqa: E731
        f'{{ name: "{prefix}{n}" data_type: TYPE_{d} dims: [ 2 ] }}' for n, (d, _) in TYPES.items())
    (root / "typed" / "config.pbtxt").write_text(
        f'name: "typed" backend: "onnxruntime" max_batch_size: 8 input [ {tensors("input", "")} ] '
        f'output [ {tensors("output", "out_")} ] dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}')


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("limits_repo")
    ir = build_ir(load_spec(ROOT / "examples" / "specs" / f"{CNN}.yaml"))
    model = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir, random_weights(ir, np.random.default_rng(0)))
    write_repository(root, ir, model.SerializeToString())
    write_typed_model(root)
    return root


class ThreadServer:
    """The app on a free loopback port, through `server_config` (the guards `specgen serve` runs with); `service` is
    its Service, whose state the tests wait on where a fixed sleep would guess how far the server has got."""

    def __init__(self, repo: Path, **options: Any):
        app = create_app(load_repository(repo, provider="cpu"), ServeOptions(**options))
        self.service = app.state.service
        self.server = uvicorn.Server(server_config(app, "127.0.0.1", 0))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> tuple[str, int]:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the server did not start"
            time.sleep(0.01)
        return "127.0.0.1", self.server.servers[0].sockets[0].getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[tuple[str, int]]:
    with ThreadServer(repo, header_timeout=1.0, body_timeout=1.0) as address:
        yield address


def base(address: tuple[str, int]) -> str:
    return f"http://{address[0]}:{address[1]}"


def image_body(n: int, seed: int = 0, **dumps: Any) -> bytes:
    x = np.random.default_rng(seed).standard_normal((n, 8, 8, 1)).astype(np.float32)
    return json.dumps({"inputs": [{"name": "image", "shape": [n, 8, 8, 1], "datatype": "FP32", "data": x.tolist()}]},
                      **dumps).encode()


def head(path: str, length: int | None, **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x", "Content-Type: application/json"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def response(sock: socket.socket, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes, bool]:
    """Status, headers, body of one response, and whether the server then closed the connection."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before a response: {data!r}"
        data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    lines = top.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(rest) < int(headers.get("content-length", 0)):
        rest += sock.recv(65536)
    sock.settimeout(1.0)  # a closing server closes at once; a keep-alive one stays silent
    try:
        closed = sock.recv(1, socket.MSG_PEEK) == b""
    except ConnectionResetError:  # closed with our unread bytes pending (a trickled body): the kernel resets
        closed = True
    except TimeoutError:
        closed = False
    return int(lines[0].split()[1]), headers, rest, closed


def metric(address: tuple[str, int], name: str, **labels: str) -> float:
    for line in httpx.get(base(address) + "/metrics").text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            sample, value = line.rsplit(" ", 1)
            if all(f'{k}="{v}"' in sample for k, v in labels.items()):
                return float(value)
    return 0.0


def wait_until(check: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    """Poll `check` (server-side state read in-process) until it holds; the deadline only bounds a failing run."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


# Item 4: bodies bounded by what the model accepts


def test_body_bound_is_what_the_model_accepts(repo: Path) -> None:
    [cnn] = [m for m in load_repository(repo, provider="cpu") if m.name == CNN]
    limit = body_limit(cnn.config, 64 << 20)
    assert limit.binary_bytes == 64 * 64 * 4  # exact: max_batch_size x 8x8x1 float32
    assert limit.json_bytes == (64 << 10) + 64 * 64 * (32 + 16 * 4)  # envelope + per element: number and nesting
    assert body_limit(cnn.config, 100_000).json_bytes == 100_000  # the server-wide cap still applies


def test_declared_oversized_body_is_refused_before_it_is_read(server: tuple[str, int]) -> None:
    """60 MB declared (under the old 64 MiB cap): 413 at once, no byte of the body read, connection closed."""
    for extra in ({}, {"Inference_Header_Content_Length": "100"}, {"Expect": "100-continue"}):
        with socket.create_connection(server) as sock:
            sock.sendall(head(INFER, 60_000_000, **extra))
            status, headers, body, closed = response(sock, timeout=3)
        assert status == 413 and headers["connection"] == "close" and closed
        assert json.loads(body)["error"].startswith("the request body has 60000000 bytes; this model accepts at most")
    assert metric(server, "specgen_request_failures_total", model=CNN, reason="too_large") >= 3


def test_chunked_body_stops_at_the_bound(server: tuple[str, int]) -> None:
    """A chunked body is read up to the model's bound, then refused: the server does not wait for 8 MB."""
    chunk = b"[" + b"0.5," * 16383 + b"0"  # 64 KiB of JSON-ish numbers
    with socket.create_connection(server) as sock:
        sock.sendall(head(INFER, None))
        sent = 0
        try:
            while sent < 8 << 20:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, headers, body, _ = response(sock, timeout=3)
    assert status == 413 and headers["connection"] == "close"
    assert "exceeds" in json.loads(body)["error"]


def test_largest_valid_requests_fit_and_binary_is_exact(server: tuple[str, int]) -> None:
    with httpx.Client(base_url=base(server), timeout=30) as client:
        pretty = image_body(64, indent=4)  # the largest batch, nested and pretty-printed, still fits the JSON bound
        assert client.post(INFER, content=pretty).status_code == 200
        x = np.zeros((64, 8, 8, 1), np.float32)
        header = json.dumps({"inputs": [{"name": "image", "shape": [64, 8, 8, 1], "datatype": "FP32",
                                         "parameters": {"binary_data_size": x.nbytes}}]}).encode()
        ok = client.post(INFER, content=header + x.tobytes(), headers={"Inference-Header-Content-Length": str(len(header))})
        assert ok.status_code == 200, ok.text
    bound = (64 << 10) + 64 * 64 * (32 + 16 * 4) + x.nbytes
    with socket.create_connection(server) as sock:  # one byte more than the JSON header bound plus the exact binary
        sock.sendall(head(INFER, bound + 1, Inference_Header_Content_Length=str(len(header))))
        status, _, body, _ = response(sock)
    assert status == 413 and "with binary tensor data" in json.loads(body)["error"]


def test_body_budget_answers_503_instead_of_buffering(repo: Path) -> None:
    """Two bodies that together exceed the buffer budget: the second is refused at once, the first still served."""
    body = image_body(64, seed=1).ljust(300_000)  # JSON may end in whitespace; two of these exceed one largest body
    threaded = ThreadServer(repo, buffer_bytes=1, body_timeout=10.0)  # budget: one largest body (475,136 bytes)
    with threaded as address:
        with socket.create_connection(address) as first, socket.create_connection(address) as second:
            first.sendall(head(INFER, len(body)) + body[:1000])  # holds len(body) bytes of the budget while it trickles
            # the second request must find the budget held: wait for the hold itself, not a guessed 0.3 s
            wait_until(lambda: threaded.service.budget.held == len(body), "the first body never held the budget")
            second.sendall(head(INFER, len(body)))
            status, headers, answer, closed = response(second)
            assert status == 503 and headers["retry-after"] == "1" and closed
            assert "retry later" in json.loads(answer)["error"]
            first.sendall(body[1000:])
            assert response(first)[0] == 200
        assert metric(address, "specgen_request_failures_total", model=CNN, reason="overloaded") == 1


# Item 5: deadlines, disconnects, the connection limit


def test_trickled_headers_get_408_and_are_closed(server: tuple[str, int]) -> None:
    before = metric(server, "specgen_connections_closed_total", reason="header_timeout")
    with socket.create_connection(server) as sock:
        started = time.monotonic()
        sock.sendall(b"POST " + INFER.encode() + b" HTTP/1.1\r\n")
        sock.settimeout(0.2)
        closed_after = None
        for k in range(40):  # one header line every 0.2 s: 8 s if nothing stops it
            try:
                sock.sendall(b"X-Slow-%d: 1\r\n" % k)
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                data = b""
            closed_after = time.monotonic() - started
            break
    # The counted reason says the header deadline closed it (the 408 itself may be lost to a reset); the bound, 5x the
    # 1 s deadline (1.0 s measured), tells it from the default of 10 s
    assert closed_after is not None and closed_after < 5, "the trickling connection was never closed"
    assert data.startswith(b"HTTP/1.1 408") or data == b""
    assert metric(server, "specgen_connections_closed_total", reason="header_timeout") >= before + 1


def test_keep_alive_connection_trickling_its_next_request_is_closed(server: tuple[str, int]) -> None:
    before = metric(server, "specgen_connections_closed_total", reason="header_timeout")
    body = image_body(1)
    with socket.create_connection(server) as sock:
        sock.sendall(head(INFER, len(body)) + body)
        assert response(sock)[0] == 200
        started = time.monotonic()
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\n")
        sock.settimeout(0.2)
        answer = None
        while answer is None and time.monotonic() - started < 8:
            try:
                sock.sendall(b"X: 1\r\n")
                answer = sock.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                answer = b""
        # closed by the header deadline (counted below), 1 s after its previous answer: 5x margin, 10 s is the default
        assert answer is not None and time.monotonic() - started < 5, "the trickling keep-alive connection stayed open"
        assert answer.startswith(b"HTTP/1.1 408") or answer == b""
    assert metric(server, "specgen_connections_closed_total", reason="header_timeout") >= before + 1


def test_slow_body_gets_408(server: tuple[str, int]) -> None:
    body = image_body(4)
    with socket.create_connection(server) as sock:
        sock.sendall(head(INFER, len(body)))
        started = time.monotonic()
        sock.settimeout(0.25)
        for offset in range(0, len(body), 10):
            try:
                sock.sendall(body[offset:offset + 10])
                if sock.recv(1, socket.MSG_PEEK):
                    break
            except TimeoutError:
                continue
        status, _, answer, closed = response(sock)
    # the message names the 1 s body deadline; the bound (5x, 1.0 s measured) tells it from the default of 30 s
    assert status == 408 and closed and time.monotonic() - started < 5
    assert json.loads(answer) == {"error": "the request body did not arrive within 1 s"}
    assert metric(server, "specgen_request_failures_total", model=CNN, reason="timeout") >= 1


def test_client_leaving_mid_body_is_cancelled_not_500(server: tuple[str, int], caplog: pytest.LogCaptureFixture) -> None:
    before = metric(server, "specgen_request_failures_total", model=CNN, reason="cancelled")
    body = image_body(2)
    caplog.set_level(logging.INFO)
    for _ in range(5):
        with socket.create_connection(server) as sock:
            sock.sendall(head(INFER, len(body)) + body[: len(body) // 2])
            time.sleep(0.05)
    deadline = time.monotonic() + 5
    while metric(server, "specgen_request_failures_total", model=CNN, reason="cancelled") < before + 5:
        assert time.monotonic() < deadline, "the disconnects were not counted as cancelled"
        time.sleep(0.05)
    assert metric(server, "specgen_request_failures_total", model=CNN, reason="inference") == 0
    assert metric(server, "specgen_requests_total", model=CNN, status="500") == 0
    records = [r for r in caplog.records if r.name.startswith(("specgen", "uvicorn"))]
    assert not [r for r in records if r.exc_info], "a disconnect was logged with a traceback"
    lines = [JsonFormatter().format(r) for r in records if getattr(r, "fields", {}).get("status") == 499]
    assert len(lines) >= 5 and all("\n" not in line and "Traceback" not in line for line in lines)


def test_connection_limit_evicts_waiting_connections_then_refuses(tmp_path: Path) -> None:
    """Past the limit the longest-waiting connection (idle, or its request still arriving) is closed; when every
    connection has a whole request being answered (here: waiting 3 s for its batch to fill), the newcomer gets 503."""
    write_typed_model(tmp_path, delay_us=3_000_000)
    row = {n: [[1, 2]] for n in TYPES}
    body = json.dumps({"inputs": [{"name": n, "shape": [1, 2], "datatype": d, "data": row[n]}
                                  for n, (d, _) in TYPES.items()]}).encode()
    threaded = ThreadServer(tmp_path, max_connections=4, body_timeout=10.0)
    # Each step waits on the server's own state, read in-process: /metrics would need a connection of its own, and a
    # fixed sleep guessed how far the server had got (one stall of its thread, and the wrong connection is evicted).
    metrics = threaded.service.metrics
    open_now = lambda: metrics.connections._value.get()  # noqa: E731
    with threaded as address:
        idle = [socket.create_connection(address) for _ in range(3)]
        wait_until(lambda: open_now() == 3, "the idle connections were not accepted")  # they have waited longest
        trickling = socket.create_connection(address)
        trickling.sendall(head("/v2/models/typed/infer", len(body)) + body[:5])
        # its handler has started, so its headers are parsed and a request cycle owns the connection
        wait_until(lambda: metrics.in_flight.labels("typed")._value.get() == 1, "the trickling request did not start")
        newcomers = [socket.create_connection(address) for _ in range(4)]  # each evicts the one waiting longest
        for victim in idle:
            status, _, answer, closed = response(victim)
            assert status == 503 and closed and "make room" in json.loads(answer)["error"]
        trickling.settimeout(5)
        assert trickling.recv(100) == b""  # its request cycle owns the transport: closed without an answer
        for sock in newcomers:
            sock.close()
        # the newcomers' closes are seen (the evicted ones are closed by the server): none is left for `busy` to evict
        wait_until(lambda: open_now() == 0, "the closed connections were not let go")
        busy = [socket.create_connection(address) for _ in range(4)]
        for sock in busy:
            sock.sendall(head("/v2/models/typed/infer", len(body)) + body)
        # all four queued, so every body is complete and no connection waits on its client; the batch's 3 s delay
        # is a window far wider than the few ms `extra` needs to be refused
        batcher = threaded.service.models["typed"][1].batcher
        wait_until(lambda: batcher.waiting == 4, "the four requests were not all queued")
        with socket.create_connection(address) as extra:
            status, _, answer, closed = response(extra)
        assert status == 503 and closed and "each with a request in progress" in json.loads(answer)["error"]
        assert [response(sock)[0] for sock in busy] == [200] * 4  # the batch filled by time, every request answered
        for sock in busy:  # closed before /metrics is read, which needs a connection of its own
            sock.close()
        wait_until(lambda: open_now() == 0, "the busy connections were not let go")
        assert metric(address, "specgen_connections_closed_total", reason="refused") == 1
        assert metric(address, "specgen_connections_closed_total", reason="evicted") == 4
        assert metric(address, "specgen_request_failures_total", model="typed", reason="cancelled") == 1
        for sock in [*idle, *busy, trickling]:
            sock.close()


SERVER = "import sys; from pathlib import Path; from specgen.serve import run_server; " \
         "sys.exit(run_server(Path(sys.argv[1]), '127.0.0.1', int(sys.argv[2]), 'cpu', header_timeout=2.0))"


def test_slowloris_under_a_low_ulimit_leaves_the_server_serving(repo: Path, tmp_path: Path) -> None:
    """ulimit -n 256 and 300 connections trickling headers: the limit is lowered to fit, new clients are served."""
    log = tmp_path / "server.log"
    with log.open("wb") as stderr:  # port 0, read back from the log: a port picked here could be taken meanwhile
        process = subprocess.Popen([sys.executable, "-c", SERVER, str(repo), "0"], stderr=stderr,
                                   preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)),
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    slow: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        port = bound_port(process, log, deadline)
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
            assert time.monotonic() < deadline
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nX-Slow: ")
            slow.append(sock)
        statuses = [httpx.post(f"http://127.0.0.1:{port}{INFER}", content=image_body(1), timeout=10).status_code
                    for _ in range(10)]
        assert statuses == [200] * 10
    finally:
        for sock in slow:
            sock.close()
        process.terminate()
        process.wait(30)
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    [lowered] = [e for e in events if e.get("event") == "connection_limit"]
    assert lowered["nofile_soft"] == 256 and lowered["max_connections"] < 256 - lowered["fds_in_use"]
    assert any(e.get("reason") == "evicted" for e in events)
    assert not [e for e in events if "exception" in e or e.get("level") == "error"]


# Item 6: values that cannot become the declared datatype are 400s naming the input


def typed_body(**data: str) -> bytes:
    """A request to `typed` with one row per input; `data` replaces an input's JSON data text, verbatim."""
    rows = {"f32": "[[0.5, -1]]", "f64": "[[0.25, 2]]", "i32": "[[1, -2]]", "i64": "[[3, 4]]", **data}
    entries = [f'{{"name": "{n}", "shape": [1, 2], "datatype": "{d}", "data": {rows[n]}}}' for n, (d, _) in TYPES.items()]
    return ('{"inputs": [' + ", ".join(entries) + "]}").encode()


HUGE = "1" + "0" * 4999  # beyond Python's 4,300-digit int-string limit
BAD_VALUES = [
    ("huge int for FP32", {"f32": f"[{HUGE}, 1]"}, "input 'f32': received an integer of 5000 digits in 'data', "
                                                   "expected FP32 numbers"),
    ("huge int for INT64", {"i64": f"[[-{HUGE}, 1]]"}, "input 'i64': received an integer of 5000 digits in 'data', "
                                                       "expected INT64 integers"),
    ("INT32 above range", {"i32": "[2147483648, 0]"}, "input 'i32': received 2147483648 in 'data', expected INT32 "
                                                      "integers in -2147483648..2147483647"),
    ("INT32 below range", {"i32": "[[0, -2147483649]]"}, "input 'i32': received -2147483649 in 'data', expected INT32 "
                                                         "integers in -2147483648..2147483647"),
    ("INT64 above range", {"i64": "[9223372036854775808, 0]"}, "input 'i64': received 9223372036854775808 in 'data', "
     "expected INT64 integers in -9223372036854775808..9223372036854775807"),
    ("FP32 overflow", {"f32": "[1e300, 0]"}, "input 'f32': received 1e+300 in 'data', expected FP32 numbers within "
                                             "+-3.4028235e+38 (or NaN, Infinity, -Infinity)"),
    ("int beyond float64", {"f64": "[1" + "0" * 400 + ", 0]"}, "input 'f64': received " + ("1" + "0" * 400)[:77]
     + "... in 'data', expected FP64 numbers within +-1.7976931e+308 (or NaN, Infinity, -Infinity)"),
    ("NaN for INT32", {"i32": "[NaN, 1]"}, "input 'i32': received a number that is not an integer (NaN) in 'data', "
                                           "expected INT32 integers"),
    ("Infinity for INT64", {"i64": "[[1, -Infinity]]"}, "input 'i64': received a number that is not an integer "
                                                        "(-Infinity) in 'data', expected INT64 integers"),
    ("float for INT32", {"i32": "[1.0, 2]"}, "input 'i32': received a number that is not an integer (1.0) in 'data', "
                                             "expected INT32 integers"),
    ("bool for FP32", {"f32": "[true, 1.5]"}, "input 'f32': received a boolean in 'data', expected FP32 numbers"),
    ("bool for INT64", {"i64": "[[1, false]]"}, "input 'i64': received a boolean in 'data', expected INT64 integers"),
    ("string for FP64", {"f64": '["1.5", 2]'}, "input 'f64': received a string in 'data', expected FP64 numbers"),
    ("null for FP32", {"f32": "[[null, 1]]"}, "input 'f32': received null in 'data', expected FP32 numbers"),
    ("object for INT32", {"i32": '[{"a": 1}, 1]'}, "input 'i32': received an object in 'data', expected INT32 integers"),
    ("list among flat numbers", {"f32": "[1, [2]]"}, "input 'f32': received a list among the numbers in 'data', "
                                                     "expected FP32 numbers"),
    ("nested too deep", {"f64": "[[[1], [2]]]"}, "input 'f64': received a list among the numbers in 'data', "
                                                 "expected FP64 numbers"),
    ("nested wrong length", {"i64": "[[1, 2, 3]]"}, "input 'i64': received nested lists in 'data' that do not match the "
     "shape: a list of 3 where dimension 1 of shape [1, 2] is 2, expected 2 INT64 values for shape [1, 2] "
     "(flat row-major or nested)"),
    ("nested short", {"i32": "[[1], [2]]"}, "input 'i32': received nested lists in 'data' that do not match the shape: "
     "a list of 2 where dimension 0 of shape [1, 2] is 1, expected 2 INT32 values for shape [1, 2] "
     "(flat row-major or nested)"),
    ("flat too long", {"f32": "[1, 2, 3]"}, "input 'f32': received 3 data elements, expected 2 FP32 values for shape "
                                            "[1, 2] (flat row-major or nested)"),
    ("data a number", {"f32": "7"}, "input 'f32': received 'data' that is a number, expected a list of 2 FP32 values "
                                    "for shape [1, 2] (flat row-major or nested)"),
]


@pytest.mark.parametrize(("case", "data", "message"), BAD_VALUES, ids=[c[0] for c in BAD_VALUES])
def test_values_that_cannot_become_the_datatype_are_400(server: tuple[str, int], case: str, data: dict[str, str],
                                                        message: str) -> None:
    answer = httpx.post(base(server) + "/v2/models/typed/infer", content=typed_body(**data))
    assert answer.status_code == 400, answer.text
    assert answer.json() == {"error": message}


def test_huge_integers_elsewhere_are_400(server: tuple[str, int]) -> None:
    good = json.loads(typed_body())
    for path, expected in ((("id",), "'id': received an integer of 5000 digits, expected a string"),
                           (("inputs", 0, "shape", 0), "input 'f32': received shape [an integer of 5000 digits, 2], "
                                                       "expected a list of integers [-1, 2] with a batch size of 1..8 for -1"),
                           (("inputs", 0, "name"), "received an input named an integer of 5000 digits; model 'typed' "
                                                   "expects inputs ['f32', 'f64', 'i32', 'i64']")):
        body = json.loads(json.dumps(good))
        target = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = "@HUGE@"
        text = json.dumps(body).replace('"@HUGE@"', HUGE)
        answer = httpx.post(base(server) + "/v2/models/typed/infer", content=text)
        assert (answer.status_code, answer.json()) == (400, {"error": expected})


def test_values_at_the_edges_of_each_datatype_pass_through(server: tuple[str, int]) -> None:
    body = typed_body(f32="[3.4028234663852886e38, NaN]", f64="[[-Infinity, 1.7976931348623157e308]]",
                      i32="[-2147483648, 2147483647]", i64="[[-9223372036854775808, 9223372036854775807]]")
    answer = httpx.post(base(server) + "/v2/models/typed/infer", content=body)
    assert answer.status_code == 200, answer.text
    out = {o["name"]: o["data"] for o in json.loads(answer.text)["outputs"]}
    assert out["out_f32"][0] == 3.4028234663852886e38 and np.isnan(out["out_f32"][1])
    assert out["out_f64"] == [-np.inf, 1.7976931348623157e308]
    assert out["out_i32"] == [-2147483648, 2147483647]
    assert out["out_i64"] == [-9223372036854775808, 9223372036854775807]
