"""What `specgen serve` says about itself stays true (red team round 3, area `stats`).

- `specgen_model_info` keeps the sample of a version loaded again under the same number (the new copy is installed
  before the old one is retired: the old one's unload must not remove the labels the new one set);
- a request whose client left (HTTP) or whose deadline passed (gRPC) while its batch ran is a `fail`, and adds
  nothing to `queue`, `compute_*` or `inference_count` (as Triton counts: those are per successful request), while
  the run itself still counts in `execution_count` and `batch_stats`;
- an HTTP request refused once its JSON parsed is logged with the id it carried, as a gRPC one is;
- the gRPC deadline-or-cancel guess follows the grpc-timeout header's precision, not a tenth of the deadline;
- `--log-level debug` adds no grpc.aio line per call (health probes), and keeps specgen's own debug lines.

In-process servers (serve_helpers.Served) on the small digits MLP with random weights; each test a second or two.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
tg = pytest.importorskip("tritonclient.grpc")

from serve_helpers import Served, events, metric, model_bytes, sample  # noqa: E402

from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve import logs  # noqa: E402
from specgen.serve.app import ServeOptions  # noqa: E402
from specgen.serve.grpc_server import _at_deadline  # noqa: E402
from specgen.serve.models import ServedModel, load_repository  # noqa: E402

MLP = "digits_mlp"


def _until(check: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _repo(tmp_path: Path) -> list[ServedModel]:
    write_repository(tmp_path, *model_bytes(MLP))
    return load_repository(tmp_path, provider="cpu")


def _body(rows: int, request_id: str, shape: list[int] | None = None, **extra: object) -> bytes:
    x = np.random.default_rng(rows).standard_normal((rows, 8, 8, 1)).astype(np.float32)
    return json.dumps({"id": request_id, **extra, "inputs": [{"name": "image", "shape": shape or list(x.shape),
                                                              "datatype": "FP32", "data": x.reshape(-1).tolist()}]}).encode()


def _grpc_input(rows: int) -> object:
    tensor = tg.InferInput("image", [rows, 8, 8, 1], "FP32")
    tensor.set_data_from_numpy(np.zeros((rows, 8, 8, 1), np.float32))
    return tensor


def _in_flight(served: Served) -> float:
    return metric(httpx.get(f"http://{served.http}/metrics").text, "specgen_requests_in_flight", model=MLP)


def test_model_info_kept_through_a_reload_under_the_same_number(tmp_path: Path) -> None:
    with Served(_repo(tmp_path), ServeOptions(model_control="explicit"), repo=tmp_path) as served:
        def info() -> float | None:
            return sample(httpx.get(f"http://{served.http}/metrics").text, "specgen_model_info", model=MLP, version="1")

        first = served.service.models[MLP][1]
        assert info() == 1
        (tmp_path / MLP / "1" / "model.onnx").write_bytes(model_bytes(MLP, seed=1)[1])  # a new export of version 1
        assert httpx.post(f"http://{served.http}/v2/repository/models/{MLP}/load").status_code == 200
        assert served.service.models[MLP][1] is not first, "version 1 was not reloaded"
        assert info() == 1  # the replaced copy's unload left the new copy's sample alone
        assert httpx.post(f"http://{served.http}/v2/repository/models/{MLP}/unload").status_code == 200
        assert info() is None  # the last copy unloaded: the sample goes


def test_a_request_gone_while_its_batch_runs_is_a_failure_not_a_success(tmp_path: Path) -> None:
    gate, entered = threading.Event(), threading.Event()
    [model] = _repo(tmp_path)

    def held(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        entered.set()
        assert gate.wait(60), "the test never opened the gate"
        return model.run(inputs)

    with Served([dataclasses.replace(model, run=held)], ServeOptions(grpc_port=0)) as served:
        stats = served.service.statistics(MLP, None)[0]
        host, port = served.http.rsplit(":", 1)
        body = _body(2, "leaver")
        with socket.create_connection((host, int(port))) as gone:  # HTTP: the client closes while its batch runs
            gone.sendall(f"POST /v2/models/{MLP}/infer HTTP/1.1\r\nhost: t\r\ncontent-length: {len(body)}\r\n\r\n"
                         .encode() + body)
            assert entered.wait(10), "the batch did not start"
        _until(lambda: _in_flight(served) == 0, "the request whose client left was not answered 499")
        gate.set()
        _until(lambda: stats.execution_count == 1, "the held batch did not finish")
        gate.clear()
        entered.clear()
        client = tg.InferenceServerClient(served.grpc)
        assert client.is_server_live()  # connected now: the deadline below is not spent on the HTTP/2 handshake
        # gRPC: the deadline passes while its batch runs. 2 s (not 0.5 s) so that a stall cannot spend it before the
        # batch starts (the call would then be dropped unrun from the queue); the gate holds the run past it.
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(client.infer, MLP, [_grpc_input(2)], request_id="late", client_timeout=2)
            assert entered.wait(10), "the late call's batch did not start"
            with pytest.raises(tg.InferenceServerException) as late:
                call.result(timeout=30)
        assert late.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        _until(lambda: _in_flight(served) == 0, "the call past its deadline was not let go")
        gate.set()
        _until(lambda: stats.execution_count == 2, "the second held batch did not finish")
        answered = client.infer(MLP, [_grpc_input(3)], request_id="kept")  # one that succeeds, for contrast
        assert answered.as_numpy("logits").shape == (3, 10)
        client.close()
        doc = httpx.get(f"http://{served.http}/v2/models/{MLP}/stats").json()["model_stats"][0]
    counts = {k: v["count"] for k, v in doc["inference_stats"].items()}
    assert counts == {"success": 1, "fail": 2, "queue": 1, "compute_input": 1, "compute_infer": 1,
                      "compute_output": 1, "cache_hit": 0, "cache_miss": 0}
    assert (doc["inference_count"], doc["execution_count"]) == (3, 3)  # rows answered; runs made
    assert {b["batch_size"]: b["compute_infer"]["count"] for b in doc["batch_stats"]} == {2: 2, 3: 1}
    infer = doc["inference_stats"]
    assert infer["compute_infer"]["ns"] == next(b for b in doc["batch_stats"] if b["batch_size"] == 3)[
        "compute_infer"]["ns"]  # only the answered request's run
    assert infer["queue"]["ns"] + infer["compute_infer"]["ns"] <= infer["success"]["ns"]


def test_an_http_request_refused_after_its_json_parsed_is_logged_with_its_id(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="specgen.serve")
    with Served(_repo(tmp_path), ServeOptions(grpc_port=0)) as served:
        url = f"http://{served.http}/v2/models/{MLP}/infer"
        for body in (_body(1, "shape-1", shape=[1, 8, 8]), _body(1, "param-1", parameters={"timeout": "soon"}),
                     _body(1, "", shape=[1, 8, 8]), b'{"id": "torn", "inputs": ['):
            assert httpx.post(url, content=body).status_code == 400
        wrong = tg.InferInput("image", [1, 8, 8], "FP32")
        wrong.set_data_from_numpy(np.zeros((1, 8, 8), np.float32))
        with pytest.raises(tg.InferenceServerException):
            tg.InferenceServerClient(served.grpc).infer(MLP, [wrong], request_id="shape-2")
        time.sleep(0.1)
    # The empty id is no id (as gRPC's empty string); the torn JSON never parsed, so it had none to log.
    assert [(line["protocol"], line["id"]) for line in events(caplog.records, "infer")] == [
        ("http", "shape-1"), ("http", "param-1"), ("http", None), ("http", None), ("grpc", "shape-2")]


@pytest.mark.parametrize(("budget", "remaining", "deadline"), [
    (0.2, 0.030, False),   # a client that cancels 30 ms before a 200 ms deadline: cancelled (0.1 s budget rule: no)
    (0.2, 0.010, True),    # within transit and scheduling of it: its deadline
    (0.3, 0.0, True),      # the server's own copy of the deadline passed
    (12.1, 0.096, True),   # "12S" on the wire: the server's copy ran ~one 100 ms unit late (measured)
    (10.0, 0.5, False),    # 0.5 s of a 10 s deadline left: the client cancelled (the tenth rule said deadline)
    (2.0, 0.013, True),    # measured under load, 2 s deadline: 13 ms left when the client's timer fired
])
def test_deadline_or_cancel_guess_follows_the_grpc_timeout_precision(budget: float, remaining: float,
                                                                      deadline: bool) -> None:
    assert _at_deadline(budget, remaining) is deadline


@pytest.fixture
def saved_logging() -> Iterator[None]:
    """logs.configure changes process-wide logging: put back what pytest and uvicorn had."""
    names = ["", "uvicorn", "uvicorn.error", "uvicorn.access", "grpc._cython.cygrpc"]
    saved = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).level, logging.getLogger(n).propagate)
             for n in names}
    yield
    for name, (handlers, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def test_debug_log_has_no_grpc_line_per_call(tmp_path: Path, saved_logging: None,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with Served(_repo(tmp_path), ServeOptions(grpc_port=0)) as served:
        logs.configure("debug")
        client = tg.InferenceServerClient(served.grpc)
        for _ in range(5):
            assert client.is_server_live()
        client.infer(MLP, [_grpc_input(1)], request_id="dbg")
        client.close()
        time.sleep(0.1)
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert [line for line in lines if line["logger"].startswith("grpc")] == []
    assert [(line["level"], line["id"], line["status"]) for line in lines if line.get("event") == "infer"] == [
        ("debug", "dbg", 200)]  # specgen's own debug line stays
