"""Fuzzing inference requests in process (Starlette's TestClient, real onnxruntime): never a 500.

Random JSON bodies, mutations of valid requests (any value replaced by any JSON value or by raw
tokens JSON parsers disagree on: NaN, huge integers, 1e999), random bytes, and binary tensor data
with wrong sizes and header lengths. Every answer must be 200, or a 4xx / 503 whose body is
`{"error": <a string>}`. The models: the digits CNN (batched) and `typed` (one input per datatype).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("httpx")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime.onnx_export import with_weights  # noqa: E402
from specgen.runtime.parity import random_weights  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.app import ServeOptions, create_app  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FUZZ = settings(max_examples=500, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
TYPES = {"f32": "FP32", "f64": "FP64", "i32": "INT32", "i64": "INT64"}
VALID = {
    "digits_cnn": {"id": "r1", "inputs": [{"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32",
                                           "data": [0.5] * 64}], "outputs": [{"name": "logits"}]},
    "typed": {"inputs": [{"name": n, "shape": [1, 2], "datatype": d, "data": [[1, 2]]} for n, d in TYPES.items()]},
}
RAW_TOKENS = ["NaN", "Infinity", "-Infinity", "1e999", "-0", "1" * 5000, "-" + "9" * 4400, "2147483648",
              "9223372036854775808", "1e300", "true", "null", '""', "[]", "{}", "[[[[[[[[]]]]]]]]", '"\\ud800"']


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("fuzz_repo")
    ir = build_ir(load_spec(ROOT / "examples" / "specs" / "digits_cnn.yaml"))
    model = with_weights(onnx.load_from_string(render_files(ir)["model.onnx"]), ir, random_weights(ir, np.random.default_rng(0)))
    write_repository(root, ir, model.SerializeToString())
    from test_serve_limits import write_typed_model  # the same `typed` model the server tests use

    write_typed_model(root)
    with TestClient(create_app(load_repository(root, provider="cpu"), ServeOptions())) as test_client:
        yield test_client


def check(response: Any) -> None:
    """200, or a 4xx / 503 with a JSON error message: never a 500, never a non-JSON error."""
    assert response.status_code == 200 or 400 <= response.status_code < 500 or response.status_code == 503, \
        (response.status_code, response.text[:500])
    if response.status_code != 200:
        body = response.json()
        assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"], body


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
                    max_leaves=30)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside a JSON document (keys and indexes)."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            yield from paths(item, (*prefix, index))


def replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = json.loads(json.dumps(document))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copy


@FUZZ
@given(body=JSON)
def test_random_json_bodies(client: TestClient, body: Any) -> None:
    for model in VALID:
        check(client.post(f"/v2/models/{model}/infer", content=json.dumps(body)))


@FUZZ
@given(data=st.data(), model=st.sampled_from(sorted(VALID)))
def test_mutated_valid_requests(client: TestClient, data: st.DataObject, model: str) -> None:
    valid = VALID[model]
    path = data.draw(st.sampled_from(list(paths(valid))))
    if data.draw(st.booleans()):
        text = json.dumps(replaced(valid, path, data.draw(JSON)))
    else:  # a raw token where the value was: text no Python value serializes to
        text = json.dumps(replaced(valid, path, "@RAW@")).replace('"@RAW@"', data.draw(st.sampled_from(RAW_TOKENS)))
    check(client.post(f"/v2/models/{model}/infer", content=text))


@FUZZ
@given(body=st.binary(max_size=2000), encoding=st.sampled_from(["", "gzip", "deflate", "br"]),
       header_length=st.none() | st.integers(-5, 3000).map(str) | st.text(max_size=5))
def test_random_bytes(client: TestClient, body: bytes, encoding: str, header_length: str | None) -> None:
    headers = {"content-encoding": encoding} if encoding else {}
    if header_length is not None and header_length.isascii() and header_length.isprintable():
        headers["inference-header-content-length"] = header_length
    check(client.post("/v2/models/digits_cnn/infer", content=body, headers=headers))


@FUZZ
@given(rows=st.integers(0, 70), size=st.one_of(st.integers(-10, 20000), st.floats(), st.text(max_size=3), st.none()),
       extra=st.integers(-300, 300), header_delta=st.integers(-20, 20))
def test_binary_sizes(client: TestClient, rows: int, size: Any, extra: int, header_delta: int) -> None:
    header = json.dumps({"inputs": [{"name": "image", "shape": [rows, 8, 8, 1], "datatype": "FP32",
                                     "parameters": {"binary_data_size": size}}]}).encode()
    payload = np.zeros(max(rows * 64 + extra // 4, 0), np.float32).tobytes()
    check(client.post("/v2/models/digits_cnn/infer", content=header + payload,
                      headers={"inference-header-content-length": str(len(header) + header_delta)}))
