"""`specgen serve` against the protocol as Triton speaks it, HTTP and gRPC alike (the checker's findings of
/tmp/rt/serve/REPORT.md, as classes of problem):

- one table of edge requests sent over BOTH protocols (raw JSON over HTTP, the generated gRPC stub), each with the
  same outcome: status and gRPC code, and the very same message (parameters.py checks both protocols' parameters);
- Triton's own clients (tritonclient.http and .grpc) asking for shared memory: refused, never a 200 that leaves the
  region unwritten;
- HTTP-only edges (Inference-Header-Content-Length 0, binary data without that header, an empty list);
- the model configuration: one message for both protocols, HTTP's its JSON with 64-bit integers as numbers;
- statistics: requests refused before the queue (bad requests, a full queue) count in no statistics, as in Triton;
- the `timeout` parameter: a request still queued when it passes is dropped unrun, UNAVAILABLE / 503.

One server per module (HTTP and gRPC); its model's runs can be held by a gate the tests close and open.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
grpc = pytest.importorskip("grpc")
tg = pytest.importorskip("tritonclient.grpc")
th = pytest.importorskip("tritonclient.http")
httpx = pytest.importorskip("httpx")

from google.protobuf import json_format  # noqa: E402
from serve_helpers import Served, metric, model_bytes  # noqa: E402
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc  # noqa: E402

from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.app import ServeOptions  # noqa: E402
from specgen.serve.models import ServedModel, load_repository  # noqa: E402

CNN = "digits_cnn"
IMAGE = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 8, 8, 1)
# What config.pbtxt may hold beyond what `specgen export --triton` writes, all of it in force or informative.
EXTRA_CONFIG = ('parameters { key: "team" value { string_value: "vision" } }\n'
                'default_model_filename: "model.onnx"\n')
QUEUE_POLICY = ("max_queue_delay_microseconds: 1000\n  preferred_batch_size: [ 4, 8 ]\n"
                "  default_queue_policy { max_queue_size: 200 }")


@dataclass
class Gate:
    """Holds the model's runs while closed; `entered` is set when a run has started."""

    open: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)

    def held(self, model: ServedModel) -> ServedModel:
        def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            self.entered.set()
            assert self.open.wait(60), "the test never opened the gate"
            return model.run(inputs)

        return replace(model, run=run)


@dataclass
class Server:
    served: Served
    gate: Gate
    stub: Any

    def stats(self) -> Any:
        return self.served.service.statistics(CNN, None)[0]

    def metrics(self) -> str:
        return httpx.get(f"http://{self.served.http}/metrics").text


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("conformance")
    write_repository(root, *model_bytes(CNN))
    config = root / CNN / "config.pbtxt"
    config.write_text(config.read_text().replace("max_queue_delay_microseconds: 1000", QUEUE_POLICY) + EXTRA_CONFIG)
    gate = Gate()
    gate.open.set()
    models = [gate.held(m) for m in load_repository(root, provider="cpu", threads=1)]
    # A queue of 2 (the config says 200; --queue-size wins) so that a full queue takes three held requests.
    with Served(models, ServeOptions(grpc_port=0, queue_size=2)) as served:
        channel = grpc.insecure_channel(served.grpc)
        yield Server(served, gate, service_pb2_grpc.GRPCInferenceServiceStub(channel))
        gate.open.set()
        channel.close()


# One table, both protocols


@dataclass(frozen=True)
class Case:
    """One edge request: what differs from a valid one-image request, and the outcome both protocols must give."""

    name: str
    fragment: str | None  # a part of the refusal's message; None: answered 200
    request: dict[str, Any] = field(default_factory=dict)  # request parameters
    input: dict[str, Any] = field(default_factory=dict)  # parameters of the input
    output: dict[str, Any] | None = None  # parameters of the one requested output; None: outputs not named
    shape: tuple[int, ...] = (1, 8, 8, 1)
    data: bool = True
    outputs_empty: bool = False
    id: str = "c-1"


CASES = [
    Case("shared memory input", "parameter 'shared_memory_byte_size' of input 'image': shared memory is not supported "
         "by this server; send the data in the request", input={"shared_memory_region": "in0",
                                                                 "shared_memory_byte_size": 256}, data=False),
    Case("shared memory output", "parameter 'shared_memory_byte_size' of output 'logits': shared memory is not "
         "supported by this server", output={"shared_memory_region": "out0", "shared_memory_byte_size": 40}),
    Case("binary_data_output a string", "parameter 'binary_data_output' of the request: received \"true\" (a string), "
         "expected a boolean (true or false)", request={"binary_data_output": "true"}),
    Case("binary_data a number", "parameter 'binary_data' of output 'logits': received 1, expected a boolean",
         output={"binary_data": 1}),
    Case("timeout a string", "parameter 'timeout' of the request: received \"soon\" (a string), expected an unsigned "
         "integer: the microseconds the request may wait in the queue (0: no limit)", request={"timeout": "soon"}),
    Case("timeout negative", "parameter 'timeout' of the request: received -1, expected an unsigned integer",
         request={"timeout": -1}),
    Case("priority negative", "parameter 'priority' of the request: received -1, expected an unsigned integer",
         request={"priority": -1}),
    Case("priority a fraction", "parameter 'priority' of the request: received 1.5, expected an unsigned integer",
         request={"priority": 1.5}),
    Case("sequence_start a string", "parameter 'sequence_start' of the request: received \"yes\" (a string), expected "
         "a boolean", request={"sequence_id": 7, "sequence_start": "yes"}),
    Case("reserved triton_ key", "parameter 'triton_enable_empty_final_response' of the request: parameter keys "
         "starting with 'triton_' are reserved", request={"triton_enable_empty_final_response": True}),
    Case("negative dimension", "input 'image': received shape [-1, 8, 8, 1] with a negative dimension; a request gives "
         "each -1 of the model's shape [-1, 8, 8, 1] its actual size (a batch size of 1..64 for the first), such as "
         "[1, 8, 8, 1]", shape=(-1, 8, 8, 1)),
    # Valid parameters Triton defines, and a custom key, pass; no output named (an empty list): every output.
    Case("empty outputs, valid parameters", None, outputs_empty=True,
         request={"priority": 3, "timeout": 10_000_000, "sequence_id": "s-1", "sequence_end": False, "team": "x"}),
    Case("empty id", None, id=""),
]


def _http_body(case: Case) -> dict[str, Any]:
    tensor: dict[str, Any] = {"name": "image", "shape": list(case.shape), "datatype": "FP32"}
    if case.data:
        tensor["data"] = IMAGE.reshape(-1).tolist()
    if case.input:
        tensor["parameters"] = case.input
    body: dict[str, Any] = {"id": case.id, "inputs": [tensor]}
    if case.output is not None:
        body["outputs"] = [{"name": "logits", "parameters": case.output}]
    elif case.outputs_empty:
        body["outputs"] = []
    if case.request:
        body["parameters"] = case.request
    return body


def _set(parameters: Any, values: dict[str, Any]) -> None:
    """Python values into a gRPC parameter map, each in the oneof member of its type (as tritonclient sets them)."""
    members = {bool: "bool_param", int: "int64_param", float: "double_param", str: "string_param"}
    for key, value in values.items():
        setattr(parameters[key], members[type(value)], value)


def _grpc_request(case: Case) -> Any:
    request = service_pb2.ModelInferRequest(model_name=CNN, id=case.id)
    tensor = request.inputs.add(name="image", datatype="FP32", shape=case.shape)
    _set(tensor.parameters, case.input)
    if case.data:
        request.raw_input_contents.append(IMAGE.tobytes())
    if case.output is not None:
        _set(request.outputs.add(name="logits").parameters, case.output)
    _set(request.parameters, case.request)
    return request


def _http_outcome(server: Server, case: Case) -> tuple[int, str | None, Any]:
    response = httpx.post(f"http://{server.served.http}/v2/models/{CNN}/infer", json=_http_body(case))
    body = response.json()
    return response.status_code, body.get("error"), body


def _grpc_outcome(server: Server, case: Case) -> tuple[str, str | None, Any]:
    try:
        response = server.stub.ModelInfer(_grpc_request(case), timeout=30)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details(), None
    return "OK", None, response


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_edge_requests_have_one_outcome_over_both_protocols(server: Server, case: Case) -> None:
    status, message, body = _http_outcome(server, case)
    code, details, response = _grpc_outcome(server, case)
    if case.fragment is not None:
        assert (status, code) == (400, "INVALID_ARGUMENT")
        assert message is not None and case.fragment in message
        assert details == message  # the same words, whichever protocol carried the request
        return
    assert (status, code) == (200, "OK"), (message, details)
    assert [o["name"] for o in body["outputs"]] == [o.name for o in response.outputs] == ["logits"]
    assert ("id" in body, response.id) == ((True, case.id) if case.id else (False, ""))  # an empty id is not echoed


def test_tritonclient_shared_memory_is_refused_never_left_unwritten(server: Server) -> None:
    """Triton's clients set shared memory on inputs and outputs; answered 200, a client reads a region nothing wrote."""
    for module, address in ((th, server.served.http), (tg, server.served.grpc)):
        client = module.InferenceServerClient(address)
        output = module.InferRequestedOutput("logits")
        output.set_shared_memory("out0", 40)
        image = module.InferInput("image", [1, 8, 8, 1], "FP32")
        image.set_data_from_numpy(IMAGE)
        with pytest.raises(module.InferenceServerException, match="shared memory is not supported by this server"):
            client.infer(CNN, [image], outputs=[output])
        image.set_shared_memory("in0", 256)
        with pytest.raises(module.InferenceServerException,
                           match="of input 'image': shared memory is not supported by this server; send the data in "
                                 "the request"):
            client.infer(CNN, [image])
        client.close()


# HTTP only: its body framing


def _post(server: Server, content: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"http://{server.served.http}/v2/models/{CNN}/infer", content=content, headers=headers or {})


def test_inference_header_content_length_zero_means_all_json(server: Server) -> None:
    """Triton reads 0 as "the whole body is the JSON header" (its `header_length != 0` test)."""
    body = json.dumps(_http_body(Case("zero", None))).encode()
    response = _post(server, body, {"Inference-Header-Content-Length": "0"})
    assert response.status_code == 200 and response.json()["outputs"][0]["name"] == "logits"


def test_binary_data_without_its_header_names_the_header(server: Server) -> None:
    header = json.dumps({"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 256}}]}).encode()
    response = _post(server, header + IMAGE.tobytes())
    assert response.status_code == 400
    assert response.json()["error"] == (
        f"the request body has 256 bytes after its JSON and input 'image' declares binary_data_size, but no header "
        f"Inference-Header-Content-Length says where the JSON ends: binary tensor data needs that header, giving the "
        f"byte length of the JSON part ({len(header)} here)")


def test_an_empty_list_is_called_so(server: Server) -> None:
    response = _post(server, json.dumps({"inputs": []}).encode())
    assert response.status_code == 400
    assert response.json()["error"].startswith("'inputs': received an empty list, expected a list of input tensors")


# The model configuration: one message, two protocols


def test_http_config_is_the_grpc_config_as_json(server: Server) -> None:
    http = th.InferenceServerClient(server.served.http)
    answers = [http.get_model_config(CNN), http.get_model_config(CNN, "1")]
    http.close()
    client = tg.InferenceServerClient(server.served.grpc)
    message = client.get_model_config(CNN).config
    client.close()
    for answer in answers:  # the JSON reads back into the very message gRPC answers
        assert json_format.ParseDict(answer, model_config_pb2.ModelConfig()) == message
    config = answers[0]
    assert (config["platform"], config["backend"], config["default_model_filename"]) == (
        "onnxruntime_onnx", "onnxruntime", "model.onnx")
    assert config["parameters"] == {"team": {"string_value": "vision"}}
    assert config["instance_group"] == [{"name": "", "kind": "KIND_AUTO", "count": 1, "gpus": [], "secondary_devices": [],
                                         "profile": [], "passive": False, "host_policy": ""}]
    batching = config["dynamic_batching"]
    # 64-bit integers are JSON numbers, as Triton's HTTP writes them (protobuf's JSON would write "1000")
    assert (batching["max_queue_delay_microseconds"], batching["preferred_batch_size"]) == (1000, [4, 8])
    assert batching["default_queue_policy"]["max_queue_size"] == 200
    assert config["input"][0]["dims"] == [8, 8, 1] and config["max_batch_size"] == 64
    assert config["version_policy"] == {"latest": {"num_versions": 1}}  # Triton's default, filled for both


# Statistics and the timeout: what reached the queue counts


def _in_threads(calls: list[Callable[[], Any]]) -> list[Any]:
    """Start each call in its own thread; futures, in order."""
    pool = ThreadPoolExecutor(len(calls))
    futures = [pool.submit(call) for call in calls]
    pool.shutdown(wait=False)
    return futures


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def _http_image() -> Any:
    image = th.InferInput("image", [1, 8, 8, 1], "FP32")
    image.set_data_from_numpy(IMAGE)
    return image


def _hold_first(server: Server, client: Any) -> Any:
    """Close the gate and start one request; return its future once its run has started (and is held)."""
    server.gate.open.clear()
    server.gate.entered.clear()
    [running] = _in_threads([lambda: client.infer(CNN, [_http_image()])])
    assert server.gate.entered.wait(10), "the first request did not start"
    return running


def _grpc_image() -> Any:
    image = tg.InferInput("image", [1, 8, 8, 1], "FP32")
    image.set_data_from_numpy(IMAGE)
    return image


def test_statistics_count_only_what_reached_the_queue(server: Server) -> None:
    """Bad requests and a full queue never reach the model: no `fail` (Triton gives them no statistics), while the
    metrics still count every failure by its reason."""
    before, metrics = server.stats(), server.metrics()
    fail, success = before.fail.count, before.success.count
    invalid = metric(metrics, "specgen_request_failures_total", model=CNN, reason="invalid")
    full = metric(metrics, "specgen_request_failures_total", model=CNN, reason="queue_full")
    for shape in ((-1, 8, 8, 1), (1, 8, 8)):  # refused while checked, over both protocols
        case = Case("refused", "shape", shape=shape)
        assert _http_outcome(server, case)[0] == 400 and _grpc_outcome(server, case)[0] == "INVALID_ARGUMENT"
    http = th.InferenceServerClient(server.served.http, concurrency=4)
    try:
        running = _hold_first(server, http)
        waiting = _in_threads([lambda: http.infer(CNN, [_http_image()]) for _ in range(2)])
        _until(lambda: server.served.service.models[CNN][1].batcher.waiting == 2, "two requests were not queued")
        with pytest.raises(th.InferenceServerException, match="is full") as caught:  # the queue of 2 is full
            http.infer(CNN, [_http_image()])
        assert caught.value.status() == "503"
    finally:
        server.gate.open.set()
    for future in (running, *waiting):
        assert future.result(timeout=30).as_numpy("logits").shape == (1, 10)
    http.close()
    after, metrics = server.stats(), server.metrics()
    assert (after.success.count - success, after.fail.count - fail) == (3, 0)
    assert metric(metrics, "specgen_request_failures_total", model=CNN, reason="invalid") - invalid == 4
    assert metric(metrics, "specgen_request_failures_total", model=CNN, reason="queue_full") - full == 1


def test_timeout_drops_a_request_still_queued_and_counts_it(server: Server) -> None:
    """`timeout` (microseconds, Triton's parameter, sent by tritonclient's `timeout=`): a request still waiting when it
    passes is answered UNAVAILABLE / 503 at once and never runs; one whose batch has started runs to its end. Both
    were admitted to the queue, so the dropped one counts in `fail`."""
    before = server.stats()
    runs, rows, fail = before.execution_count, before.inference_count, before.fail.count
    http = th.InferenceServerClient(server.served.http, concurrency=2)
    grpc_client = tg.InferenceServerClient(server.served.grpc)
    try:
        running = _hold_first(server, http)  # no timeout; held in its run
        started = time.monotonic()
        with pytest.raises(th.InferenceServerException, match="request timeout expired") as over_http:
            http.infer(CNN, [_http_image()], timeout=50_000)
        with pytest.raises(tg.InferenceServerException, match="request timeout expired") as over_grpc:
            grpc_client.infer(CNN, [_grpc_image()], timeout=50_000, priority=2)
        assert time.monotonic() - started < 5, "answered only when the held batch ended"
        assert (over_http.value.status(), over_grpc.value.status()) == ("503", "StatusCode.UNAVAILABLE")
        assert "past its timeout of 50000 microseconds, and was not run" in over_grpc.value.message()
    finally:
        server.gate.open.set()
    assert running.result(timeout=30).as_numpy("logits").shape == (1, 10)
    # A timeout shorter than the run it is already in: the run finishes and answers.
    server.gate.open.clear()
    server.gate.entered.clear()
    try:
        # 1 s, not 200 ms: a stall of the server before the batch starts must not spend it. Its timer starts before
        # the run does, so holding the run 1.2 s from its start outlasts it.
        [late] = _in_threads([lambda: grpc_client.infer(CNN, [_grpc_image()], timeout=1_000_000)])
        assert server.gate.entered.wait(10)
        time.sleep(1.2)  # past its timeout, spent in its run
    finally:
        server.gate.open.set()
    assert late.result(timeout=30).as_numpy("logits").shape == (1, 10)
    http.close()
    grpc_client.close()
    after = server.stats()
    assert (after.execution_count - runs, after.inference_count - rows) == (2, 2)  # the two dropped never ran
    assert after.fail.count - fail == 2
    text = server.metrics()
    assert metric(text, "specgen_request_failures_total", model=CNN, reason="deadline") >= 2
