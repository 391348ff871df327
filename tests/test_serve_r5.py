"""`specgen serve` against red team round 5 (area B): flags that took any number, a gRPC deadline that left a
traceback and a success nobody received, a config.pbtxt edit never served, workers' log lines lost with a killed
parent, malformed HTTP answered with nothing or with text/plain, and messages that named the wrong thing.

Each refusal is one line (a usage error for a flag, a JSON `{"error": ...}` for a request, a `model_refused` line
for a version), never a traceback. In-process servers (serve_helpers.Served) on the small digits MLP with random
weights, raw sockets where the test must send bytes no client sends; one test runs the real command with workers.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import importlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
grpc = pytest.importorskip("grpc")
tg = pytest.importorskip("tritonclient.grpc")
httpx = pytest.importorskip("httpx")

from serve_helpers import Served, events, metric, model_bytes  # noqa: E402
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402

from specgen.cli import main  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve import logs, run_server  # noqa: E402
from specgen.serve.app import create_app  # noqa: E402
from specgen.serve.control import ModelControl, ModelSource  # noqa: E402
from specgen.serve.grpc_server import Servicer  # noqa: E402
from specgen.serve.limits import ByteBudget  # noqa: E402
from specgen.serve.metrics import ServerMetrics  # noqa: E402
from specgen.serve.model_config import RepositoryError  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402
from specgen.serve.options import ServeOptions  # noqa: E402
from specgen.serve.registry import Registry  # noqa: E402
from specgen.serve.repository import read_config  # noqa: E402
from specgen.serve.stamps import snapshot  # noqa: E402

MLP = "digits_mlp"
ZEROS = json.dumps([0.0] * 64)


@pytest.fixture(scope="module")
def mlp() -> tuple[Any, bytes]:
    return model_bytes(MLP)


def _body(**extra: Any) -> bytes:
    entry = {"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": json.loads(ZEROS)}
    return json.dumps({"inputs": [entry], **extra}).encode()


def _exchange(address: str, data: bytes) -> bytes:
    """Send `data` on a new connection and read until the server closes it."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def _no_traceback(records: list[logging.LogRecord]) -> None:
    assert [r.getMessage() for r in records if r.exc_info or r.levelno >= logging.ERROR] == []


# 1. numeric flags


@pytest.mark.quick
@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--header-timeout", "nan", "'nan' is not a positive finite number of seconds"),
    ("--header-timeout", "0", "'0' is not a positive finite number of seconds"),
    ("--header-timeout", "-5", "'-5' is not a positive finite number of seconds"),
    ("--header-timeout", "inf", "'inf' is not a positive finite number of seconds"),
    ("--header-timeout", "1e9", "'1e9' is more than 86,400 seconds (a day), the longest a request's headers or body "
     "may take here"),
    ("--body-timeout", "nan", "'nan' is not a positive finite number of seconds"),
    ("--body-timeout", "-1", "'-1' is not a positive finite number of seconds"),
    ("--max-connections", "0", "received '0'; expected a whole number from 1 to 1,000,000 (open connections at most)"),
    ("--max-connections", "2147483647", "received '2147483647'; expected a whole number from 1 to 1,000,000 (open "
     "connections at most)"),
    ("--port", "70000", "received '70000'; expected a port number from 0 to 65535 (0: any free port)"),
    ("--port", "-1", "received '-1'; expected a port number from 0 to 65535 (0: any free port)"),
    ("--grpc-port", "70001", "received '70001'; expected a port number from 0 to 65535 (0: any free port)"),
    ("--threads", "-1", "received '-1'; expected a whole number from 0 to 1,024 (onnxruntime intra-op threads; 0: its "
     "default)"),
    ("--workers", "0", "received '0'; expected a whole number of 1 or more (server processes)"),
    ("--queue-size", "0", "received '0'; expected a whole number of 1 or more (requests that may wait per model)"),
    ("--queue-size", "x", "received 'x'; expected a whole number of 1 or more (requests that may wait per model)"),
])
def test_serve_numeric_flags_are_usage_errors(flag: str, value: str, expected: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["serve", "repo", flag, value])
    assert caught.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"specgen serve: error: argument {flag}: {expected}"


@pytest.mark.quick
@pytest.mark.parametrize(("argv", "expected"), [
    (["train", "spec.yaml", "--epochs", "-1"], "specgen train: error: argument --epochs: received '-1'; expected a "
     "whole number, 0 or more"),
    (["train", "spec.yaml", "--steps", "x"], "specgen train: error: argument --steps: received 'x'; expected a whole "
     "number, 0 or more"),
    (["import", "keras", "ResNet50", "-o", "a.yaml", "--classes", "0"], "specgen import keras: error: argument "
     "--classes: received '0'; expected a positive integer"),
])
def test_other_commands_count_flags_are_usage_errors(argv: list[str], expected: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == expected


@pytest.mark.quick
@pytest.mark.parametrize(("options", "expected"), [
    ({"header_timeout": float("nan")}, "ServeOptions.header_timeout: received nan; expected a positive finite number "
     "of seconds, at most 2,147,483"),
    ({"body_timeout": -1.0}, "ServeOptions.body_timeout: received -1.0; expected a positive finite number of seconds"),
    ({"max_connections": 0}, "ServeOptions.max_connections: received 0; expected a whole number from 1 to "
     "2,147,483,646"),
    ({"grpc_port": 70001}, "ServeOptions.grpc_port: received 70001; expected None or a port number from 0 to 65535 "
     "(0: any free port)"),
    ({"queue_size": 0}, "ServeOptions.queue_size: received 0; expected None or a whole number from 1 to "
     "2,147,483,646"),
])
def test_serve_options_refuse_what_no_server_runs_with(options: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError) as caught:
        ServeOptions(**options)
    assert str(caught.value) == expected


def test_run_server_refuses_a_port_past_65535_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_server(tmp_path, port=70000) == 1
    assert capsys.readouterr().err == "specgen serve: port must be 0 to 65535 (0: any free port), got 70000\n"


# 2. gRPC deadlines: no traceback, and an answer that could not be sent is no success


class LateContext:
    """A call whose deadline passes while its batch runs: 5 s left until the model has run, none after."""

    def __init__(self) -> None:
        self.ran = threading.Event()
        self.code: Any = None
        self.details: str | None = None

    def time_remaining(self) -> float:
        return 0.0 if self.ran.is_set() else 5.0

    def set_code(self, code: Any) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details


def test_an_answer_ready_after_the_deadline_is_a_deadline_not_a_success(
        tmp_path: Path, mlp: tuple[Any, bytes], caplog: pytest.LogCaptureFixture) -> None:
    write_repository(tmp_path, *mlp)
    context = LateContext()
    [model] = load_repository(tmp_path, provider="cpu")

    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = model.run(inputs)
        context.ran.set()  # the deadline passes as the batch ends, before the answer is sent
        return outputs

    app = create_app([dataclasses.replace(model, run=run)], ServeOptions())
    service = app.state.service
    request = service_pb2.ModelInferRequest(model_name=MLP, id="late")
    request.inputs.add(name="image", datatype="FP32", shape=[1, 8, 8, 1])
    request.raw_input_contents.append(np.zeros((1, 8, 8, 1), np.float32).tobytes())

    async def call() -> Any:
        async with service.lifespan(app):
            return await Servicer(service).model_infer(request, cast(Any, context))

    caplog.set_level(logging.INFO, logger="specgen.serve")
    answer = asyncio.run(call())
    message = "the call's deadline passed before its answer could be sent"
    assert (answer, context.code, context.details) == (
        service_pb2.ModelInferResponse(), grpc.StatusCode.DEADLINE_EXCEEDED, message)
    stats = service.statistics(MLP, None)[0].as_json()
    assert (stats["inference_stats"]["success"]["count"], stats["inference_stats"]["fail"]["count"],
            stats["execution_count"], stats["inference_count"]) == (0, 1, 1, 0)
    assert [(e["id"], e["status"], e["code"], e["error"]) for e in events(caplog.records, "infer")] == [
        ("late", 504, "DEADLINE_EXCEEDED", message)]
    text = service.metrics.render().decode()
    assert metric(text, "specgen_requests_total", model=MLP, protocol="grpc", status="504") == 1
    assert metric(text, "specgen_request_failures_total", model=MLP, reason="deadline") == 1


@pytest.fixture
def saved_logging() -> Iterator[None]:
    """logs.configure and the gRPC server change process-wide logging: put back what pytest had."""
    names = ["", "uvicorn", "uvicorn.error", "uvicorn.access", logs.GRPC_AIO_LOGGER]
    saved = {n: (list(logging.getLogger(n).handlers), list(logging.getLogger(n).filters), logging.getLogger(n).level,
                 logging.getLogger(n).propagate) for n in names}
    yield
    for name, (handlers, filters, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.filters[:] = handlers, filters
        logger.setLevel(level)
        logger.propagate = propagate


def _unsent(status: int | None) -> None:
    """What grpc.aio logs when core fails to send a call's answer, from the task that ran the call."""
    cygrpc: Any = importlib.import_module("grpc._cython.cygrpc")  # grpc.aio's Cython core, untyped
    if status is not None:
        logs.GRPC_CALL.set({"model": MLP, "id": "g-7", "status": status})
    try:
        raise cygrpc.ExecuteBatchError('Failed "execute_batch": (...)')
    except cygrpc.ExecuteBatchError:
        logging.getLogger(logs.GRPC_AIO_LOGGER).exception(
            "ExecuteBatchError raised in core by servicer method [/inference.GRPCInferenceService/ModelInfer]")


@pytest.mark.parametrize(("level", "status", "expected"), [
    ("info", 200, [{"level": "info", "message": "gRPC answer not sent", "event": "answer_unsent", "protocol": "grpc",
                    "method": "/inference.GRPCInferenceService/ModelInfer", "model": MLP, "id": "g-7", "status": 200,
                    "error": "the call ended (its deadline passed or its client cancelled) as its answer went out"}]),
    ("info", None, [{"level": "info", "message": "gRPC answer not sent", "event": "answer_unsent", "protocol": "grpc",
                     "method": "/inference.GRPCInferenceService/ModelInfer",
                     "error": "the call ended (its deadline passed or its client cancelled) as its answer went out"}]),
    ("info", 504, []),  # a failed call: its own infer line says so
    ("warning", 200, []),  # one info line: not at --log-level warning
])
def test_an_unsent_answer_is_one_line_without_a_traceback(level: str, status: int | None, expected: list[Any],
                                                          saved_logging: None,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure(level)
    logs.quiet_unsent_answers()
    logs.quiet_unsent_answers()  # installed once however often the gRPC server starts
    contextvars.copy_context().run(_unsent, status)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [{k: v for k, v in line.items() if k not in ("time", "logger")} for line in lines] == expected


def test_calls_with_millisecond_deadlines_leave_no_traceback(tmp_path: Path, mlp: tuple[Any, bytes],
                                                             caplog: pytest.LogCaptureFixture,
                                                             saved_logging: None) -> None:
    """The red team's load: 4 threads of calls with 0.5..4 ms deadlines. How many answers race their deadline is up
    to the machine (the tests above make each case happen); none may log a traceback or an error."""
    write_repository(tmp_path, *mlp)
    caplog.set_level(logging.INFO)
    with Served(load_repository(tmp_path, provider="cpu")) as served:
        def calls(seed: int) -> None:
            client, rng = tg.InferenceServerClient(served.grpc), np.random.default_rng(seed)
            tensor = tg.InferInput("image", [4, 8, 8, 1], "FP32")
            tensor.set_data_from_numpy(np.zeros((4, 8, 8, 1), np.float32))
            for _ in range(100):
                try:
                    client.infer(MLP, [tensor], client_timeout=float(rng.uniform(0.0005, 0.004)))
                except tg.InferenceServerException:
                    pass
            client.close()

        threads = [threading.Thread(target=calls, args=(k,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    _no_traceback(caplog.records)


# 3. a config.pbtxt edit of fields the server does not read


def test_a_config_edit_the_server_does_not_parse_is_served_without_a_reload(
        tmp_path: Path, mlp: tuple[Any, bytes], caplog: pytest.LogCaptureFixture) -> None:
    folder = write_repository(tmp_path, *mlp)
    config = folder / "config.pbtxt"
    caplog.set_level(logging.INFO, logger="specgen.serve")
    options = ServeOptions(grpc_port=0, model_control="explicit")
    with Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        kept = served.service.models[MLP][1]
        text = config.read_text().replace("instance_group [ { kind: KIND_AUTO count: 1 } ]",
                                          "instance_group [ { kind: KIND_CPU count: 2 } ]")
        config.write_text(text + 'parameters { key: "labels" value: { string_value: "v2" } }\n')
        assert httpx.post(f"http://{served.http}/v2/repository/models/{MLP}/load").status_code == 200
        http = httpx.get(f"http://{served.http}/v2/models/{MLP}/config").json()
        client = tg.InferenceServerClient(served.grpc)
        over_grpc = client.get_model_config(MLP, as_json=True)["config"]
        client.close()
        assert served.service.models[MLP][1] is kept  # the same session and batcher: nothing was reloaded
    assert http["parameters"] == over_grpc["parameters"] == {"labels": {"string_value": "v2"}}
    assert [(g["count"], g["kind"]) for g in http["instance_group"]] == [(2, "KIND_CPU")]
    assert [e for e in events(caplog.records, "model_config_updated")] == [
        {"event": "model_config_updated", "model": MLP, "versions": [1]}]
    assert events(caplog.records, "model_loaded") == []


# 4. --workers: the workers' lines outlive a killed parent


def test_workers_log_their_shutdown_after_the_parent_is_killed(tmp_path: Path, mlp: tuple[Any, bytes]) -> None:
    write_repository(tmp_path, *mlp)
    log = tmp_path / "serve.log"
    # Without TF_CPP_MIN_LOG_LEVEL (the test session sets it), as a user starts it: cli.py filtered stderr then
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    with log.open("w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "specgen", "serve", str(tmp_path), "--provider", "cpu",
                                    "--port", "0", "--workers", "2"], stderr=stderr, env={**env, "PYTHONUNBUFFERED": "1"})
    try:
        _wait_for_lines(log, "workers", 1, process)
        process.send_signal(signal.SIGKILL)
        process.wait(30)
        drained = _wait_for_lines(log, "drained", 2, None)  # the workers get SIGTERM once the parent is gone
    finally:
        if process.poll() is None:
            process.kill()
    assert sorted(line["worker"] for line in drained) == [0, 1]


def _wait_for_lines(log: Path, event: str, count: int, process: subprocess.Popen[bytes] | None) -> list[Any]:
    """The log's lines of `event` once there are `count` (every line JSON), polled: a file has no event to wait on."""
    deadline = time.monotonic() + 60
    while True:
        lines = [json.loads(text) for text in log.read_text().splitlines()]
        found = [line for line in lines if line.get("event") == event]
        if len(found) >= count:
            return found
        assert process is None or process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"fewer than {count} {event} lines: {log.read_text()}"
        time.sleep(0.05)


def test_serve_leaves_stderr_to_its_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             saved_logging: None) -> None:
    """cli.py's TensorFlow filter (a pipe read by a thread of this process) is not put between serve and stderr."""
    import specgen.native_logs

    entered: list[bool] = []
    monkeypatch.setattr(specgen.native_logs, "quiet", lambda verbose=False: entered.append(True))
    assert main(["serve", str(tmp_path / "absent")]) == 1
    assert entered == []


# 5. malformed HTTP


BAD_CHUNK = (b"POST /v2/models/digits_mlp/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             b'5\r\n{"inp\r\nZZ\r\nuts": []}\r\n0\r\n\r\n')
CHUNK_ERROR = "malformed HTTP request: invalid chunked encoding of the body (invalid character in chunk size)"


def _answer(status: bytes, message: str) -> bytes:
    body = json.dumps({"error": message}, separators=(",", ":")).encode()
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: " + str(len(body)).encode()
            + b"\r\nconnection: close\r\n\r\n" + body)


def test_a_malformed_chunked_body_is_a_bad_request(tmp_path: Path, mlp: tuple[Any, bytes],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    write_repository(tmp_path, *mlp)
    caplog.set_level(logging.INFO)
    with Served(load_repository(tmp_path, provider="cpu"), ServeOptions()) as served:
        assert _exchange(served.http, BAD_CHUNK) == _answer(b"400 Bad Request", CHUNK_ERROR)
        index = BAD_CHUNK.replace(b"/v2/models/digits_mlp/infer", b"/v2/repository/index")
        assert _exchange(served.http, index) == _answer(b"400 Bad Request", CHUNK_ERROR)
        text = httpx.get(f"http://{served.http}/metrics").text
    assert [(e["status"], e["error"]) for e in events(caplog.records, "infer")] == [(400, CHUNK_ERROR)]
    assert metric(text, "specgen_requests_total", model=MLP, protocol="http", status="400") == 1
    assert metric(text, "specgen_request_failures_total", model=MLP, reason="invalid") == 1
    assert metric(text, "specgen_request_failures_total", model=MLP, reason="cancelled") == 0
    assert metric(text, "specgen_connections_closed_total", reason="invalid") == 2
    _no_traceback(caplog.records)


@pytest.mark.parametrize(("headers", "message"), [
    (b"Content-Length: 1\r\nContent-Length: 2\r\n", "malformed HTTP request: Duplicate Content-Length"),
    (b"Content-Length: 1\r\nTransfer-Encoding: chunked\r\n",
     "malformed HTTP request: Transfer-Encoding can't be present with Content-Length"),
    (b"Bad Header: x\r\n", "malformed HTTP request: Invalid header token"),
])
def test_malformed_headers_get_the_json_error(tmp_path: Path, mlp: tuple[Any, bytes], headers: bytes,
                                              message: str) -> None:
    write_repository(tmp_path, *mlp)
    with Served(load_repository(tmp_path, provider="cpu"), ServeOptions()) as served:
        answer = _exchange(served.http, b"POST /v2/models/digits_mlp/infer HTTP/1.1\r\nHost: x\r\n" + headers
                           + b"\r\nab")
    assert answer == _answer(b"400 Bad Request", message)


def test_garbage_after_a_request_waits_for_its_answer(tmp_path: Path, mlp: tuple[Any, bytes]) -> None:
    write_repository(tmp_path, *mlp)
    with Served(load_repository(tmp_path, provider="cpu"), ServeOptions()) as served:
        answer = _exchange(served.http, b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
                                         b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n\x00garbage\r\n\r\n")
    first, second, rest = answer.split(b"HTTP/1.1 ", 3)[1:]
    assert (first[:6], second[:6]) == (b"200 OK", b"200 OK")  # both answered, in order, then the 400
    assert b"HTTP/1.1 " + rest == _answer(b"400 Bad Request", "malformed HTTP request: Invalid method encountered")


# 6. messages


def test_config_and_model_files_that_are_not_regular_files_say_so(tmp_path: Path, mlp: tuple[Any, bytes]) -> None:
    folder = write_repository(tmp_path, *mlp)
    config = folder / "config.pbtxt"
    text = config.read_text()
    config.unlink()
    config.mkdir()
    with pytest.raises(RepositoryError) as caught:
        read_config(folder)
    assert str(caught.value) == (f"{config}: is a directory, not a regular file; expected the model's Triton "
                                 "configuration (text protobuf)")
    config.rmdir()
    os.mkfifo(config)
    with pytest.raises(RepositoryError) as caught:
        read_config(folder)  # refused without opening it: an open would wait for a writer for ever
    assert str(caught.value).startswith(f"{config}: is a FIFO (named pipe), not a regular file")
    config.unlink()
    config.write_text(text)
    model = folder / "1" / "model.onnx"
    model.unlink()
    model.symlink_to("model.onnx")
    with pytest.raises(RepositoryError) as caught:
        load_repository(tmp_path, provider="cpu")
    assert str(caught.value) == (f"{model}: is a symbolic link loop, not a regular file; expected the version's ONNX "
                                 "model")


def test_a_polled_version_that_is_a_fifo_is_refused_in_one_line(tmp_path: Path, mlp: tuple[Any, bytes],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    folder = write_repository(tmp_path, *mlp)
    registry = Registry(ServerMetrics(), None, True, 64 << 20, ByteBudget(1))
    control = ModelControl(registry, ModelSource(tmp_path, "cpu"), "poll", poll_seconds=3600)
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size:", "version_policy { all { } }\nmax_batch_size:"))
    (folder / "2").mkdir()
    os.mkfifo(folder / "2" / "model.onnx")

    async def load() -> list[str] | None:
        control.start()
        try:
            return await control._load(MLP, folder, False, snapshot(folder))
        finally:
            await control.stop()

    caplog.set_level(logging.INFO, logger="specgen.serve")
    why = f"{folder / '2' / 'model.onnx'}: is a FIFO (named pipe), not a regular file; expected the version's ONNX model"
    assert asyncio.run(load()) == [why, f"model '{MLP}' serves version(s) [1]"]
    assert sorted(registry.models[MLP]) == [1]
    assert [(e["version"], e["error"]) for e in events(caplog.records, "model_refused")] == [(2, why)]


@pytest.mark.parametrize(("body", "message"), [
    (_body(outputs=[{"nam": "logits"}]), "an entry of 'outputs' has no 'name' field (its fields: [\"nam\"]); "
     "expected {\"name\": ...} naming one of ['logits']"),
    (json.dumps({"inputs": [{"nam": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": [0]}]}).encode(),
     "an entry of 'inputs' has no 'name' field (its fields: [\"data\", \"datatype\", \"nam\", \"shape\"]); model "
     "'digits_mlp' expects inputs ['image']"),
    (json.dumps({"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "data": [0]}]}).encode(),
     "input 'image' has no 'datatype' field (its fields: [\"data\", \"name\", \"shape\"]); expected \"FP32\""),
])
def test_a_missing_field_is_named(tmp_path: Path, mlp: tuple[Any, bytes], body: bytes, message: str) -> None:
    write_repository(tmp_path, *mlp)
    with Served(load_repository(tmp_path, provider="cpu"), ServeOptions()) as served:
        answer = httpx.post(f"http://{served.http}/v2/models/{MLP}/infer", content=body)
    assert (answer.status_code, answer.json()) == (400, {"error": message})


def test_repository_requests_check_their_types(tmp_path: Path, mlp: tuple[Any, bytes]) -> None:
    write_repository(tmp_path, *mlp)
    options = ServeOptions(grpc_port=0, model_control="explicit")
    with Served(load_repository(tmp_path, provider="cpu"), options, tmp_path) as served:
        base = f"http://{served.http}/v2/repository"
        answers = [httpx.post(f"{base}/index", json={"ready": "yes"}),
                   httpx.post(f"{base}/models/{MLP}/unload", json={"parameters": {"unload_dependents": "yes"}}),
                   httpx.post(f"{base}/models/{MLP}/unload", json={"parameters": []})]
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel := grpc.insecure_channel(served.grpc))
        request = service_pb2.RepositoryModelUnloadRequest(model_name=MLP)
        request.parameters["unload_dependents"].string_param = "yes"
        with pytest.raises(grpc.RpcError) as caught:
            stub.RepositoryModelUnload(request, timeout=10)
        channel.close()
        still = sorted(served.service.models)
    assert [(a.status_code, a.json()) for a in answers] == [
        (400, {"error": "'ready' of a repository index request: received \"yes\" (a string), expected a boolean "
                        "(true or false)"}),
        (400, {"error": "parameter 'unload_dependents' of the unload request: received \"yes\" (a string), expected "
                        "a boolean (true or false)"}),
        (400, {"error": "'parameters' of an unload request: received an empty list, expected an object"})]
    assert (caught.value.code(), caught.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT, "parameter 'unload_dependents' of the unload request: received \"yes\" "
        "(a string), expected a boolean (true or false)")
    assert still == [MLP]  # nothing was unloaded
