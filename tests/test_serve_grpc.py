"""`specgen serve --grpc-port`: the Open Inference Protocol over gRPC beside HTTP, talked to by Triton's own client
(`tritonclient.grpc`) and by the generated stub for what that client does not send (typed `contents`).

One server process shares models, batchers, limits, metrics, statistics and logs between the two protocols; a bad
request gets the status code its HTTP twin maps to and exactly one log line, never a traceback. Models: the
digits CNN with random weights, and a small graph built here with an input of every served datatype.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
grpc = pytest.importorskip("grpc")
tg = pytest.importorskip("tritonclient.grpc")
httpx = pytest.importorskip("httpx")

from serve_helpers import Gate, Served, events, gated, metric, model_bytes  # noqa: E402
from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: E402

from specgen.runtime.predictor import Predictor  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.app import ServeOptions  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402

CNN = "digits_cnn"
MIX_CONFIG = """name: "mix"
backend: "onnxruntime"
max_batch_size: 4
input [
  { name: "f64" data_type: TYPE_FP64 dims: [ 2 ] },
  { name: "i32" data_type: TYPE_INT32 dims: [ 2 ] },
  { name: "i64" data_type: TYPE_INT64 dims: [ 2 ] },
  { name: "u8" data_type: TYPE_UINT8 dims: [ 2 ] }
]
output [
  { name: "f64_out" data_type: TYPE_FP64 dims: [ 2 ] },
  { name: "i32_out" data_type: TYPE_INT32 dims: [ 2 ] },
  { name: "i64_out" data_type: TYPE_INT64 dims: [ 2 ] },
  { name: "u8_out" data_type: TYPE_FP32 dims: [ 2 ] }
]
"""


def mix_model() -> bytes:
    """x + x for FP64, INT32 and INT64 inputs, and UINT8 cast to float32: every datatype the server takes."""
    types = {"f64": TensorProto.DOUBLE, "i32": TensorProto.INT32, "i64": TensorProto.INT64, "u8": TensorProto.UINT8}
    inputs = [helper.make_tensor_value_info(n, t, ["batch", 2]) for n, t in types.items()]
    outputs = [helper.make_tensor_value_info(f"{n}_out", t, ["batch", 2]) for n, t in types.items() if n != "u8"]
    outputs.append(helper.make_tensor_value_info("u8_out", TensorProto.FLOAT, ["batch", 2]))
    nodes = [helper.make_node("Add", [n, n], [f"{n}_out"]) for n in types if n != "u8"]
    nodes.append(helper.make_node("Cast", ["u8"], ["u8_out"], to=TensorProto.FLOAT))
    model = helper.make_model(helper.make_graph(nodes, "mix", inputs, outputs), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model.SerializeToString()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    write_repository(root, *model_bytes(CNN))
    (root / "mix" / "1").mkdir(parents=True)
    (root / "mix" / "1" / "model.onnx").write_bytes(mix_model())
    (root / "mix" / "config.pbtxt").write_text(MIX_CONFIG)
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Served]:
    with Served(load_repository(repo, provider="cpu")) as served:
        yield served


@pytest.fixture(scope="module")
def predictor(repo: Path) -> Predictor:
    return Predictor(repo / CNN / "1" / "model.onnx", provider="cpu")


@pytest.fixture
def client(server: Served) -> Iterator[Any]:
    triton = tg.InferenceServerClient(server.grpc)
    yield triton
    triton.close()


@pytest.fixture
def stub(server: Served) -> Iterator[Any]:
    with grpc.insecure_channel(server.grpc) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 8, 8, 1)).astype(np.float32)


def image_input(x: np.ndarray, name: str = "image", datatype: str = "FP32") -> Any:
    tensor = tg.InferInput(name, list(x.shape), datatype)
    tensor.set_data_from_numpy(x)
    return tensor


def no_traceback(records: list[logging.LogRecord]) -> None:
    assert [r.getMessage() for r in records if r.exc_info or r.levelno >= logging.ERROR] == []


# health, metadata, configuration


def test_health_metadata_and_config(client: Any) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(CNN) and client.is_model_ready(CNN, "1")
    assert not client.is_model_ready(CNN, "2") and not client.is_model_ready("nope")
    server = client.get_server_metadata(as_json=True)
    assert server["name"] == "specgen"
    assert server["extensions"] == ["binary_tensor_data", "model_configuration", "statistics", "model_repository"]
    assert client.get_model_metadata(CNN, as_json=True) == {
        "name": CNN, "versions": ["1"], "platform": "onnxruntime_onnx",
        "inputs": [{"name": "image", "datatype": "FP32", "shape": ["-1", "8", "8", "1"]}],
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": ["-1", "10"]}]}
    config = client.get_model_config(CNN).config  # Triton's ModelConfig message, as read from config.pbtxt
    assert (config.name, config.backend, config.max_batch_size) == (CNN, "onnxruntime", 64)
    assert [(t.name, list(t.dims)) for t in config.input] == [("image", [8, 8, 1])]
    assert config.dynamic_batching.max_queue_delay_microseconds == 1000
    with pytest.raises(tg.InferenceServerException) as caught:
        client.get_model_metadata("nope")
    assert caught.value.status() == "StatusCode.NOT_FOUND"
    assert caught.value.message() == "unknown model 'nope'; this server serves ['digits_cnn', 'mix']"


# inference


def test_infer_raw_is_bitwise_predictor(client: Any, predictor: Predictor) -> None:
    x = images(3, seed=1)
    result = client.infer(CNN, [image_input(x)], request_id="g-1")
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == (CNN, "1", "g-1")
    np.testing.assert_array_equal(result.as_numpy("logits"), predictor({"image": x})["logits"])
    again = client.infer(CNN, [image_input(x)], model_version="1", outputs=[tg.InferRequestedOutput("logits")])
    np.testing.assert_array_equal(again.as_numpy("logits"), predictor({"image": x})["logits"])


def typed(name: str, datatype: str, shape: list[int], field: str, values: list[Any]) -> Any:
    tensor = service_pb2.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)
    getattr(tensor.contents, field).extend(values)
    return tensor


def test_typed_contents_of_every_datatype(stub: Any, predictor: Predictor) -> None:
    """`contents` (what KServe clients other than Triton's send) for FP64, INT32, INT64, UINT8; FP32 on the CNN."""
    request = service_pb2.ModelInferRequest(model_name="mix", id="typed", inputs=[
        typed("f64", "FP64", [2, 2], "fp64_contents", [0.5, -1.25, 1e300, 3.0]),
        typed("i32", "INT32", [2, 2], "int_contents", [-2**31 // 2, 7, 0, 2**30 - 1]),
        typed("i64", "INT64", [2, 2], "int64_contents", [-2**62, 5, 2**61, -1]),
        typed("u8", "UINT8", [2, 2], "uint_contents", [0, 255, 128, 1])])
    response = stub.ModelInfer(request)
    assert response.id == "typed" and [o.name for o in response.outputs] == ["f64_out", "i32_out", "i64_out", "u8_out"]
    raw = dict(zip([o.name for o in response.outputs], response.raw_output_contents, strict=True))
    np.testing.assert_array_equal(np.frombuffer(raw["f64_out"], "<f8"), [1.0, -2.5, 2e300, 6.0])
    np.testing.assert_array_equal(np.frombuffer(raw["i32_out"], "<i4"), [-2**31, 14, 0, 2**31 - 2])
    np.testing.assert_array_equal(np.frombuffer(raw["i64_out"], "<i8"), [-2**63, 10, 2**62, -2])
    np.testing.assert_array_equal(np.frombuffer(raw["u8_out"], "<f4"), [0, 255, 128, 1])
    assert [list(o.shape) for o in response.outputs] == [[2, 2]] * 4
    x = images(2, seed=2)
    fp32 = stub.ModelInfer(service_pb2.ModelInferRequest(
        model_name=CNN, inputs=[typed("image", "FP32", [2, 8, 8, 1], "fp32_contents", x.reshape(-1).tolist())]))
    np.testing.assert_array_equal(np.frombuffer(fp32.raw_output_contents[0], "<f4").reshape(2, 10),
                                  predictor({"image": x})["logits"])


def _raw(model: str, inputs: list[Any], raw: list[bytes], **extra: Any) -> Any:
    return service_pb2.ModelInferRequest(model_name=model, inputs=inputs, raw_input_contents=raw, **extra)


def _image(shape: list[int], datatype: str = "FP32", name: str = "image") -> Any:
    return service_pb2.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)


ONE = np.zeros((1, 8, 8, 1), np.float32).tobytes()
BAD = [
    ("unknown model", _raw("nope", [_image([1, 8, 8, 1])], [ONE]), "NOT_FOUND", 404,
     "unknown model 'nope'; this server serves ['digits_cnn', 'mix']"),
    ("unknown version", _raw(CNN, [_image([1, 8, 8, 1])], [ONE], model_version="7"), "NOT_FOUND", 404,
     "model 'digits_cnn' has no version '7'; the served version is '1'"),
    ("wrong shape", _raw(CNN, [_image([1, 8, 8])], [ONE]), "INVALID_ARGUMENT", 400,
     "input 'image': received shape [1, 8, 8], expected [-1, 8, 8, 1] with a batch size of 1..64 for -1"),
    ("batch too large", _raw(CNN, [_image([65, 8, 8, 1])], [ONE * 65]), "INVALID_ARGUMENT", 400,
     "input 'image': received batch size 65 (shape [65, 8, 8, 1]), expected 1..64 (the model's max_batch_size)"),
    ("wrong datatype", _raw(CNN, [_image([1, 8, 8, 1], "FP64")], [ONE * 2]), "INVALID_ARGUMENT", 400,
     "input 'image': received datatype \"FP64\", expected \"FP32\""),
    ("wrong name", _raw(CNN, [_image([1, 8, 8, 1], name="img")], [ONE]), "INVALID_ARGUMENT", 400,
     "received an input named \"img\"; model 'digits_cnn' expects inputs ['image']"),
    ("short raw data", _raw(CNN, [_image([1, 8, 8, 1])], [ONE[:-1]]), "INVALID_ARGUMENT", 400,
     "input 'image': received 255 bytes of raw_input_contents, expected 256 (64 FP32 values of 4 bytes for shape "
     "[1, 8, 8, 1])"),
    ("raw count", _raw(CNN, [_image([1, 8, 8, 1])], [ONE, ONE]), "INVALID_ARGUMENT", 400,
     "received 2 raw_input_contents for 1 inputs; expected one per input, in the order of 'inputs'"),
    ("no inputs", _raw(CNN, [], []), "INVALID_ARGUMENT", 400,
     "'inputs': received none, expected input tensors named ['image']"),
    ("wrong contents field", _raw(CNN, [typed("image", "FP32", [1, 8, 8, 1], "int_contents", [0] * 64)], []),
     "INVALID_ARGUMENT", 400, "input 'image': received contents.int_contents, expected contents.fp32_contents for FP32 "
     "(or raw_input_contents)"),
    ("contents count", _raw(CNN, [typed("image", "FP32", [1, 8, 8, 1], "fp32_contents", [0.0] * 63)], []),
     "INVALID_ARGUMENT", 400, "input 'image': received 63 values in contents.fp32_contents, expected 64 FP32 values "
     "for shape [1, 8, 8, 1]"),
    ("uint8 out of range", _raw("mix", [typed("f64", "FP64", [1, 2], "fp64_contents", [0, 0]),
                                        typed("i32", "INT32", [1, 2], "int_contents", [0, 0]),
                                        typed("i64", "INT64", [1, 2], "int64_contents", [0, 0]),
                                        typed("u8", "UINT8", [1, 2], "uint_contents", [3, 256])], []),
     "INVALID_ARGUMENT", 400, "input 'u8': received 256 in contents.uint_contents, expected UINT8 integers in 0..255"),
    ("unknown output", _raw(CNN, [_image([1, 8, 8, 1])], [ONE], outputs=[
        service_pb2.ModelInferRequest.InferRequestedOutputTensor(name="probs")]), "INVALID_ARGUMENT", 400,
     "requested output \"probs\" is not an output of model 'digits_cnn'; expected one of ['logits']"),
]


@pytest.mark.parametrize(("case", "request_", "code", "status", "message"), BAD, ids=[c[0] for c in BAD])
def test_bad_request_gets_its_code_and_one_log_line(stub: Any, server: Served, caplog: pytest.LogCaptureFixture,
                                                    case: str, request_: Any, code: str, status: int,
                                                    message: str) -> None:
    with caplog.at_level(logging.INFO):
        with pytest.raises(grpc.RpcError) as caught:
            stub.ModelInfer(request_)
        time.sleep(0.05)  # the log line is written as the answer leaves
    assert caught.value.code() == getattr(grpc.StatusCode, code)
    assert caught.value.details() == message
    [line] = events(caplog.records, "infer")  # exactly one line for the call
    assert (line["protocol"], line["status"], line["code"], line["error"]) == ("grpc", status, code, message)
    no_traceback(caplog.records)


def test_a_message_above_the_limit_is_refused_by_grpc(stub: Any, server: Served) -> None:
    """The limit is the largest request the served models accept, raw or typed (the CNN: 64 rows x 64 FP32 values of
    4 bytes, + 64 KiB for names and parameters): a message past it is refused by gRPC itself, before the server reads
    it."""
    limit = 65536 + 64 * 64 * 4
    too_big = _raw(CNN, [_image([1, 8, 8, 1])], [b"\0" * (limit + 1)])
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(too_big)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"larger than max ({too_big.ByteSize()} vs. {limit})" in caught.value.details()


def test_http_and_grpc_requests_share_one_batch(tmp_path: Path, predictor: Predictor,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """One model, one batcher: an HTTP and a gRPC request sent together run as one batch. The batch is full at
    3 rows (1 + 2), so it runs as soon as both are queued; the 10 s queue delay (the most a config may say) only
    has to outlast a loaded machine's scheduling (a 300 ms delay split them with other jobs on the two cores)."""
    write_repository(tmp_path, *model_bytes(CNN), max_batch_size=3, max_queue_delay_us=10_000_000)
    x, y = images(1, seed=3), images(2, seed=4)
    with Served(load_repository(tmp_path, provider="cpu")) as served, caplog.at_level(logging.INFO):
        client = tg.InferenceServerClient(served.grpc)
        body = {"id": "h", "inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32",
                                       "data": x.reshape(-1).tolist()}]}
        with ThreadPoolExecutor(2) as pool:
            over_http = pool.submit(httpx.post, f"http://{served.http}/v2/models/{CNN}/infer", json=body, timeout=30)
            over_grpc = pool.submit(client.infer, CNN, [image_input(y)], request_id="g")
            http_answer, grpc_answer = over_http.result(), over_grpc.result()
        client.close()
        text = httpx.get(f"http://{served.http}/metrics").text
    [batch] = events(caplog.records, "batch")
    assert sorted(batch["ids"]) == ["g", "h"] and batch["rows"] == 3
    np.testing.assert_allclose(np.float32(http_answer.json()["outputs"][0]["data"]).reshape(1, 10),
                               predictor({"image": x})["logits"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(grpc_answer.as_numpy("logits"), predictor({"image": y})["logits"], rtol=0, atol=1e-6)
    assert metric(text, "specgen_requests_total", model=CNN, protocol="http", status="200") == 1
    assert metric(text, "specgen_requests_total", model=CNN, protocol="grpc", status="200") == 1


# overload, deadlines, connections


@pytest.fixture
def held(repo: Path) -> Iterator[tuple[Served, Gate]]:
    """Both models held in onnxruntime until the gate opens; queue size 1, at most 3 calls at once."""
    gate = Gate()
    models = [gated(m, gate) for m in load_repository(repo, provider="cpu")]
    with Served(models, ServeOptions(grpc_port=0, queue_size=1, grpc_max_rpcs=3)) as served:
        yield served, gate
        gate.set()


def _wait_for(served: Served, running: int, waiting: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        text = httpx.get(f"http://{served.http}/metrics").text
        if (metric(text, "specgen_requests_in_flight", model=CNN), metric(text, "specgen_queue_depth", model=CNN)) \
                == (running + waiting, waiting):
            return
        assert time.monotonic() < deadline, text
        time.sleep(0.01)


def _wait_for_in_flight(served: Served, calls: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        text = httpx.get(f"http://{served.http}/metrics").text
        if metric(text, "specgen_requests_in_flight", model=CNN) == calls:
            return
        assert time.monotonic() < deadline, text
        time.sleep(0.01)


def test_full_queue_is_unavailable_and_too_many_calls_resource_exhausted(
        held: tuple[Served, Gate], predictor: Predictor, caplog: pytest.LogCaptureFixture) -> None:
    served, gate = held
    clients = [tg.InferenceServerClient(served.grpc) for _ in range(5)]
    xs = [images(1, seed=10 + k) for k in range(5)]
    with ThreadPoolExecutor(3) as pool, caplog.at_level(logging.INFO):
        try:
            running = pool.submit(clients[0].infer, CNN, [image_input(xs[0])])
            assert gate.entered.wait(10)  # the first call runs, holding the worker
            _wait_for(served, running=1, waiting=0)
            waiting = pool.submit(clients[1].infer, CNN, [image_input(xs[1])])
            _wait_for(served, running=1, waiting=1)
            with pytest.raises(tg.InferenceServerException) as full:
                clients[2].infer(CNN, [image_input(xs[2])])
            assert full.value.status() == "StatusCode.UNAVAILABLE"
            assert full.value.message() == ("the queue of model 'digits_cnn' is full (1 requests waiting, queue size "
                                            "1); retry later")
            mix = {n: np.zeros((1, 2), d) for n, d in (("f64", np.float64), ("i32", np.int32), ("i64", np.int64),
                                                         ("u8", np.uint8))}
            mix_inputs = [image_input(v, n, {"f64": "FP64", "i32": "INT32", "i64": "INT64", "u8": "UINT8"}[n])
                          for n, v in mix.items()]
            third = pool.submit(clients[3].infer, "mix", mix_inputs)  # held in the other model: 3 calls in flight
            deadline = time.monotonic() + 10
            while metric(httpx.get(f"http://{served.http}/metrics").text, "specgen_requests_in_flight", model="mix") < 1:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            with pytest.raises(tg.InferenceServerException) as exhausted:
                clients[4].infer(CNN, [image_input(xs[4])])
            assert exhausted.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
            assert exhausted.value.message() == "Concurrent RPC limit exceeded!"
        finally:
            gate.set()
        for x, future in ((xs[0], running), (xs[1], waiting)):
            np.testing.assert_array_equal(future.result().as_numpy("logits"), predictor({"image": x})["logits"])
        np.testing.assert_array_equal(third.result().as_numpy("u8_out"), [[0, 0]])
    for c in clients:
        c.close()
    assert [(line["code"], line["status"]) for line in events(caplog.records, "infer")] == [("UNAVAILABLE", 503)]
    no_traceback(caplog.records)


def test_deadline_passed_in_the_queue_is_dropped_unrun(held: tuple[Served, Gate],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    served, gate = held
    first, late = tg.InferenceServerClient(served.grpc), tg.InferenceServerClient(served.grpc)
    assert late.is_server_live()  # connected now: the deadline below is not spent on the HTTP/2 handshake
    with ThreadPoolExecutor(2) as pool, caplog.at_level(logging.INFO):
        running = pool.submit(first.infer, CNN, [image_input(images(1, seed=20))])
        assert gate.entered.wait(10)  # the first call runs, holding the worker
        _wait_for(served, running=1, waiting=0)
        # The worker stays held, so the deadline surely passes while the call waits in the queue; 2 s (not 0.3 s) so
        # that a stall of the server or of this thread cannot spend it before the call is seen queued.
        queued = pool.submit(late.infer, CNN, [image_input(images(2, seed=21))], client_timeout=2)
        _wait_for(served, running=1, waiting=1)
        with pytest.raises(tg.InferenceServerException) as caught:
            queued.result(timeout=30)
        assert caught.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        # The client's timer fires first; the server hears of it (the stream's cancellation) a moment later, and
        # under load that moment can come after the batch runs. Release the batch only once the server has let the
        # late call go (its handler done: one call in flight, the held one): what is tested is that a call gone
        # from the queue is never run, not the race between a cancellation and the next batch.
        _wait_for_in_flight(served, 1)
        gate.set()
        running.result()
        time.sleep(0.2)
    first.close()
    late.close()
    stats = late_stats = served.service.statistics(CNN, None)[0]
    assert (stats.execution_count, stats.inference_count) == (1, 1)  # the 2 late rows never ran
    assert (late_stats.success.count, late_stats.fail.count) == (1, 1)
    # The server only guesses whether a cancelled call met its deadline (grpc_server._at_deadline, tested on its own
    # in test_serve_stats_truth): a stall as the call arrives makes its copy of the deadline late, and then a call
    # the client's timer ended reads as cancelled. Either guess is one failure of a call that never ran.
    [line] = events(caplog.records, "infer")
    assert (line["status"], line["code"], line["error"]) in (
        (504, "DEADLINE_EXCEEDED", "the call's deadline passed before its answer"),
        (499, "CANCELLED", "the client cancelled the call"))
    no_traceback(caplog.records)


def test_connections_that_send_nothing_or_never_read_are_closed(repo: Path) -> None:
    """A connection must finish its handshake within header_timeout; one that never answers the server's keepalive
    ping (a client that stopped reading) is closed send_timeout after it."""
    options = ServeOptions(grpc_port=0, header_timeout=0.5, grpc_keepalive=0.3, send_timeout=0.3)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")  # and an empty SETTINGS frame
    with Served(load_repository(repo, provider="cpu"), options) as served:
        host, port = served.grpc.split(":")
        for sent in (b"", preface):
            with socket.create_connection((host, int(port))) as sock:
                sock.sendall(sent)
                started = time.monotonic()
                time.sleep(1.5)  # reads nothing meanwhile
                sock.settimeout(10)
                while sock.recv(65536):
                    pass  # what the server wrote before closing
                # Closed at 0.5-0.6 s here (header_timeout; keepalive + send_timeout): 5 s leaves a loaded machine
                # 8x that, and still tells these timeouts from gRPC's defaults (120 s handshake, 2 h keepalive).
                assert time.monotonic() - started < 5


def test_stats_over_grpc_are_the_http_figures(client: Any, server: Served) -> None:
    client.infer(CNN, [image_input(images(2, seed=30))])
    over_grpc = client.get_inference_statistics(CNN, as_json=True)["model_stats"]
    over_http = httpx.get(f"http://{server.http}/v2/models/{CNN}/stats").json()["model_stats"]
    assert len(over_grpc) == len(over_http) == 1

    def integers(value: Any) -> Any:  # protobuf's JSON writes uint64 as strings and leaves zero fields out
        if isinstance(value, dict):
            return {k: integers(v) for k, v in value.items() if v not in ({}, [], {"count": 0, "ns": 0})}
        if isinstance(value, list):
            return [integers(v) for v in value]
        return int(value) if isinstance(value, str) and value.isdigit() else value

    assert integers(over_grpc[0]) == integers(over_http[0])
    assert over_http[0]["inference_stats"]["success"]["count"] >= 1


def test_grpc_port_in_use_is_one_line_and_exit_1(repo: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = ("import sys; from pathlib import Path; from specgen.serve import run_server; "
                f"sys.exit(run_server(Path({str(repo)!r}), '127.0.0.1', 0, 'cpu', grpc_port={port}))")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if '"level": "error"' in line]
    assert len(errors) == 1 and f"gRPC cannot listen on 127.0.0.1:{port}: Address already in use" in errors[0]


def test_the_command_serves_grpc_and_drains_it_on_sigterm(repo: Path, predictor: Predictor, tmp_path: Path) -> None:
    """`specgen serve REPO --grpc-port N`: the real command in its own process; SIGTERM exits 0, every log line is
    JSON (gRPC's own C-core lines silenced), none carries a traceback. Both ports 0, the gRPC one read back from
    the server's `grpc_started` line: a port picked here and closed for the child could be taken meanwhile."""
    import json
    import signal

    from port_helpers import grpc_bound_port

    log = tmp_path / "server.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "specgen", "serve", str(repo), "--port", "0",
                                    "--grpc-port", "0", "--provider", "cpu", "--model-control", "poll"],
                                   stderr=stderr, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 60
        client = tg.InferenceServerClient(f"127.0.0.1:{grpc_bound_port(process, log, deadline)}")
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if client.is_server_ready():
                    break
            except tg.InferenceServerException:
                pass
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.1)
        x = images(2, seed=40)
        np.testing.assert_array_equal(client.infer(CNN, [image_input(x)]).as_numpy("logits"),
                                      predictor({"image": x})["logits"])
        client.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]  # every line is JSON
    events_seen = [line.get("event") for line in lines]
    assert "grpc_started" in events_seen and events_seen[-1] == "stopped"
    assert not [line for line in lines if "exception" in line or line["level"] == "error"]


PAIR_CONFIG = """name: "pair" backend: "onnxruntime" max_batch_size: 4
input [ { name: "a" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "b" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "out" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def test_inputs_sharing_a_named_dimension_must_agree_along_it(tmp_path: Path) -> None:
    """`a` and `b` are both [batch, seq] in the graph (the config says [-1] for each: the link is the graph's). Sent at
    lengths 2 and 3, onnxruntime's broadcast failure was a 500 / INTERNAL logged as a model failure; at lengths 1 and
    3 the one step was broadcast over the other input's three (200). Now a client's mistake, in one line."""
    import tritonclient.http as th

    dims = ["batch", "seq"]
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["out"])], "pair",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in ("a", "b")],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, dims)])
    (tmp_path / "pair" / "1").mkdir(parents=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9),
              tmp_path / "pair" / "1" / "model.onnx")
    (tmp_path / "pair" / "config.pbtxt").write_text(PAIR_CONFIG)
    with Served(load_repository(tmp_path, provider="cpu")) as served:
        for a, b in ((2, 3), (1, 3)):
            message = (f"input 'b': received size along 'seq' {b} (shape [1, {b}]), expected {a} like input 'a'"
                       " (the model names both axes 'seq': one length; inputs of independent lengths need a name each "
                       "in the spec)")
            for client, module in ((tg.InferenceServerClient(served.grpc), tg), (th.InferenceServerClient(served.http), th)):
                inputs = [module.InferInput(n, [1, k], "FP32") for n, k in (("a", a), ("b", b))]
                for tensor, k in zip(inputs, (a, b), strict=True):
                    tensor.set_data_from_numpy(np.ones((1, k), np.float32))
                with pytest.raises(Exception) as caught:
                    client.infer("pair", inputs)
                assert (caught.value.status(), caught.value.message()) == (
                    ("StatusCode.INVALID_ARGUMENT", message) if module is tg else ("400", message))
                client.close()
        good = [tg.InferInput(n, [1, 3], "FP32") for n in ("a", "b")]
        for tensor in good:
            tensor.set_data_from_numpy(np.ones((1, 3), np.float32))
        client = tg.InferenceServerClient(served.grpc)
        assert client.infer("pair", good).as_numpy("out").tolist() == [[2.0, 2.0, 2.0]]
        client.close()
