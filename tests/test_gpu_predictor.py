"""The Predictor on the CUDA provider: IO binding, prefer_nhwc, CUDA graphs per batch bucket, fp16 (issue 30).

These run where a GPU is lent (the project's GPU machine: `pytest tests/test_gpu_predictor.py`) and skip
elsewhere with the reason; CI has no GPU. Everything that needs no device (the ladder, padding and slicing,
the slot's lock and copy-out, the options handed to onnxruntime) is tested on the CPU in
tests/test_predictor_buckets.py, with the same code.

Tolerances against the CPU provider: onnxruntime's CUDA provider runs float32 convolutions and matrix products
on TF32 units by default (10-bit mantissa: each product within 2^-11 = 4.9e-4 relative), summed in float32 in
another order than the CPU. Over a convolution and a 288-long dot product of values near 1 that stays well under
2e-3 of the largest output (bench/RESULTS.md measured 4.3e-4 on ResNet50's 53 convolutions); a wrong kernel, a
stale bucket buffer or a lost binding is off by the size of the outputs themselves. fp16 stores activations in
float16 (2^-11 relative each) through three layers: 1e-2.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from specgen.runtime.precision import fp16
from specgen.runtime.precision.base import Calibration
from specgen.runtime.predictor import CUDA, Predictor, has_cuda_driver

if CUDA not in ort.get_available_providers():
    pytest.skip(f"onnxruntime {ort.__version__} has no CUDA provider here (install onnxruntime-gpu); these checks run "
                "on the GPU machine", allow_module_level=True)
if not has_cuda_driver():
    pytest.skip("no NVIDIA driver on this machine: the CUDA provider, IO binding and CUDA graphs are checked where "
                "a GPU is lent (bench/RESULTS.md)", allow_module_level=True)

FP32_LIMIT, FP16_LIMIT = 2e-3, 1e-2  # of max |CPU output|: see the module docstring
MAX_BATCH = 16


def _cnn(side: int | str = 16) -> bytes:
    """NHWC image -> Transpose -> Conv -> Relu -> Conv -> Relu -> Flatten -> MatMul: an exported CNN's layout."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((16, 3, 3, 3)) / 5).astype(np.float32), "w1"),
               numpy_helper.from_array((rng.standard_normal((8, 16, 3, 3)) / 12).astype(np.float32), "w2"),
               numpy_helper.from_array((rng.standard_normal((8 * 12 * 12, 10)) / 34).astype(np.float32), "g")]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]), helper.make_node("Conv", ["t", "w1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r1"]), helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r2"]), helper.make_node("Flatten", ["r2"], ["f"]),
             helper.make_node("MatMul", ["f", "g"], ["logits"])]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", side, 16, 3])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


MODEL = _cnn()


def _images(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 16, 16, 3)).astype(np.float32)


def _close(got: np.ndarray, expected: np.ndarray, limit: float) -> None:
    assert got.shape == expected.shape and got.dtype == expected.dtype
    worst = float(np.max(np.abs(got - expected), initial=0.0)) / max(float(np.max(np.abs(expected), initial=0.0)), 1e-30)
    assert worst <= limit, f"max |cuda - cpu| is {worst:.2e} of max |cpu|; limit {limit:g}"


@pytest.fixture(scope="module")
def cpu() -> Predictor:
    return Predictor(MODEL, "cpu")


@pytest.fixture(scope="module")
def graphed() -> Predictor:
    return Predictor(MODEL, "cuda", cuda_graphs=True, max_batch_size=MAX_BATCH)


def test_io_binding_and_nhwc_without_graphs(cpu: Predictor) -> None:
    gpu = Predictor(MODEL, "cuda")
    assert gpu.provider == CUDA and not gpu.graphs and gpu.buckets is None
    options = gpu.session.get_provider_options()[CUDA]
    assert options["prefer_nhwc"] == "1" and options["enable_cuda_graph"] == "0"
    for rows in (1, 3, 8, 33):  # any size: no bucket, inputs and outputs bound on the device per call
        x = _images(rows, seed=rows)
        _close(gpu({"x": x})["logits"], cpu({"x": x})["logits"], FP32_LIMIT)
    today = Predictor(MODEL, "cuda", nhwc=False)  # the Predictor before issue 30
    assert today.session.get_provider_options()[CUDA]["prefer_nhwc"] == "0"


def test_cuda_graphs_match_the_cpu_on_every_bucket(graphed: Predictor, cpu: Predictor) -> None:
    assert graphed.provider == CUDA and graphed.graphs and graphed.graph_note is None
    assert graphed.buckets == (1, 2, 4, 8, 16) and graphed.session.get_provider_options()[CUDA]["enable_cuda_graph"] == "1"
    for previous, bucket in zip((0, *graphed.buckets), graphed.buckets, strict=False):
        for rows in sorted({bucket, previous + 1}):  # a full bucket, and the most padded batch it takes
            x = _images(rows, seed=100 + rows)
            assert graphed.bucket_for(rows) == bucket
            _close(graphed({"x": x})["logits"], cpu({"x": x})["logits"], FP32_LIMIT)
    x = _images(MAX_BATCH * 2 + 3, seed=7)  # beyond the largest bucket: chunks of 16, then 3 padded to 4
    _close(graphed({"x": x})["logits"], cpu({"x": x})["logits"], FP32_LIMIT)


def test_replays_do_not_leak_between_calls_or_threads(graphed: Predictor) -> None:
    a, b = _images(5, seed=1), _images(5, seed=2)
    first = graphed({"x": a})["logits"]
    second = graphed({"x": b})["logits"]
    again = graphed({"x": a})["logits"]
    # a replay of one captured graph on the same input runs the same kernels on the same addresses
    assert np.array_equal(first, again) and not np.array_equal(first, second)
    batches = [_images(rows, seed=rows) for rows in (1, 2, 3, 5, 8, 9, 16, 12) * 4]
    alone = [graphed({"x": x})["logits"] for x in batches]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda x: graphed({"x": x})["logits"], batches))
    for one, other in zip(alone, together, strict=True):
        assert np.array_equal(one, other)
    assert graphed.executor is not None  # the server's batcher may run its batches on it directly
    assert np.array_equal(graphed.executor.submit(graphed, {"x": a}).result(timeout=60)["logits"], first)


def test_fp16_variant_with_graphs(cpu: Predictor) -> None:
    variant, _ = fp16.convert(MODEL, Calibration())
    fp16.check(variant, "cuda")  # every compute node has a float16 CUDA kernel: no PrecisionRefusal
    gpu = Predictor(variant, "cuda", cuda_graphs=True, max_batch_size=8)
    assert gpu.graphs and gpu.buckets == (1, 2, 4, 8)
    for rows in (1, 3, 8):
        x = _images(rows, seed=rows)
        _close(gpu({"x": x})["logits"], cpu({"x": x})["logits"], FP16_LIMIT)


def test_named_dimensions_run_without_graphs_and_say_why(cpu: Predictor) -> None:
    gpu = Predictor(_cnn(side="height"), "cuda", cuda_graphs=True, max_batch_size=8)
    assert gpu.provider == CUDA and not gpu.graphs and gpu.buckets is None
    assert gpu.graph_note == ("CUDA graphs are not used: input 'x' has shape ['batch', 'height', 16, 3]: each bucket "
                              "needs fixed sizes besides the batch")
    x = _images(3)
    _close(gpu({"x": x})["logits"], cpu({"x": x})["logits"], FP32_LIMIT)


def test_an_unverified_fp16_variant_is_gated_on_the_gpu(tmp_path: Path) -> None:
    """Item 7 on the provider it was made for: kernels and accuracy pass on CUDA; speed decides (on a model this
    small fp16 may well not be faster, which is a refusal by the speed gate, never by kernels or accuracy)."""
    import hashlib

    pytest.importorskip("pydantic", reason="verify.py's gates import specgen.runtime.parity, which needs pydantic: "
                        "carry its wheel to the GPU machine")
    from specgen.runtime.precision.verify import VariantInfo, check_version, version_files

    variant, _ = fp16.convert(MODEL, Calibration())
    folder = tmp_path / "1"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(variant)
    info = VariantInfo("fp16", False, None, "made on a CPU", 1.0, None, ("x",), hashlib.sha256(variant).hexdigest())
    for name, data in version_files(info, MODEL, {"x": _images(64)}, None).items():
        (folder / name).write_bytes(data)
    check = check_version(folder, provider="cuda", cuda_graphs=True, max_batch_size=8)
    assert check is not None and check.provider == CUDA
    assert "kernels" in check.report and "accuracy" in check.report, check.line
    assert check.passed or "fp16 is not faster" in check.line, check.line
