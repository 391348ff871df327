"""A model whose rows are not independent is never given unrelated requests in one run.

`specgen export --precision int8` quantizes a recurrent graph dynamically (runtime/precision/int8.py): its
DynamicQuantizeLinear / DynamicQuantizeLSTM nodes compute one activation scale from the min and max of the whole
input tensor of a run, so requests joined by the dynamic batcher would set each other's precision (a NaN or a
1000.0 in one request changed every other's logits by units). Here, with the real server:

- the dynamically quantized digits LSTM (int8.convert, the export's own conversion) served as version 2 under the
  float32 version 1's config.pbtxt, which asks for dynamic batching with a 200 ms delay (what a kept config, or a
  hand-written one, does): every request runs alone, each answer bitwise equal to onnxruntime running that request
  alone, with a -1000.0 and a 1000.0 request among concurrent ones (NaN, which int8 cannot carry, is refused:
  tests/test_precision_r10.py), and one warning line says why;
- the float32 version 1 beside it, and a statically quantized (QDQ) digits MLP, still batch (fewer onnxruntime runs
  than requests), their answers equal to each request alone;
- the export writes a dynamically quantized variant's config.pbtxt without dynamic_batching, saying why in a
  parameter; a static variant's keeps it.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("uvicorn")
tg = pytest.importorskip("tritonclient.grpc")

from serve_helpers import Served, events, model_bytes  # noqa: E402

from specgen.runtime.precision import int8  # noqa: E402
from specgen.runtime.precision.base import Calibration  # noqa: E402
from specgen.runtime.triton import write_repository  # noqa: E402
from specgen.serve.app import ServeOptions  # noqa: E402
from specgen.serve.coupling import rows_coupled  # noqa: E402
from specgen.serve.models import load_repository  # noqa: E402
from specgen.serve.repository import read_config  # noqa: E402

LSTM, MLP = "digits_lstm", "digits_mlp"
DELAY_US = 200_000  # concurrent requests surely meet in one batch, where batching is allowed


def _images(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, 8, 8, 1), dtype=np.float32)


@pytest.fixture(scope="module")
def models() -> dict[str, Any]:
    lstm_ir, lstm = model_bytes(LSTM)
    mlp_ir, mlp = model_bytes(MLP)
    dynamic, report = int8.convert(lstm, Calibration())
    assert report["mode"] == "dynamic"
    static, report = int8.convert(mlp, Calibration(inputs={"image": _images(64, seed=0)}))
    assert report["mode"] == "static QDQ"
    return {"lstm_ir": lstm_ir, "lstm": lstm, "dynamic": dynamic, "mlp_ir": mlp_ir, "static": static}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, models: dict[str, Any]) -> Path:
    root = tmp_path_factory.mktemp("repo")
    write_repository(root, models["lstm_ir"], models["lstm"], max_queue_delay_us=DELAY_US)
    write_repository(root, models["lstm_ir"], models["dynamic"])  # version 2: the version 1 config is kept
    config = root / LSTM / "config.pbtxt"
    config.write_text(config.read_text() + "version_policy: { all { } }\n")
    write_repository(root, models["mlp_ir"], models["static"], max_queue_delay_us=DELAY_US)
    return root


def _requests() -> list[np.ndarray]:
    """Ordinary images of 1-3 rows, a request of -1000.0 images and one of 1000.0 images among them."""
    xs = [_images(1 + k % 3, seed=10 + k) for k in range(8)]
    xs[2] = np.full((2, 8, 8, 1), -1000.0, np.float32)
    xs[5] = np.full((2, 8, 8, 1), 1000.0, np.float32)
    return xs


def _concurrently(address: str, model: str, version: str, xs: list[np.ndarray]) -> list[np.ndarray]:
    """Every request sent at once through tritonclient.grpc (async_infer); each request's logits, in order."""
    client = tg.InferenceServerClient(address)
    results: list[Any] = [None] * len(xs)
    done = threading.Semaphore(0)

    def answered(k: int) -> Any:
        def callback(result: Any, error: Any) -> None:
            results[k] = error if error is not None else result.as_numpy("logits")
            done.release()

        return callback

    try:
        for k, x in enumerate(xs):
            tensor = tg.InferInput("image", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            client.async_infer(model, [tensor], answered(k), model_version=version)
        for _ in xs:
            assert done.acquire(timeout=30), "a request was not answered"
    finally:
        client.close()
    for result in results:
        assert isinstance(result, np.ndarray), result
    return results


def _alone(model: bytes, x: np.ndarray) -> np.ndarray:
    """onnxruntime on this request alone, one intra-op thread as the server here (`--threads 1`): the quantized
    LSTM's numbers for several rows also depend on how many threads share them."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(["logits"], {"image": x})[0])


def test_a_dynamically_quantized_version_runs_each_request_alone(
        repo: Path, models: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="specgen.serve")
    xs = _requests()
    with Served(load_repository(repo, provider="cpu", threads=1), ServeOptions(grpc_port=0)) as served:
        got = _concurrently(served.grpc, LSTM, "2", xs)
        fp32 = _concurrently(served.grpc, LSTM, "1", xs)
        static = _concurrently(served.grpc, MLP, "", xs)
        stats = {(s.name, s.version): s for s in served.service.statistics(None, None)}
        ready = {(f["model"], f["version"]): f["dynamic_batching"] for f in events(caplog.records, "model_ready")}
    for x, answer in zip(xs, got, strict=True):  # bitwise: its batch-mates' values never enter its answer
        np.testing.assert_array_equal(answer, _alone(models["dynamic"], x))
    dynamic = stats[(LSTM, 2)]
    assert (dynamic.execution_count, dynamic.inference_count) == (len(xs), sum(len(x) for x in xs))
    assert dynamic.success.count == len(xs)
    # the float32 version of the same model and a static int8 model still join requests
    for key, answers, model in (((LSTM, 1), fp32, models["lstm"]), ((MLP, 1), static, models["static"])):
        assert stats[key].execution_count < stats[key].success.count == len(xs), key
        for x, answer in zip(xs, answers, strict=True):
            np.testing.assert_allclose(answer, _alone(model, x), rtol=0, atol=1e-6)
    for x, answer in zip(xs, static, strict=True):  # static QDQ rows are independent: bitwise too
        np.testing.assert_array_equal(answer, _alone(models["static"], x))
    assert ready == {(LSTM, 1): True, (LSTM, 2): False, (MLP, 1): True}
    [off] = events(caplog.records, "batching_off")
    assert (off["model"], off["version"]) == (LSTM, 2)
    assert off["reason"] == (
        "the graph quantizes activations at run time with one scale for the whole run (DynamicQuantizeLSTM x1, "
        "DynamicQuantizeLinear x1): requests joined in one batch would change each other's answers")


def test_the_export_writes_a_dynamic_variant_without_dynamic_batching(tmp_path: Path, models: dict[str, Any]) -> None:
    write_repository(tmp_path, models["lstm_ir"], models["dynamic"])
    write_repository(tmp_path, models["mlp_ir"], models["static"])
    lstm = read_config(tmp_path / LSTM)
    assert not lstm.message.HasField("dynamic_batching") and not lstm.dynamic_batching
    assert lstm.max_batch_size == 64  # requests of up to 64 rows, each run alone
    assert lstm.message.parameters["specgen_dynamic_batching"].string_value == (
        "off: the graph quantizes activations at run time with one scale for the whole run (DynamicQuantizeLSTM x1, "
        "DynamicQuantizeLinear x1): requests joined in one batch would change each other's answers")
    mlp = read_config(tmp_path / MLP)
    assert mlp.dynamic_batching and "specgen_dynamic_batching" not in mlp.message.parameters


def _nested(op: str) -> bytes:
    """y = x inside an If's branches, one branch holding `op` (a node in a subgraph counts as one in the graph)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    then = helper.make_graph([helper.make_node(op, ["x"], ["t"]), helper.make_node("Identity", ["x"], ["y1"])],
                             "then", [], [helper.make_tensor_value_info("y1", TensorProto.FLOAT, ["batch", 4])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["y2"])], "else", [],
                              [helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["batch", 4])])
    cond = helper.make_tensor("c", TensorProto.BOOL, [], [True])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
                              [x], [y], initializer=[cond])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_rows_coupled_reads_the_graph(tmp_path: Path, models: dict[str, Any]) -> None:
    assert rows_coupled(models["lstm"]) is None and rows_coupled(models["static"]) is None
    assert "DynamicQuantizeLSTM x1, DynamicQuantizeLinear x1" in (rows_coupled(models["dynamic"]) or "")
    path = tmp_path / "model.onnx"
    path.write_bytes(models["dynamic"])
    assert rows_coupled(path) == rows_coupled(models["dynamic"])
    assert "(DynamicQuantizeLinear x1)" in (rows_coupled(_nested("DynamicQuantizeLinear")) or "")
    assert rows_coupled(_nested("Relu")) is None
    # onnxruntime's own dynamic quantization of a dense model: DynamicQuantizeLinear before each MatMulInteger
    from onnxruntime.quantization import QuantType, quantize_dynamic

    (tmp_path / "mlp.onnx").write_bytes(model_bytes(MLP)[1])
    quantize_dynamic(tmp_path / "mlp.onnx", tmp_path / "mlp.int8.onnx", weight_type=QuantType.QInt8)
    assert "DynamicQuantizeLinear x" in (rows_coupled(tmp_path / "mlp.int8.onnx") or "")
    assert onnx.load(str(tmp_path / "mlp.int8.onnx")).graph.node  # a real model, read by the same parser
