"""`specgen serve` against the checker's round 13 (rt13/serve), with a real server and real clients (tritonclient over
HTTP and gRPC, http.client):

- F1: config.pbtxt fields that change what a request is answered were accepted and ignored with a 200. Now
  `dynamic_batching.default_queue_policy`'s timeout is honoured as Triton's dynamic batcher honours it (REJECT:
  UNAVAILABLE / 503 unrun; DELAY: behind the requests in time; `allow_timeout_override`), what is not implemented
  (`sequence_batching`, `ensemble_scheduling`, `priority_queue_policy`, ...) is refused at load
  naming the field and its line, and `priority_levels` (order only) is accepted with one warning line.
- F2: a request's `id` went into `batch` and `infer` log lines whole (one 400 KB id: one 400 KB line); it is now
  escaped and cut to 80 characters there, as every other client string, and still echoed whole in the answer.
- F3: `Content-Encoding: x-gzip` (gzip, RFC 9110 8.4.1.3) and `gzip, gzip` (layered) were refused 415.
"""

from __future__ import annotations

import gzip
import http.client
import json
import logging
import re
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
tg = pytest.importorskip("tritonclient.grpc")
th = pytest.importorskip("tritonclient.http")

from serve_helpers import Gate, Served, events, gated, model_bytes  # noqa: E402

from specgen.paths import shown  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.app import ServeOptions  # noqa: E402
from specgen.serve.logs import GRPC_CALL, UnsentAnswers  # noqa: E402
from specgen.serve.model_config import QueuePolicy, RepositoryError, parse_config  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402

MLP = "digits_mlp"
X = np.full((1, 8, 8, 1), 0.5, np.float32)
BODY = json.dumps({"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32",
                               "data": X.ravel().tolist()}]}).encode()


def repository(root: Path, *configs: tuple[str, str]) -> Path:
    """A repository of the digits MLP under each (name, extra config.pbtxt text appended to the exported one);
    the extra text replaces the exported `dynamic_batching` section when it writes its own or another scheduler
    (one of the `scheduling_choice` oneof)."""
    ir, onnx_bytes = model_bytes(MLP)
    base = root / ".base"
    write_repository(base, ir, onnx_bytes)
    exported = (base / MLP / "config.pbtxt").read_text()
    for name, extra in configs:
        folder = root / name
        (folder / "1").mkdir(parents=True)
        (folder / "1" / "model.onnx").write_bytes((base / MLP / "1" / "model.onnx").read_bytes())
        text = exported.replace(f'name: "{MLP}"', f'name: "{name}"')
        if any(s in extra for s in ("dynamic_batching", "sequence_batching", "ensemble_scheduling")):
            text = text.replace("dynamic_batching {\n  max_queue_delay_microseconds: 1000\n}\n", "")
        (folder / "config.pbtxt").write_text(text + extra)
    return root


def line_of(path: Path, field: str) -> int:
    """The line of config.pbtxt where `field` is written (followed by `:` or ` {`, not inside a quoted name)."""
    return next(number for number, line in enumerate(path.read_text().split("\n"), 1)
                if f"{field}:" in line or f"{field} " in line)


# F1: fields that change answers are refused at load, naming the field, its line and column

REFUSED = [
    ("seqb", "sequence_batching { max_sequence_idle_microseconds: 5000000 }\n", "sequence_batching", 1,
     "Triton's sequence batcher: requests of one sequence routed by their correlation ID, state kept across them, "
     "a request without one refused"),
    ("ens", "ensemble_scheduling { }\n", "ensemble_scheduling", 1, "a pipeline of other models"),
    ("prio", "dynamic_batching {\n  priority_levels: 2\n  default_priority_level: 1\n"
             "  priority_queue_policy { key: 1 value { max_queue_size: 3 } }\n}\n",
     "dynamic_batching.priority_queue_policy", 3, "a queue policy of its own per priority level"),
    ("decoupled", "model_transaction_policy { decoupled: true }\n", "model_transaction_policy.decoupled", 28,
     "a decoupled model: any number of responses per request, over a stream"),
    ("trt", "optimization { execution_accelerators { gpu_execution_accelerator : [ { name : \"tensorrt\" } ] } }\n",
     "optimization.execution_accelerators", 16, "another execution provider (TensorRT, OpenVINO) with its own "
     "precision; choose the onnxruntime provider with specgen serve --provider"),
]


@pytest.mark.parametrize(("name", "extra", "field", "column", "what"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_field_this_server_does_not_implement_is_refused_at_load(tmp_path: Path, name: str, extra: str, field: str,
                                                                  column: int, what: str) -> None:
    repo = repository(tmp_path, (name, extra))
    config = repo / name / "config.pbtxt"
    line = line_of(config, field.split(".")[-1])
    with pytest.raises(RepositoryError) as caught:
        load_repository(repo, provider="cpu", threads=1)
    assert str(caught.value) == (f"{shown(config)}:{line}:{column}: {field} is set, and specgen serve does not implement "
                                 f"it ({what}); expected a config without it: remove it, or serve this model with Triton")


def test_an_input_field_is_found_inside_a_list_and_a_cleared_one_is_not_refused() -> None:
    text = ('name: "m" max_batch_size: 4\n'
            'input [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ] optional: false },\n'
            '        { name: "b" data_type: TYPE_FP32 dims: [ 1 ] allow_ragged_batch: true } ]\n'
            'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n')
    with pytest.raises(RepositoryError) as caught:
        parse_config(text, "x.pbtxt")
    column = text.split("\n")[2].index("allow_ragged_batch") + 1
    assert str(caught.value) == (f"x.pbtxt:3:{column}: input.allow_ragged_batch is set, and specgen serve does not implement it "
                                 "(requests of different shapes joined without padding); expected a config without it: "
                                 "remove it, or serve this model with Triton")
    # set to their defaults, the same fields change nothing and load
    config = parse_config(text.replace("allow_ragged_batch: true", "allow_ragged_batch: false")
                          + "response_cache { enable: false }\n", "x.pbtxt")
    assert config.notes == () and config.queue_policy == QueuePolicy()


def test_an_explicit_load_of_a_sequence_model_is_refused_with_one_line(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    repo = repository(tmp_path, ("tmo", ""))
    models = load_repository(repo, provider="cpu", threads=1)
    repository(tmp_path, ("seqb", "sequence_batching { }\n"))
    config = repo / "seqb" / "config.pbtxt"
    expected = (f"{shown(config)}:{line_of(config, 'sequence_batching')}:1: sequence_batching is set, and specgen serve "
                "does not implement it (Triton's sequence batcher: requests of one sequence routed by their correlation "
                "ID, state kept across them, a request without one refused); expected a config without it: remove it, "
                "or serve this model with Triton")
    caplog.set_level(logging.INFO, "specgen.serve")
    with Served(models, ServeOptions(grpc_port=0, model_control="explicit"), repo=repo) as served:
        client = th.InferenceServerClient(served.http)
        with pytest.raises(th.InferenceServerException) as caught:
            client.load_model("seqb")
        assert caught.value.status() == "400" and caught.value.message() == expected
        with pytest.raises(th.InferenceServerException) as infer:
            tensor = th.InferInput("image", [1, 8, 8, 1], "FP32")
            tensor.set_data_from_numpy(X)
            client.infer("seqb", [tensor])
        assert infer.value.status() == "404"  # not served
    [refused] = events(caplog.records, "model_refused")
    assert refused == {"event": "model_refused", "model": "seqb", "version": None, "error": expected}


@pytest.mark.parametrize(("policy", "field", "message"), [
    ("priority_levels: 2\n  default_priority_level: 3", "default_priority_level", "dynamic_batching "
     "default_priority_level is 3; expected a level in 1..2 (priority_levels 2), as Triton requires"),
    ("priority_levels: 2\n  default_priority_level: 1\n  preserve_ordering: true", "priority_levels", "dynamic_batching "
     "has priority_levels 2 with preserve_ordering: true; expected one level, as Triton requires (a request of a "
     "higher priority would be answered before earlier ones)"),
    ("preserve_ordering: true\n  default_queue_policy { default_timeout_microseconds: 10 timeout_action: DELAY }",
     "timeout_action", "dynamic_batching default_queue_policy has timeout_action DELAY with preserve_ordering: true; "
     "expected REJECT, or preserve_ordering false: a delayed request would be answered after later ones (Triton "
     "refuses the same config)"),
], ids=["default-level", "ordering-levels", "ordering-delay"])
def test_what_triton_refuses_in_the_fields_now_read_is_refused(tmp_path: Path, policy: str, field: str,
                                                              message: str) -> None:
    repo = repository(tmp_path, ("q", f"dynamic_batching {{\n  max_queue_delay_microseconds: 1000\n  {policy}\n}}\n"))
    config = repo / "q" / "config.pbtxt"
    line = line_of(config, field)
    column = config.read_text().split("\n")[line - 1].index(field) + 1
    with pytest.raises(RepositoryError) as caught:
        load_repository(repo, provider="cpu", threads=1)
    assert str(caught.value) == f"{shown(config)}:{line}:{column}: {message}"


def test_priority_levels_load_with_one_warning_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = repository(tmp_path, ("p", "dynamic_batching {\n  max_queue_delay_microseconds: 1000\n  priority_levels: 2\n"
                                      "  default_priority_level: 1\n}\n"))
    caplog.set_level(logging.INFO, "specgen.serve")
    [model] = load_repository(repo, provider="cpu", threads=1)
    assert events(caplog.records, "config_field_ignored") == [{
        "event": "config_field_ignored", "model": "p", "version": 1, "field": "dynamic_batching.priority_levels",
        "reason": "one queue in arrival order: a request's priority does not move it ahead of others (order only), "
                  "and max_queue_size bounds that one queue, not each level"}]
    assert [r.levelname for r in caplog.records if getattr(r, "fields", {}).get("event") == "config_field_ignored"] == [
        "WARNING"]
    assert model.config.message.dynamic_batching.priority_levels == 2  # GET config still echoes the file


def test_a_response_cache_loads_with_one_warning_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A cache answers a repeated request with the answer the model gave: without one, every request runs the model
    and gets the same answer, so the config loads (it was refused at load, keeping Triton repositories away)."""
    repo = repository(tmp_path, ("c", "response_cache { enable: true }\n"))
    caplog.set_level(logging.INFO, "specgen.serve")
    [model] = load_repository(repo, provider="cpu", threads=1)
    assert events(caplog.records, "config_field_ignored") == [{
        "event": "config_field_ignored", "model": "c", "version": 1, "field": "response_cache.enable",
        "reason": "no response cache: every request runs the model (the same answers; only speed and Triton's cache "
                  "statistics differ)"}]
    assert model.config.message.response_cache.enable  # GET config still echoes the file


# F1: default_queue_policy honoured as Triton's dynamic batcher honours it

POLICIES = (
    ("strict", "dynamic_batching {\n  max_queue_delay_microseconds: 1000\n  default_queue_policy { "
               "default_timeout_microseconds: 300000 timeout_action: REJECT allow_timeout_override: false }\n}\n"),
    ("override", "dynamic_batching {\n  max_queue_delay_microseconds: 1000\n  default_queue_policy { "
                 "default_timeout_microseconds: 300000 allow_timeout_override: true }\n}\n"),
    ("delay", "dynamic_batching {\n  max_queue_delay_microseconds: 1000\n  default_queue_policy { "
              "default_timeout_microseconds: 50000 timeout_action: DELAY }\n}\n"),
)
CONFIG_TIMEOUT = (r"request timeout expired: the request waited \d+\.\d ms in the queue of model '{model}', past the "
                  r"timeout of {us} microseconds that its config\.pbtxt sets \(dynamic_batching default_queue_policy "
                  r"default_timeout_microseconds\), and was not run")
OWN_TIMEOUT = (r"request timeout expired: the request waited \d+\.\d ms in the queue of model '{model}', past its "
               r"timeout of {us} microseconds, and was not run")


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Gate]]:
    repo = repository(tmp_path_factory.mktemp("r13"), *POLICIES)
    gate = Gate()
    gate.set()
    models = [gated(m, gate) for m in load_repository(repo, provider="cpu", threads=1)]
    with Served(models) as served:
        yield served, gate
        gate.set()


def _hold(served: Served, gate: Gate, model: str, pool: ThreadPoolExecutor) -> Any:
    """One request of `model` held in its run; its future."""
    gate.clear()
    gate.entered.clear()
    future = pool.submit(_http_infer, served, model, "held", 0)
    assert gate.entered.wait(10), "the first request did not start"
    return future


def _http_infer(served: Served, model: str, request_id: str, timeout: int) -> str:
    tensor = th.InferInput("image", [1, 8, 8, 1], "FP32")
    tensor.set_data_from_numpy(X)
    try:
        result = th.InferenceServerClient(served.http).infer(model, [tensor], request_id=request_id, timeout=timeout)
        return f"200 {result.get_response()['id']}"
    except th.InferenceServerException as exc:
        return f"{exc.status()} {exc.message()}"


def _grpc_infer(served: Served, model: str, timeout: int) -> str:
    tensor = tg.InferInput("image", [1, 8, 8, 1], "FP32")
    tensor.set_data_from_numpy(X)
    try:
        tg.InferenceServerClient(served.grpc).infer(model, [tensor], timeout=timeout)
        return "OK"
    except tg.InferenceServerException as exc:
        return f"{exc.status()} {exc.message()}"


def test_the_configs_timeout_rejects_a_queued_request_over_both_protocols(policies: tuple[Served, Gate]) -> None:
    """default_timeout_microseconds with REJECT: a request still queued past it is answered UNAVAILABLE / 503 unrun,
    though it asked no timeout; with allow_timeout_override false its own shorter `timeout` is ignored."""
    served, gate = policies
    with ThreadPoolExecutor(4) as pool:
        try:
            held = _hold(served, gate, "strict", pool)
            http_answer = pool.submit(_http_infer, served, "strict", "a", 0)
            grpc_answer = pool.submit(_grpc_infer, served, "strict", 50_000)  # asks 50 ms: not allowed to shorten
            expected = CONFIG_TIMEOUT.format(model="strict", us=300000)
            assert re.fullmatch(f"503 {expected}", http_answer.result(10))
            assert re.fullmatch(f"StatusCode.UNAVAILABLE {expected}", grpc_answer.result(10))
        finally:
            gate.set()
        assert held.result(10) == "200 held"


def test_allow_timeout_override_lets_a_request_shorten_the_configs_timeout(policies: tuple[Served, Gate]) -> None:
    served, gate = policies
    with ThreadPoolExecutor(4) as pool:
        try:
            held = _hold(served, gate, "override", pool)
            shorter = pool.submit(_http_infer, served, "override", "a", 50_000)
            longer = pool.submit(_grpc_infer, served, "override", 10_000_000)  # may not lengthen it
            assert re.fullmatch("503 " + OWN_TIMEOUT.format(model="override", us=50000), shorter.result(10))
            assert re.fullmatch("StatusCode.UNAVAILABLE " + CONFIG_TIMEOUT.format(model="override", us=300000),
                                longer.result(10))
        finally:
            gate.set()
        assert held.result(10) == "200 held"


def test_delay_runs_a_request_past_its_timeout_after_those_in_time(policies: tuple[Served, Gate],
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """timeout_action DELAY: two requests past their 50 ms are answered 200, after a later request still in time,
    in their own order."""
    served, gate = policies
    batcher = served.service.models["delay"][1].batcher
    caplog.set_level(logging.INFO, "specgen.serve")

    def queued(count: int) -> None:
        deadline = time.monotonic() + 10
        while batcher.waiting < count:
            assert time.monotonic() < deadline, f"{count} requests were not queued"
            time.sleep(0.01)

    with ThreadPoolExecutor(4) as pool:
        try:
            held = _hold(served, gate, "delay", pool)
            late = [pool.submit(_http_infer, served, "delay", "late-1", 0)]
            queued(1)
            late.append(pool.submit(_http_infer, served, "delay", "late-2", 0))
            queued(2)
            time.sleep(0.3)  # past their 50 ms in the queue: delayed
            in_time = pool.submit(_http_infer, served, "delay", "in-time", 0)
            queued(3)
        finally:
            gate.set()
        assert [f.result(10) for f in (held, *late, in_time)] == ["200 held", "200 late-1", "200 late-2", "200 in-time"]
    batches = [e["ids"] for e in events(caplog.records, "batch") if e["model"] == "delay"]
    assert batches[-1] == ["in-time", "late-1", "late-2"]


# F2: a request's id is cut and escaped in log lines, echoed whole in the answer

def _post(served: Served, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(*served.http.split(":"), timeout=30)
    connection.request("POST", f"/v2/models/{MLP}/infer", body, headers or {})
    response = connection.getresponse()
    answer = response.status, response.read()
    connection.close()
    return answer


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("r13mlp")
    write_repository(root, *model_bytes(MLP))
    with Served(load_repository(root, provider="cpu", threads=1)) as served:
        yield served


def test_a_long_id_is_cut_in_log_lines_and_echoed_whole(mlp: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "specgen.serve")
    long_id = "A" * 200_000
    body = json.loads(BODY)
    status, answer = _post(mlp, json.dumps({**body, "id": long_id}).encode())
    assert status == 200 and json.loads(answer)["id"] == long_id
    bad = {"id": "B" * 200_000 + "\n", "inputs": [{**body["inputs"][0], "shape": [1, 8, 8]}]}
    assert _post(mlp, json.dumps(bad).encode())[0] == 400
    tensor = tg.InferInput("image", [1, 8, 8, 1], "FP32")
    tensor.set_data_from_numpy(X)
    result = tg.InferenceServerClient(mlp.grpc).infer(MLP, [tensor], request_id="C\u202e" * 10_000)
    assert result.get_response().id == "C\u202e" * 10_000
    cut = {"A": "A" * 77 + "...", "B": "B" * 77 + "...", "C": "C\\u202e" * 11 + "..."}
    batch_ids = [i for e in events(caplog.records, "batch") for i in e["ids"]]
    assert batch_ids == [cut["A"], cut["C"]]
    infer_ids = [(e["protocol"], e["status"], e["id"]) for e in events(caplog.records, "infer")]
    assert infer_ids == [("http", 200, cut["A"]), ("http", 400, cut["B"]), ("grpc", 200, cut["C"])]
    assert max(len(record.getMessage()) + len(json.dumps(getattr(record, "fields", {})))
               for record in caplog.records) < 2_000


def test_an_unsent_grpc_answer_line_cuts_its_id() -> None:
    class ExecuteBatchError(Exception):
        pass

    record = logging.LogRecord("grpc._cython.cygrpc", logging.ERROR, __file__, 1,
                               "ExecuteBatchError raised in core by servicer method [/inference.GRPCInferenceService/"
                               "ModelInfer]", None, (ExecuteBatchError, ExecuteBatchError(), None))
    token = GRPC_CALL.set({"model": MLP, "id": "D" * 100_000, "status": 200})
    grpc_aio = logging.getLogger(record.name)
    level = grpc_aio.level
    grpc_aio.setLevel(logging.INFO)  # the line is info: kept only where info is logged
    try:
        assert UnsentAnswers().filter(record)
    finally:
        GRPC_CALL.reset(token)
        grpc_aio.setLevel(level)
    assert record.fields == {  # type: ignore[attr-defined]
        "event": "answer_unsent", "protocol": "grpc", "method": "/inference.GRPCInferenceService/ModelInfer",
        "model": MLP, "id": "D" * 77 + "...", "status": 200,
        "error": "the call ended (its deadline passed or its client cancelled) as its answer went out"}


# F3: Content-Encoding: x-gzip is gzip; layered codings are undone in order

def test_x_gzip_and_layered_codings_are_read(mlp: Served) -> None:
    status, plain = _post(mlp, BODY)
    assert status == 200
    deflate = zlib.compress(gzip.compress(BODY))  # gzip applied first, then deflate
    for encoding, body in (("x-gzip", gzip.compress(BODY)), ("X-GZIP", gzip.compress(BODY)),
                           ("gzip, gzip", gzip.compress(gzip.compress(BODY))), ("gzip,deflate", deflate),
                           ("identity, gzip", gzip.compress(BODY))):
        assert _post(mlp, body, {"Content-Encoding": encoding}) == (200, plain), encoding
    for encoding, body, answer in (
        ("gzip, gzip, gzip", BODY, (415, "Content-Encoding: received 'gzip, gzip, gzip', 3 layered codings; this server "
                                        "undoes at most 2 (such as 'gzip, gzip'): expected one coding, or two")),
        ("gzip, br", BODY, (415, "Content-Encoding: received 'br', expected gzip, deflate or none")),
        ("deflate, gzip", gzip.compress(BODY), (400, "the body is not valid deflate data (coding 1 of 2 in "
                                                     "Content-Encoding): Error -3 while decompressing data: incorrect "
                                                     "header check")),
        ("gzip, gzip", gzip.compress(gzip.compress(BODY) + b"xx"), (400, "the gzip body (coding 1 of 2 in "
                                                                   "Content-Encoding) has 2 bytes after the end of its "
                                                                   "compressed data (a second member or trailing "
                                                                   "bytes); expected exactly one gzip stream")),
    ):
        status, text = _post(mlp, body, {"Content-Encoding": encoding})
        assert (status, json.loads(text)["error"]) == answer, encoding
