"""`specgen serve`: the real server on a loopback port, talked to over real HTTP (httpx, tritonclient.http).

Models are the bundled digits specs with random weights (no TensorFlow), written as a Triton
repository by `write_repository`, exactly as `specgen export --triton` lays it out.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from serve_helpers import Gate, bound_port, gated, sample

pytest.importorskip("onnxruntime")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
pytest.importorskip("prometheus_client")

from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime.onnx_export import with_weights  # noqa: E402
from specgen.runtime.parity import random_weights  # noqa: E402
from specgen.runtime.predictor import Predictor  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.app import ServeOptions, create_app  # noqa: E402
from specgen.serve.batcher import Batcher, QueueFull  # noqa: E402
from specgen.serve.model_config import RepositoryError, VersionPolicy, parse_config, read_message  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402
from specgen.serve.protocol import ProtocolError, decode_request, encode_response  # noqa: E402
from specgen.serve.repository import read_repository  # noqa: E402
from specgen.serve.server import server_config  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "examples" / "specs"
CNN = "digits_cnn"


def model_bytes(name: str, seed: int = 0) -> tuple[Any, bytes]:
    ir = build_ir(load_spec(SPECS / f"{name}.yaml"))
    weights = random_weights(ir, np.random.default_rng(seed))
    model = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir, weights)
    return ir, model.SerializeToString()


@pytest.fixture(scope="session")
def built() -> dict[str, tuple[Any, bytes]]:
    return {name: model_bytes(name) for name in ("digits_cnn", "digits_mlp", "digits_resnet")}


@pytest.fixture(scope="session")
def repo(tmp_path_factory: pytest.TempPathFactory, built: dict[str, tuple[Any, bytes]]) -> Path:
    """The export defaults (max_batch_size 64, 1 ms queue delay) for the CNN and the ResNet; the MLP unbatched."""
    root = tmp_path_factory.mktemp("repo")
    write_repository(root, *built["digits_cnn"])
    write_repository(root, *built["digits_resnet"])
    write_repository(root, *built["digits_mlp"], max_batch_size=0)
    return root


@pytest.fixture(scope="session")
def slow_delay_repo(tmp_path_factory: pytest.TempPathFactory, built: dict[str, tuple[Any, bytes]]) -> Path:
    """The CNN with a 200 ms queue delay: concurrent requests surely meet in one batch."""
    root = tmp_path_factory.mktemp("repo_delay")
    write_repository(root, *built["digits_cnn"], max_queue_delay_us=200_000)
    return root


@pytest.fixture(scope="session")
def predictor(repo: Path) -> Predictor:
    return Predictor(repo / CNN / "1" / "model.onnx", provider="cpu")


class ThreadServer:
    """uvicorn serving `app` in a thread on a free loopback port (port 0, read back from the socket)."""

    def __init__(self, app: Any):
        self.server = uvicorn.Server(server_config(app, "127.0.0.1", 0))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the server did not start"
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture(scope="session")
def url(repo: Path) -> Iterator[str]:
    with ThreadServer(create_app(load_repository(repo, provider="cpu"))) as base:
        yield base


@pytest.fixture(scope="session")
def delay_url(slow_delay_repo: Path) -> Iterator[str]:
    with ThreadServer(create_app(load_repository(slow_delay_repo, provider="cpu"))) as base:
        yield base


def images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 8, 8, 1)).astype(np.float32)


def infer_body(x: np.ndarray, **extra: Any) -> dict[str, Any]:
    return {"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32", "data": x.reshape(-1).tolist()}], **extra}


def logits(response: Any) -> np.ndarray:
    assert response.status_code == 200, response.text
    out = response.json()["outputs"][0]
    assert out["name"] == "logits" and out["datatype"] == "FP32"
    return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])


def metric(text: str, name: str, **labels: str) -> float:
    """One sample of the Prometheus text exposition; the series must exist (serve_helpers.metric reads 0 for one
    not made yet)."""
    found = sample(text, name, **labels)
    if found is None:
        raise AssertionError(f"no sample {name} {labels} in /metrics")
    return found


# Repository and config


def test_written_config_parses_back_to_the_same_message(repo: Path) -> None:
    """config.pbtxt as `write_repository` writes it is read into Triton's ModelConfig, and that message written out
    with protobuf's text_format and read again is the same message: no field is lost or misread either way."""
    from google.protobuf import text_format

    for name in ("digits_cnn", "digits_mlp", "digits_resnet"):
        text = (repo / name / "config.pbtxt").read_text()
        message = read_message(text)
        assert read_message(text_format.MessageToString(message)) == message
        assert parse_config(text_format.MessageToString(message)) == parse_config(text)
    cnn = parse_config((repo / CNN / "config.pbtxt").read_text())
    assert (cnn.max_batch_size, cnn.dynamic_batching, cnn.max_queue_delay_us) == (64, True, 1000)
    assert [(t.name, t.datatype, t.dims) for t in cnn.inputs] == [("image", "FP32", (8, 8, 1))]
    assert cnn.version_policy == VersionPolicy("latest", 1)
    mlp = parse_config((repo / "digits_mlp" / "config.pbtxt").read_text())
    assert (mlp.max_batch_size, mlp.dynamic_batching, mlp.inputs[0].dims) == (0, False, (-1, 8, 8, 1))


def test_config_text_format_grammar_and_errors() -> None:
    """Protobuf's own text format reader: comments, adjacent strings, `<>` blocks, lists; a misspelled field, a
    wrong type or a bad value is refused with the line and column."""
    text = textwrap.dedent("""\
        # a comment
        name: "m" 'x'  # adjacent strings join
        max_batch_size: 8
        version_policy { specific { versions: [ 3, 1 ] } }
        input [ { name: "a" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } } ]
        output < name: "b", data_type: TYPE_FP32; dims: [-1, 0x2] >
        dynamic_batching { preferred_batch_size: [ 4, 2 ] max_queue_delay_microseconds: 100
          default_queue_policy { max_queue_size: 5 } }
    """)
    config = parse_config(text)
    assert config.name == "mx" and config.inputs[0].reshape == () and config.inputs[0].model_dims == ()
    assert config.outputs[0].dims == (-1, 2)
    assert (config.preferred_batch_sizes, config.max_queue_size, config.max_queue_delay_us) == ((4, 2), 5, 100)
    assert config.version_policy == VersionPolicy("specific", versions=(1, 3))
    assert config.version_policy.select([1, 2, 3, 4]) == [1, 3]
    assert VersionPolicy("latest", 2).select([1, 2, 5]) == [2, 5] and VersionPolicy("all").select([1, 5]) == [1, 5]
    with pytest.raises(RepositoryError, match=r'^x.pbtxt:2:1: not a Triton model configuration: Message type '
                                              r'"inference.ModelConfig" has no field named "nme".$'):
        parse_config('name: "m"\nnme: "x"', "x.pbtxt")
    with pytest.raises(RepositoryError, match=r"^x.pbtxt:1:17: not a Triton model configuration: "):
        parse_config("max_batch_size: ]", "x.pbtxt")
    with pytest.raises(RepositoryError, match=r"^x.pbtxt: input 'a': data_type TYPE_STRING is not served"):
        parse_config('input [ { name: "a" data_type: TYPE_STRING dims: [1] } ] output [ { name: "b" } ]', "x.pbtxt")
    with pytest.raises(RepositoryError, match=r"^x.pbtxt: version_policy latest has num_versions 0; expected 1 or more$"):
        parse_config('version_policy { latest { num_versions: 0 } } input [ { name: "a" data_type: TYPE_FP32 dims: 1 } ] '
                     'output [ { name: "b" data_type: TYPE_FP32 dims: 1 } ]', "x.pbtxt")


def test_repository_layout(tmp_path: Path, built: dict[str, tuple[Any, bytes]]) -> None:
    ir, data = built["digits_cnn"]
    write_repository(tmp_path, ir, data, version=1)
    write_repository(tmp_path, ir, data, version=3)
    (tmp_path / CNN / "7").mkdir()  # a version folder without a model is not a version
    (tmp_path / "model.onnx").write_bytes(data)  # `specgen export -o DIR --triton` leaves these next to the models
    (tmp_path / ".hidden").mkdir()
    [entry] = read_repository(tmp_path)
    assert (entry.name, entry.version, entry.path) == (CNN, 3, tmp_path / CNN / "3" / "model.onnx")
    [model] = load_repository(tmp_path, provider="cpu")
    assert model.metadata()["versions"] == ["3"] and model.provider == "CPUExecutionProvider"


def test_repository_errors(tmp_path: Path, built: dict[str, tuple[Any, bytes]]) -> None:
    with pytest.raises(RepositoryError, match="no models"):
        read_repository(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RepositoryError, match=r"empty: no config.pbtxt"):
        read_repository(tmp_path)
    (tmp_path / "empty").rmdir()
    ir, data = built["digits_cnn"]
    folder = write_repository(tmp_path, ir, data)
    (folder / "config.pbtxt").write_text((folder / "config.pbtxt").read_text().replace("dims: [ 10 ]", "dims: [ 11 ]"))
    with pytest.raises(RepositoryError, match=r"output 'logits' has shape \['batch', 10\] in the graph; "
                                              r"config.pbtxt declares \[-1, 11\]"):
        load_repository(tmp_path, provider="cpu")
    text = (folder / "config.pbtxt").read_text().replace("dims: [ 11 ]", "dims: [ 10 ]")
    (folder / "config.pbtxt").write_text(text.replace('name: "digits_cnn"', 'name: "other"'))
    with pytest.raises(RepositoryError, match="name 'other' differs from the folder name 'digits_cnn'"):
        read_repository(tmp_path)


# Protocol


def test_health_and_metadata(url: str) -> None:
    with httpx.Client(base_url=url) as client:
        assert client.get("/v2/health/live").status_code == 200
        assert client.get("/v2/health/ready").status_code == 200
        assert client.get("/v2").json()["extensions"] == ["binary_tensor_data", "model_configuration", "statistics",
                                                          "model_repository"]
        assert client.get("/v2/models/digits_cnn").json() == {
            "name": "digits_cnn", "versions": ["1"], "platform": "onnxruntime_onnx",
            "inputs": [{"name": "image", "datatype": "FP32", "shape": [-1, 8, 8, 1]}],
            "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}],
            "provider": "CPUExecutionProvider"}
        assert client.get("/v2/models/digits_cnn/versions/1").json()["name"] == "digits_cnn"
        assert client.get("/v2/models/digits_mlp").json()["inputs"][0]["shape"] == [-1, 8, 8, 1]  # unbatched: full dims
        assert [o["name"] for o in client.get("/v2/models/digits_resnet").json()["outputs"]] == ["logits", "probabilities"]
        assert client.get("/v2/models/digits_cnn/ready").status_code == 200
        config = client.get("/v2/models/digits_cnn/config").json()
        assert config["max_batch_size"] == 64 and config["dynamic_batching"]["max_queue_delay_microseconds"] == 1000
        missing = client.get("/v2/models/nope")
        assert missing.status_code == 404
        assert missing.json() == {
            "error": "unknown model 'nope'; this server serves ['digits_cnn', 'digits_mlp', 'digits_resnet']"}
        assert client.get("/v2/models/digits_cnn/versions/2/ready").json() == {
            "error": "model 'digits_cnn' has no version '2'; the served version is '1'"}
        assert client.get("/v2/nothing").json() == {"error": "Not Found: GET /v2/nothing"}


def test_infer_alone_is_bitwise_predictor(url: str, predictor: Predictor, repo: Path) -> None:
    x = images(3, seed=1)
    expected = predictor({"image": x})["logits"]
    with httpx.Client(base_url=url) as client:
        response = client.post("/v2/models/digits_cnn/infer", json=infer_body(x, id="req-7"))
        body = response.json()
        assert (body["model_name"], body["model_version"], body["id"]) == ("digits_cnn", "1", "req-7")
        assert body["outputs"][0]["shape"] == [3, 10]
        np.testing.assert_array_equal(logits(response), expected)
        nested = infer_body(x)
        nested["inputs"][0]["data"] = x.tolist()  # nested lists as the shape
        np.testing.assert_array_equal(logits(client.post("/v2/models/digits_cnn/versions/1/infer", json=nested)), expected)
        assert "id" not in client.post("/v2/models/digits_cnn/infer", json=nested).json()
        # the unbatched MLP (max_batch_size 0) takes the batch in its full dims and runs each request alone
        mlp = Predictor(repo / "digits_mlp" / "1" / "model.onnx", provider="cpu")
        np.testing.assert_array_equal(
            logits(client.post("/v2/models/digits_mlp/infer", json=infer_body(x))), mlp({"image": x})["logits"])


def test_requested_outputs_and_binary_data(url: str, repo: Path) -> None:
    resnet = Predictor(repo / "digits_resnet" / "1" / "model.onnx", provider="cpu")
    x = images(2, seed=2)
    expected = resnet({"image": x})
    with httpx.Client(base_url=url) as client:
        only = client.post("/v2/models/digits_resnet/infer", json=infer_body(x, outputs=[{"name": "probabilities"}])).json()
        assert [o["name"] for o in only["outputs"]] == ["probabilities"]
        np.testing.assert_array_equal(np.float32(only["outputs"][0]["data"]).reshape(2, 10), expected["probabilities"])
        # binary tensor data extension: raw little-endian input after the JSON header, binary outputs back
        header = json.dumps({"inputs": [{"name": "image", "shape": [2, 8, 8, 1], "datatype": "FP32",
                                         "parameters": {"binary_data_size": x.nbytes}}],
                             "outputs": [{"name": "logits", "parameters": {"binary_data": True}}, {"name": "probabilities"}]})
        response = client.post("/v2/models/digits_resnet/infer", content=header.encode() + x.tobytes(),
                               headers={"Inference-Header-Content-Length": str(len(header))})
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/octet-stream"
        length = int(response.headers["inference-header-content-length"])
        meta = json.loads(response.content[:length])
        assert meta["outputs"][0] == {"name": "logits", "datatype": "FP32", "shape": [2, 10],
                                      "parameters": {"binary_data_size": 80}}
        np.testing.assert_array_equal(np.frombuffer(response.content[length:], "<f4").reshape(2, 10), expected["logits"])
        np.testing.assert_array_equal(np.float32(meta["outputs"][1]["data"]).reshape(2, 10), expected["probabilities"])


def test_tritonclient_http_works_unchanged(url: str, predictor: Predictor) -> None:
    """Triton's own HTTP client (binary inputs and outputs by default) against specgen serve."""
    triton = pytest.importorskip("tritonclient.http")
    x = images(4, seed=3)
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    try:
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(CNN)
        assert client.get_model_metadata(CNN)["inputs"][0]["shape"] == [-1, 8, 8, 1]
        for binary in (True, False):
            tensor = triton.InferInput("image", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x, binary_data=binary)
            result = client.infer(CNN, [tensor], request_id="t1",
                                  outputs=[triton.InferRequestedOutput("logits", binary_data=binary)])
            np.testing.assert_array_equal(result.as_numpy("logits"), predictor({"image": x})["logits"])
        with pytest.raises(triton.InferenceServerException, match="unknown model 'nope'"):
            client.get_model_metadata("nope")
    finally:
        client.close()


def _bad_cases() -> list[tuple[str, str, Any, int, str]]:
    good = infer_body(images(1, seed=0))
    data = good["inputs"][0]["data"]

    def with_input(**changes: Any) -> dict[str, Any]:
        return {"inputs": [{**good["inputs"][0], **changes}]}

    expected_shape = "[-1, 8, 8, 1] with a batch size of 1..64 for -1"
    return [
        ("unknown model", "nope", good, 404, "unknown model 'nope'; this server serves ['digits_cnn', 'digits_mlp', "
                                             "'digits_resnet']"),
        ("malformed JSON", CNN, b'{"inputs": [', 400, "malformed JSON in the request body: Expecting value: line 1 column 13 "
         "(char 12); expected an inference request "
         '{"inputs": [{"name": ..., "shape": [...], "datatype": ..., "data": [...]}]}'),
        ("not an object", CNN, [1], 400, "the request body must be a JSON object; received a list"),
        ("no inputs", CNN, {"outputs": []}, 400, "'inputs': received nothing, expected a list of input tensors named "
         "['image'], as in {\"inputs\": [{\"name\": ..., \"shape\": [...], \"datatype\": ..., \"data\": [...]}]}"),
        ("wrong name", CNN, with_input(name="img"), 400, "received an input named \"img\"; model 'digits_cnn' expects "
                                                        "inputs ['image']"),
        ("wrong datatype", CNN, with_input(datatype="FP64"), 400, "input 'image': received datatype \"FP64\", "
                                                                 "expected \"FP32\""),
        ("wrong shape", CNN, with_input(shape=[1, 8, 8]), 400, f"input 'image': received shape [1, 8, 8], "
                                                              f"expected {expected_shape}"),
        ("wrong dim", CNN, with_input(shape=[1, 8, 7, 1]), 400, f"input 'image': received shape [1, 8, 7, 1], "
                                                               f"expected {expected_shape}"),
        ("negative batch", CNN, with_input(shape=[-1, 8, 8, 1]), 400,
         "input 'image': received shape [-1, 8, 8, 1] with a negative dimension; a request gives each -1 of the model's "
         "shape [-1, 8, 8, 1] its actual size (a batch size of 1..64 for the first), such as [1, 8, 8, 1]"),
        ("batch too large", CNN, with_input(shape=[65, 8, 8, 1], data=data * 65), 400,
         "input 'image': received batch size 65 (shape [65, 8, 8, 1]), expected 1..64 (the model's max_batch_size)"),
        ("wrong data length", CNN, with_input(data=data[:-1]), 400, "input 'image': received 63 data elements, "
         "expected 64 FP32 values for shape [1, 8, 8, 1] (flat row-major or nested)"),
        ("strings as data", CNN, with_input(data=["1.0"] * 64), 400, "input 'image': received a string in 'data', "
                                                                    "expected FP32 numbers"),
        ("ragged data", CNN, with_input(data=[[1.0] * 32, [1.0] * 31]), 400, "input 'image': received nested lists in "
         "'data' that do not match the shape: a list of 2 where dimension 0 of shape [1, 8, 8, 1] is 1, expected 64 FP32 "
         "values for shape [1, 8, 8, 1] (flat row-major or nested)"),
        ("no data", CNN, {"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32"}]}, 400,
         "input 'image': received no 'data', expected 64 FP32 values for shape [1, 8, 8, 1] "
         "(or binary_data_size with binary tensor data)"),
        ("unknown output", CNN, {**good, "outputs": [{"name": "probs"}]}, 400, "requested output \"probs\" is not an "
         "output of model 'digits_cnn'; expected one of ['logits']"),
        ("data and binary data", CNN, with_input(data=None, parameters={"binary_data_size": 256}), 400,
         "input 'image': received both 'data' and binary_data_size, expected one of them"),
    ]


BAD = _bad_cases()


@pytest.mark.parametrize(("case", "model", "body", "status", "message"), BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_rejected_with_its_message(url: str, case: str, model: str, body: Any, status: int, message: str) -> None:
    with httpx.Client(base_url=url) as client:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = client.post(f"/v2/models/{model}/infer", content=content)
        assert response.status_code == status
        assert response.json() == {"error": message}


def test_bad_binary_sizes(url: str) -> None:
    x = images(1, seed=4)
    header = json.dumps({"inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 255}}]}).encode()
    with httpx.Client(base_url=url) as client:
        response = client.post(f"/v2/models/{CNN}/infer", content=header + x.tobytes(),
                               headers={"Inference-Header-Content-Length": str(len(header))})
        assert response.status_code == 400
        assert response.json()["error"] == ("input 'image': received binary_data_size 255, expected 256 "
                                            "(64 FP32 values of 4 bytes for shape [1, 8, 8, 1])")
        response = client.post(f"/v2/models/{CNN}/infer", content=header, headers={"Inference-Header-Content-Length": "999"})
        assert response.json()["error"].startswith("header Inference-Header-Content-Length: received '999', expected")


def test_nan_passes_through(url: str, predictor: Predictor) -> None:
    x = images(2, seed=5)
    x[0, 3, 3, 0] = np.nan
    x[1, 0, 0, 0] = np.inf
    body = json.dumps(infer_body(x))
    assert "NaN" in body and "Infinity" in body  # Python's json writes the bare tokens, as Triton reads them
    with httpx.Client(base_url=url) as client:
        response = client.post(f"/v2/models/{CNN}/infer", content=body)
        assert "NaN" in response.text  # written back as bare NaN tokens too
        got = logits(response)
    expected = predictor({"image": x})["logits"]
    np.testing.assert_array_equal(got, expected)  # assert_array_equal treats NaN == NaN
    assert np.isnan(got[0]).all()


def test_integer_inputs_reshape_and_compression(url: str, predictor: Predictor) -> None:
    """INT64 data and a per-example scalar (dims [1], reshape []) at the protocol level; a gzip body over HTTP."""
    config = parse_config('name: "m" max_batch_size: 4 input [ { name: "ids" data_type: TYPE_INT64 dims: [ 1 ] '
                          'reshape: { shape: [ ] } } ] output [ { name: "score" data_type: TYPE_INT32 dims: [ 1 ] '
                          "reshape: { shape: [ ] } } ]")
    body = json.dumps({"inputs": [{"name": "ids", "shape": [3, 1], "datatype": "INT64", "data": [[1], [2], [3]]}]})
    request = decode_request(body.encode(), None, config)
    assert request.rows == 3 and request.inputs["ids"].dtype == np.int64 and request.inputs["ids"].shape == (3,)
    content, headers = encode_response(config, 2, request, {"score": np.array([7, 8, 9], np.int32)})
    assert headers == {"content-type": "application/json"}
    assert json.loads(content)["outputs"] == [{"name": "score", "datatype": "INT32", "shape": [3, 1], "data": [7, 8, 9]}]
    for data, message in (([1.5, 2, 3], "received a number that is not an integer (1.5) in 'data', expected INT64 integers"),
                          ([1, None, 3], "received null in 'data', expected INT64 integers"),
                          ([2**63, 2, 3], "received 9223372036854775808 in 'data', expected INT64 integers in "
                                          "-9223372036854775808..9223372036854775807")):
        bad = json.dumps({"inputs": [{"name": "ids", "shape": [3, 1], "datatype": "INT64", "data": data}]}).encode()
        with pytest.raises(ProtocolError, match=re.escape(f"input 'ids': {message}")):
            decode_request(bad, None, config)
    x = images(2, seed=6)
    with httpx.Client(base_url=url) as client:
        response = client.post(f"/v2/models/{CNN}/infer", content=gzip.compress(json.dumps(infer_body(x)).encode()),
                               headers={"Content-Encoding": "gzip"})
        np.testing.assert_array_equal(logits(response), predictor({"image": x})["logits"])
        response = client.post(f"/v2/models/{CNN}/infer", content=b"{}", headers={"Content-Encoding": "br"})
        assert response.status_code == 415
        assert response.json() == {"error": "Content-Encoding: received 'br', expected gzip, deflate or none"}


# Batching, isolation, queue


def _concurrently(base: str, bodies: list[bytes]) -> list[Any]:
    async def main() -> list[Any]:
        limits = httpx.Limits(max_connections=len(bodies), max_keepalive_connections=len(bodies))
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
            return await asyncio.gather(*(client.post(f"/v2/models/{CNN}/infer", content=b) for b in bodies))

    return asyncio.run(main())


def test_concurrent_requests_are_batched_and_bad_ones_fail_alone(delay_url: str, predictor: Predictor) -> None:
    inputs = [images(1 + k % 3, seed=100 + k) for k in range(24)]
    x = inputs[0].copy()
    x[0, 0, 0, 0] = np.nan
    inputs[0] = x  # a NaN among the batch-mates does not leak into their rows
    bodies = [json.dumps(infer_body(x)).encode() for x in inputs]
    bad = [json.dumps(infer_body(x)).replace('"FP32"', '"INT32"').encode() for x in inputs[:4]] + [b"{oops"] * 4
    responses = _concurrently(delay_url, bodies + bad)
    for x, response in zip(inputs, responses, strict=False):
        got, alone = logits(response), predictor({"image": x})["logits"]
        np.testing.assert_allclose(got, alone, rtol=0, atol=1e-6)
        assert np.isnan(got).any() == np.isnan(x).any()
    assert [r.status_code for r in responses[len(bodies):]] == [400] * len(bad)
    text = httpx.get(delay_url + "/metrics").text
    runs = metric(text, "specgen_batch_size_count", model=CNN)
    alone = metric(text, "specgen_batch_size_bucket", model=CNN, le="1.0")
    assert runs < len(bodies) and alone < runs, f"{runs} runs, {alone} of one row: no batch had more than one request"
    assert metric(text, "specgen_batch_size_sum", model=CNN) == sum(len(x) for x in inputs)
    assert metric(text, "specgen_requests_total", model=CNN, status="200") == len(bodies)
    assert metric(text, "specgen_requests_total", model=CNN, status="400") == len(bad)
    assert metric(text, "specgen_request_failures_total", model=CNN, reason="invalid") == len(bad)
    assert metric(text, "specgen_request_duration_seconds_count", model=CNN) == len(bodies) + len(bad)
    assert metric(text, "specgen_queue_depth", model=CNN) == 0
    assert metric(text, "specgen_model_info", model=CNN, version="1", provider="CPUExecutionProvider") == 1


def test_full_queue_answers_503_at_once(repo: Path, predictor: Predictor) -> None:
    """Queue size 1 and a held model: one request runs, one waits, the next gets 503 at once; the first two succeed."""
    gate = Gate()
    models = [gated(m, gate) if m.name == CNN else m for m in load_repository(repo, provider="cpu")]
    with ThreadServer(create_app(models, ServeOptions(queue_size=1))) as base, ThreadPoolExecutor(2) as pool:
        xs = [images(1, seed=200 + k) for k in range(3)]
        clients = [httpx.Client(base_url=base, timeout=30) for _ in range(4)]

        def post(k: int) -> Any:
            return clients[k].post(f"/v2/models/{CNN}/infer", json=infer_body(xs[k]))

        def wait_for(in_flight: int, depth: int) -> None:
            deadline = time.monotonic() + 10
            while True:
                text = clients[3].get("/metrics").text
                if (metric(text, "specgen_requests_in_flight", model=CNN), metric(text, "specgen_queue_depth", model=CNN)) \
                        == (in_flight, depth):
                    return
                assert time.monotonic() < deadline, text
                time.sleep(0.01)

        running = pool.submit(post, 0)
        assert gate.entered.wait(10)  # the first request runs, holding the worker
        wait_for(in_flight=1, depth=0)
        waiting = pool.submit(post, 1)
        wait_for(in_flight=2, depth=1)  # the second waits in the queue, which is now full
        refused = post(2)  # answered while the running request still holds the worker: the refusal does not wait
        gate.set()
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json() == {"error": "the queue of model 'digits_cnn' is full (1 requests waiting, queue size 1); "
                                           "retry later"}
        for x, future in ((xs[0], running), (xs[1], waiting)):
            np.testing.assert_array_equal(logits(future.result()), predictor({"image": x})["logits"])
        text = clients[3].get("/metrics").text
        for client in clients:
            client.close()
        assert metric(text, "specgen_request_failures_total", model=CNN, reason="queue_full") == 1


def test_failed_batch_is_retried_per_request() -> None:
    """onnxruntime failing on a batch: only the request that makes it fail gets the error."""
    def run(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if (inputs["x"] < 0).any():
            raise RuntimeError("negative input")
        return {"y": inputs["x"] * 2}

    async def main() -> list[Any]:
        batcher = Batcher("m", run, max_batch_size=8, max_delay=0.05, queue_size=8)
        batcher.start()
        futures = [batcher.submit({"x": np.full((1, 2), v, np.float32)}, 1) for v in (1, -1, 3)]
        tiny = Batcher("n", run, max_batch_size=8, max_delay=0, queue_size=1)  # not started: nothing leaves its queue
        tiny.submit({"x": np.zeros((1, 2))}, 1)
        with pytest.raises(QueueFull, match=r"the queue of model 'n' is full \(1 requests waiting, queue size 1\)"):
            tiny.submit({"x": np.zeros((1, 2))}, 1)
        results = await asyncio.gather(*futures, return_exceptions=True)
        await batcher.close()
        return results

    ok1, failed, ok3 = asyncio.run(main())
    np.testing.assert_array_equal(ok1["y"], [[2, 2]])
    np.testing.assert_array_equal(ok3["y"], [[6, 6]])
    assert isinstance(failed, RuntimeError) and str(failed) == "negative input"


# Graceful shutdown


SERVER = """
import sys, threading, time
from pathlib import Path
from specgen.runtime import predictor

gate = Path(sys.argv[3])
call = predictor.Predictor.__call__
def held_call(self, inputs):  # a slow model: every batch's run waits until the test opens the gate (not the warm-up)
    deadline = time.monotonic() + 60
    while threading.current_thread().name.startswith("onnxruntime-") and not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return call(self, inputs)
predictor.Predictor.__call__ = held_call

from specgen.serve import run_server
sys.exit(run_server(Path(sys.argv[1]), "127.0.0.1", int(sys.argv[2]), "cpu"))
"""


def test_sigterm_answers_requests_in_flight(repo: Path, predictor: Predictor, tmp_path: Path) -> None:
    """SIGTERM while one batch runs and the other requests wait: no new connections, every request answered, exit 0."""
    gate, log = tmp_path / "gate", tmp_path / "server.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen([sys.executable, "-c", SERVER, str(repo), "0", str(gate)], stderr=stderr,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 60
        base = f"http://127.0.0.1:{bound_port(process, log, deadline)}"
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if httpx.get(base + "/v2/health/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.1)
        n = 12
        xs = [images(1, seed=300 + k) for k in range(n)]
        clients = [httpx.Client(base_url=base, timeout=60) for _ in range(n)]
        with ThreadPoolExecutor(n) as pool:
            futures = [pool.submit(c.post, f"/v2/models/{CNN}/infer", json=infer_body(x, id=f"r{k}"))
                       for k, (c, x) in enumerate(zip(clients, xs, strict=True))]
            while metric(httpx.get(base + "/metrics").text, "specgen_requests_in_flight", model=CNN) < n:
                assert time.monotonic() < deadline, "the requests were not all in flight together"
                time.sleep(0.02)
            process.send_signal(signal.SIGTERM)  # one batch is held in onnxruntime, the other requests wait for it
            # draining: no new connections, once uvicorn's main loop (a 0.1 s tick, in another process) has closed
            # the listener; the held batch keeps the server running meanwhile, so it must never have exited
            closing = time.monotonic() + 10
            while True:
                assert process.poll() is None, "the server exited with requests in flight"
                try:
                    httpx.get(base + "/v2/health/live", timeout=1)
                except httpx.ConnectError:
                    break
                except httpx.TransportError:  # accepted just before the listener closed, then closed by the shutdown
                    pass
                assert time.monotonic() < closing, "the server still accepted connections 10 s after SIGTERM"
                time.sleep(0.05)
            assert process.poll() is None, "the server exited with requests in flight"
            gate.touch()
            responses = [f.result() for f in futures]
        for c in clients:
            c.close()
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
    for x, response in zip(xs, responses, strict=True):
        np.testing.assert_allclose(logits(response), predictor({"image": x})["logits"], rtol=0, atol=1e-6)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]  # every line is JSON
    events = [line.get("event") for line in lines]
    assert "drained" in events and events[-1] == "stopped" and "infer" not in events  # no failed request
    ids = [i for line in lines if line.get("event") == "batch" for i in line["ids"]]
    assert sorted(ids) == sorted(f"r{k}" for k in range(n))  # one line per batch, naming its requests


def test_run_server_reports_a_bad_repository(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from specgen.serve import "
                             f"run_server; sys.exit(run_server(Path({str(tmp_path)!r}), '127.0.0.1', 0, 'cpu'))"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "specgen serve: " in result.stderr and "no models" in result.stderr
