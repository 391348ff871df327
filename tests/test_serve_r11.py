"""`specgen serve` against the checker's round 11 (rt11/serve: load and faults), with real clients (tritonclient over
HTTP and gRPC, raw sockets where the HTTP framing itself is the case):

- F1: a transfer coding other than chunked (`gzip, chunked`) was ignored and the body read as plain: now 501 and the
  connection closed; Transfer-Encoding in an HTTP/1.0 request 400.
- F2: gRPC metadata between 16 and 20 KiB passed or failed at random (gRPC's soft limit): now exactly 16 KiB.
- F3: `--workers N` could not bind its gRPC port while a TIME_WAIT of an earlier server held it (SO_REUSEPORT only);
  the SO_REUSEADDR that fixed it must not let another program bind the reserved port (review round 11).
- F5: a frozen worker (SIGSTOP) kept its share of new gRPC connections for ever: now killed and restarted.
- F6: a client that sent part of a body held a SIGTERM shutdown for the 30 s body timeout: now 503 at once.
- F7: a trailing slash answered 307 to a Location built from the Host header: now 404.
- F8: deeply nested JSON was "malformed JSON ... maximum recursion depth exceeded": now what was received and the limit.

(F4, workers switching versions at their own polls, is documented in docs/serve.md, "Several processes".)
"""

from __future__ import annotations

import errno
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
tg = pytest.importorskip("tritonclient.grpc")
th = pytest.importorskip("tritonclient.http")
httpx = pytest.importorskip("httpx")

from port_helpers import bound_port, reserved_ports  # noqa: E402
from serve_helpers import Served, metric, model_bytes  # noqa: E402

from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402
from specgen.serve.options import ServeOptions  # noqa: E402

MLP = "digits_mlp"
X = np.full((1, 8, 8, 1), 0.5, np.float32)
BODY = json.dumps({"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32",
                               "data": [0.5] * 64}]}).encode()
EXAMPLE = '{"inputs": [{"name": ..., "shape": [...], "datatype": ..., "data": [...]}]}'


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    write_repository(root, *model_bytes(MLP))
    return root


@pytest.fixture(scope="module")
def served(repo: Path) -> Iterator[Served]:
    with Served(load_repository(repo, provider="cpu"), ServeOptions(grpc_port=0)) as server:
        yield server


def exchange(address: str, request: bytes) -> tuple[bytes, dict[str, str], bytes, bool]:
    """Send raw bytes; (status line, headers, body, whether the server then closed the connection)."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        while len(body) < int(headers.get("content-length", 0)):
            body += sock.recv(65536)
        try:
            closed = sock.recv(1) == b""
        except (ConnectionResetError, TimeoutError):
            closed = False
        return lines[0].encode(), headers, body, closed


def chunked_infer(coding_lines: bytes, version: bytes = b"1.1") -> bytes:
    return (b"POST /v2/models/digits_mlp/infer HTTP/" + version + b"\r\nHost: x\r\n" + coding_lines + b"\r\n"
            + f"{len(BODY):x}\r\n".encode() + BODY + b"\r\n0\r\n\r\n")


def error(body: bytes) -> str:
    message: str = json.loads(body)["error"]
    return message


# F1


def test_a_transfer_coding_other_than_chunked_is_not_implemented(served: Served) -> None:
    """`gzip, chunked` was read as a plain chunked body (200 for an uncompressed one); a proxy that applies the gzip
    sees another body. RFC 9112 6.1: 501 for a coding the server does not understand, and the connection closes."""
    expected = ("the request's Transfer-Encoding is 'gzip, chunked': this server implements no transfer coding but "
                "chunked (received 'gzip'); expected Transfer-Encoding: chunked alone (a compressed body: "
                "Content-Encoding: gzip)")
    for lines in (b"Transfer-Encoding: gzip, chunked\r\n", b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"):
        status, _, body, closed = exchange(served.http, chunked_infer(lines))
        assert (status, error(body), closed) == (b"HTTP/1.1 501 Not Implemented", expected, True)
    status, _, body, _ = exchange(served.http, chunked_infer(b"Transfer-Encoding: foo , Chunked\r\n"))
    assert (status, error(body)) == (b"HTTP/1.1 501 Not Implemented", expected.replace("gzip, chunked", "foo, Chunked")
                                     .replace("'gzip'", "'foo'"))
    status, _, body, _ = exchange(served.http, chunked_infer(b"Transfer-Encoding: chunked\r\nConnection: close\r\n"))
    assert status == b"HTTP/1.1 200 OK" and json.loads(body)["model_name"] == MLP


def test_transfer_encoding_in_an_http_1_0_request_is_refused(served: Served) -> None:
    """RFC 9112 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing (llhttp decoded it: 200)."""
    status, _, body, closed = exchange(served.http, chunked_infer(b"Transfer-Encoding: chunked\r\n", b"1.0"))
    assert (status, error(body), closed) == (
        b"HTTP/1.1 400 Bad Request", "malformed HTTP request: Transfer-Encoding 'chunked' in an HTTP/1.0 request, "
        "which cannot carry it (RFC 9112 6.1); expected Content-Length, or an HTTP/1.1 request", True)


# F7


def test_a_trailing_slash_is_an_unknown_path_never_a_redirect(served: Served) -> None:
    """Starlette's redirect_slashes answered 307 with a Location built from the Host header (an open redirect that a
    client follows with its POST body)."""
    for method, path in (("GET", "/v2/models/digits_mlp/"), ("GET", "/v2/health/ready/"), ("GET", "/v2/"),
                         ("GET", "/metrics/"), ("POST", "/v2/models/digits_mlp/infer/")):
        request = (f"{method} {path} HTTP/1.1\r\nHost: evil.example\r\nContent-Length: {len(BODY)}\r\n"
                   "Connection: close\r\n\r\n").encode() + BODY
        status, headers, body, _ = exchange(served.http, request)
        assert (status, error(body)) == (b"HTTP/1.1 404 Not Found", f"Not Found: {method} {path}")
        assert "location" not in headers


# F8


def test_deeply_nested_json_says_what_was_received_and_the_limit(served: Served) -> None:
    limit = sys.getrecursionlimit()
    deep = '{"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": ' + "[" * 5000
    deep += "]" * 5000 + "}]}"
    answer = httpx.post(f"http://{served.http}/v2/models/{MLP}/infer", content=deep)
    at = deep.index("[" * 5000) + limit - 3  # the bracket past the limit (3 levels outside 'data'; the count stops there)
    assert (answer.status_code, answer.json()["error"]) == (
        400, f"the JSON in the request body nests more than {limit} levels deep (at byte {at}), deeper than this "
        f"server's JSON parser reads (Python's recursion limit, {limit} levels, less the server's own calls); expected "
        f"an inference request {EXAMPLE}, each input's 'data' nested at most as deep as its shape")
    level = '{"a": "[{[", "b": '  # the brackets in a string are no nesting
    nested = '{"ready": ' + level * 3000 + "1" + "}" * 3000 + "}"
    answer = httpx.post(f"http://{served.http}/v2/repository/index", content=nested)
    at = len('{"ready": ') + len(level) * (limit - 1)  # the level past the limit, the outer object the first
    assert (answer.status_code, answer.json()["error"]) == (
        400, f"the JSON in the request body nests more than {limit} levels deep (at byte {at}), deeper than this "
        f"server's JSON parser reads (Python's recursion limit, {limit} levels, less the server's own calls); expected "
        "a JSON object of a few fields")


# F2


def grpc_infer(address: str, metadata_bytes: int, client: Any = None) -> str:
    """One inference with a metadata entry whose HPACK size (name + value + 32) is `metadata_bytes`, over `client` or a
    new tritonclient.grpc client (a new connection); "OK" or the gRPC status code's name."""
    own = client is None
    client = client or tg.InferenceServerClient(address)
    try:
        tensor = tg.InferInput("image", [1, 8, 8, 1], "FP32")
        tensor.set_data_from_numpy(X)
        client.infer(MLP, [tensor], headers={"x-a": "a" * (metadata_bytes - 32 - 3)}, client_timeout=10)
        return "OK"
    except tg.InferenceServerException as exc:
        return str(exc.status()).removeprefix("StatusCode.")
    finally:
        if own:
            client.close()


def test_the_grpc_metadata_limit_is_exact(served: Served) -> None:
    """gRPC's max_metadata_size is a soft limit: between it and 1.25 x it a growing random share of calls was refused
    (16,500 bytes: 13 in 40). Now every call above 16 KiB (one entry of 16,385 alone is above, the call's own headers
    aside) is refused, and every call well below it (the call's own headers take ~400 bytes) accepted."""
    client = tg.InferenceServerClient(served.grpc)  # the soft limit drew per call, so calls on one connection show it
    for size in (16385, 17500, 20000):  # each refusal costs gRPC ~0.1 s: 8 a size (before, most at 16,385 passed)
        assert {grpc_infer(served.grpc, size, client) for _ in range(8)} == {"RESOURCE_EXHAUSTED"}, size
    assert {grpc_infer(served.grpc, 15500, client) for _ in range(20)} == {"OK"}
    client.close()


# Processes: F3, F5, F6


class Log:
    """The JSON lines of a process's stderr, read by a thread; `wait(event)` returns the next line of that event."""

    def __init__(self, stream: Any):
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stopped: int | None = None  # the pid of the worker a test stopped: the one `worker_frozen` may name
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for raw in stream:
            try:
                self.lines.put(json.loads(raw))
            except ValueError:  # every line must be JSON (no traceback, no stray print): wait() fails on this one
                self.lines.put({"not_json": raw})
        self.lines.put({"eof": True})  # the process closed its stderr (exited): no line will come

    def wait(self, event: str, seconds: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        seen = []
        while True:
            line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert "eof" not in line, f"the process exited before a {event!r} line; its lines: {seen}"
            assert "not_json" not in line, f"a line that is not JSON: {line['not_json']!r}"
            seen.append(line.get("message"))
            frozen = line.get("event") == "worker_frozen" and line.get("pid") != self.stopped
            assert not frozen, f"a worker not stopped was taken for frozen (a stall of the machine): {line}"
            if line.get("event") == event:
                return line


def time_wait_on(port: int) -> None:
    """Leave a TIME_WAIT connection on 127.0.0.1:`port`, the server side closing first, as a stopping server does."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()
        assert client.recv(1) == b""
        client.close()
    assert time_waits(port), "no TIME_WAIT on the port"


def time_waits(port: int) -> bool:
    """Whether a connection on 127.0.0.1:`port` is in TIME_WAIT (state 06 of /proc/net/tcp): it lasts 60 s."""
    rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return any(r[1] == f"0100007F:{port:04X}" and r[3] == "06" for r in rows)


def stop(process: subprocess.Popen[Any], seconds: float = 30) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(seconds)


def test_workers_bind_a_grpc_port_a_time_wait_holds(repo: Path) -> None:
    """The parent reserved the gRPC port with SO_REUSEPORT alone, which Linux refuses while a TIME_WAIT holds the port
    (60 s after a server with gRPC clients stopped): `gRPC cannot listen on ...: Address already in use`, exit 1.
    `--workers 1` (and uvicorn's HTTP socket) set SO_REUSEADDR and started."""
    port = reserved_ports(1)[0]
    time_wait_on(port)
    process = subprocess.Popen([sys.executable, "-m", "specgen", "serve", str(repo), "--provider", "cpu", "--port", "0",
                                "--grpc-port", str(port), "--workers", "2", "--threads", "1"], stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        started = Log(process.stderr).wait("workers")
        # Still there once every worker bound: the reservation, earlier, bound past it (a start slower than the
        # TIME_WAIT's 60 s would test nothing, and says so).
        assert time_waits(port), "the TIME_WAIT ended before the server bound: the start was too slow to test it"
        assert started["grpc"] == f"127.0.0.1:{port}"
        assert grpc_infer(started["grpc"], 100) == "OK"
        assert stop(process) == 0
    finally:
        process.kill()
        process.wait()


def test_the_grpc_reservation_refuses_other_programs_reuseaddr_binds() -> None:
    """The reservation set SO_REUSEADDR to bind past a TIME_WAIT (F3) and kept it: as it never listens, a program
    that sets SO_REUSEADDR too (uvicorn, http.server, another `specgen serve`) could bind and listen on the port the
    workers were to bind. It clears the option once bound: that bind is refused; the workers' binds still work."""
    from specgen.serve.ports import reserve

    port = reserved_ports(1)[0]
    time_wait_on(port)
    reserved = reserve("127.0.0.1", port)  # past the TIME_WAIT
    sockets = [reserved]
    try:
        assert time_waits(port)
        other = socket.socket()
        sockets.append(other)
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with pytest.raises(OSError) as refused:
            other.bind(("127.0.0.1", port))
        assert refused.value.errno == errno.EADDRINUSE
        for _ in range(2):  # two workers, as grpc binds them (ServeOptions.grpc_reuse_port)
            worker = socket.socket()
            sockets.append(worker)
            worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            worker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            worker.bind(("127.0.0.1", port))
            worker.listen()
    finally:
        for sock in sockets:
            sock.close()


# The frozen worker's timeout: the shortest allowed, and the waits sized from it. Worker 1 may stall while worker 0
# restarts (loading onnxruntime on the same cores), but not for this long.
FROZEN_TIMEOUT = 10


def test_a_frozen_worker_is_killed_and_replaced(repo: Path) -> None:
    """A worker stopped with SIGSTOP kept its SO_REUSEPORT share of new gRPC connections, which hung to their deadlines
    (11 of 20), and the parent never noticed. Its heartbeat stops, so the parent kills it after worker_timeout (one
    `worker_frozen` line) and restarts it; every new client is then answered."""
    command = ["serve", str(repo), "--provider", "cpu", "--port", "0", "--threads", "1", "--grpc-port", "0",
               "--workers", "2", "--worker-timeout", str(FROZEN_TIMEOUT)]
    process = subprocess.Popen([sys.executable, "-m", "specgen", *command], stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    stopped: int | None = None
    try:
        log = Log(process.stderr)
        started = log.wait("workers")
        stopped = log.stopped = started["pids"][0]
        os.kill(stopped, signal.SIGSTOP)
        frozen = log.wait("worker_frozen", 3 * FROZEN_TIMEOUT)
        assert (frozen["pid"], frozen["worker"], frozen["limit_s"]) == (stopped, 0, FROZEN_TIMEOUT)
        assert frozen["silent_s"] >= FROZEN_TIMEOUT
        exited = log.wait("worker_exited")
        assert (exited["pid"], exited["status"]) == (stopped, "SIGKILL")
        assert log.wait("worker_ready", 6 * FROZEN_TIMEOUT)["worker"] == 0
        assert [grpc_infer(started["grpc"], 100) for _ in range(10)] == ["OK"] * 10  # new connections, both workers
        assert stop(process) == 0
    finally:
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
        process.kill()
        process.wait()


def test_shutdown_does_not_wait_for_a_body_still_arriving(repo: Path, tmp_path: Path) -> None:
    """A client that sent headers and part of its body held SIGTERM for the 30 s body timeout (new connections refused
    meanwhile). Now that request is answered 503 at once, and the server exits promptly."""
    log = tmp_path / "serve.log"
    with log.open("w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "specgen", "serve", str(repo), "--provider", "cpu",
                                    "--port", "0", "--threads", "1", "--body-timeout", "120"], stderr=stderr,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        port = bound_port(process, log, time.monotonic() + 60)
        slow = socket.create_connection(("127.0.0.1", port), timeout=20)
        slow.sendall(b"POST /v2/models/digits_mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"inputs\"")
        deadline = time.monotonic() + 20
        while metric(httpx.get(f"http://127.0.0.1:{port}/metrics").text, "specgen_requests_in_flight", model=MLP) < 1:
            assert time.monotonic() < deadline, "the server never started on the request"
            time.sleep(0.05)
        begun = time.monotonic()
        assert stop(process, 60) == 0
        # It waited for the body timeout (29.4 s at 30 s): 120 s here, so the old behaviour fails this by far, while a
        # loaded machine's exit (onnxruntime and interpreter teardown) has room.
        assert time.monotonic() - begun < 20
        answer = b""
        while chunk := slow.recv(65536):
            answer += chunk
        head, body = answer.split(b"\r\n\r\n", 1)
        assert head.split(b"\r\n")[0] == b"HTTP/1.1 503 Service Unavailable" and b"retry-after: 1" in head
        message = "the server is shutting down: this request's body had not all arrived, and the request was not run; retry it"
        assert error(body) == message
        slow.close()
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        infer = [line for line in lines if line.get("event") == "infer"]
        assert [(line["status"], line["error"]) for line in infer] == [(503, message)]
    finally:
        process.kill()
        process.wait()


RANGE = ("seconds from 10 (a response encoded on a worker's event loop stops its heartbeats meanwhile) to 86,400 "
         "(a day)")


@pytest.mark.parametrize("value", [1.5, 9.5, 86_401, float("nan"), float("inf"), True])
def test_a_worker_timeout_out_of_its_range_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      value: float) -> None:
    """run_server's bounds are the command line's (10 s: a response is encoded on the event loop; a day): it took
    2 s (a healthy worker busy encoding one large response was killed) and had no upper bound. (No repository: a
    value let through fails on that, at once, with another line.)"""
    from specgen.serve import run_server

    assert run_server(tmp_path / "absent", port=0, provider="cpu", workers=2, worker_timeout=value) == 1
    assert capsys.readouterr().err == f"specgen serve: worker_timeout: received {value!r}; expected {RANGE}\n"


@pytest.mark.parametrize("value", ["1.5", "9.9", "0", "nan", "inf", "86401", "x"])
def test_a_worker_timeout_flag_out_of_its_range_is_a_usage_error(value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "specgen", "serve", "repo", "--worker-timeout", value],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    reason = (f"'{value}' is not a positive finite number of seconds" if value in ("0", "nan", "inf", "x") else
              f"received '{value}'; expected {RANGE}")
    assert done.stderr.splitlines()[-1] == f"specgen serve: error: argument --worker-timeout: {reason}"
