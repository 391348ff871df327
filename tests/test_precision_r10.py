"""Checker round 10 on precision variants (/tmp/rt10/precision.md).

- F1: the fp16 gate judged overflow before float16's rounding: 65,504 < |x| < 65,520 rounds to a finite 65,504
  (IEEE round-to-nearest-even; numpy's float16 cast is the reference), yet was refused as "computes inf";
  `float16_peak` recorded the pre-rounding float32 figure, which is no float16 value.
- F2: an int8 variant quantizes its inputs to 8-bit integers, which hold no NaN or inf: onnxruntime answers finite
  logits (static) or spoils the whole call (dynamic) where float32 answers NaN. The variant records the inputs it
  quantizes, and the Predictor (so `specgen infer`) and both server protocols refuse NaN / inf there, in one line.
- F3: the server's speed refusal told the operator to pass `--force`, an export flag `specgen serve` does not have.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_precision_verify import WEIGHT, X, _classifier, _quantized, _write

from specgen.cli import main
from specgen.runtime import quantized_inputs
from specgen.runtime.precision import fp16, int8
from specgen.runtime.precision.base import Calibration, PrecisionRefusal
from specgen.runtime.precision.fp16_emulation import FLOAT16_INF_FROM, FLOAT16_MAX, emulate
from specgen.runtime.precision.gates import Timing, speed_verdict
from specgen.runtime.precision.verify import REFERENCE_FILE, check_version
from specgen.runtime.predictor import InputError, Predictor

# --- F1: overflow judged after float16's rounding ------------------------------------------------------------------


def _gemm_to(column: list[float]) -> bytes:
    """x [batch, 3] -> d1 = x @ column (one unit) -> d2 = d1 * 1e-5: with x = 1s, d1 is the column's float32 sum.
    Every weight is a float16 value, so the variant's rounded weights are these."""
    w1 = np.array(column, np.float32).reshape(3, 1)
    w2 = np.full((1, 2), 1e-5, np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w1"], ["d1"]), helper.make_node("Gemm", ["d1", "w2"], ["d2"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("d2", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_the_float16_rounding_boundary_is_numpy_s() -> None:
    """The thresholds the gate and its message use, against numpy's IEEE binary16 cast."""
    assert np.float16(FLOAT16_MAX) == np.finfo(np.float16).max
    assert np.float16(np.nextafter(np.float32(FLOAT16_INF_FROM), np.float32(0))) == FLOAT16_MAX
    with np.errstate(over="ignore"):
        assert np.isinf(np.float16(FLOAT16_INF_FROM)) and np.isinf(np.float16(-FLOAT16_INF_FROM))


@pytest.mark.parametrize("last", [8.0, 15.0])
def test_a_tensor_that_rounds_to_65504_is_not_an_overflow(last: float) -> None:
    """The checker's case: d1 = 32752 + 32752 + last reaches 65,512 / 65,519 in float32 (exact), which float16 rounds
    to a finite 65,504. Refused before as "computes inf there"; now written, and float16_peak is 65,504."""
    variant, _ = fp16.convert(_gemm_to([32752.0, 32752.0, last]), Calibration())
    x = np.ones((4, 3), np.float32)
    outputs, report = emulate(variant, {"x": x})
    reference = np.float16(np.float32(65504.0 + last))  # numpy float16: every tensor rounded, as the GPU writes it
    assert reference == 65504.0
    expected = (np.float32(reference) * np.float16(1e-5).astype(np.float32)).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(outputs["d2"], np.full((4, 2), expected, np.float32))  # one product, rounded once
    assert report["float16_peak"] == {"tensor": "Gemm 'd1'", "abs": 65504.0}


def test_a_tensor_that_rounds_to_inf_is_refused_with_the_rounding_said() -> None:
    variant, _ = fp16.convert(_gemm_to([32752.0, 32752.0, 16.0]), Calibration())  # 65,520: the first that rounds to inf
    with pytest.raises(PrecisionRefusal) as refused:
        emulate(variant, {"x": np.ones((4, 3), np.float32)})
    assert str(refused.value) == (
        "fp16: Gemm 'd1' overflows float16 on the eval set: |x| reaches 65,520 before rounding, and float16 rounds "
        "|x| >= 65,520 to inf (its largest finite value is 65,504), so the variant computes inf there (measured "
        "with float16 arithmetic emulated on the CPU); keep this model in float32, or scale its activations down")


def test_float16_peak_is_a_float16_value() -> None:
    """The checker's MLP recorded 7.041059 (float32, before rounding) where the float16 tensor held 7.04296875. Here
    d1 = 1 + 6 + 2^-10 = 7.0009765625 in float32 (exact); float16's step at 7 is 2^-8, so it holds 7.0."""
    variant, _ = fp16.convert(_gemm_to([1.0, 6.0, 2.0**-10]), Calibration())
    _, report = emulate(variant, {"x": np.ones((2, 3), np.float32)})
    assert float(np.float16(np.float32(7.0009765625))) == 7.0  # the reference: numpy's float16 cast
    assert report["float16_peak"] == {"tensor": "Gemm 'd1'", "abs": 7.0}


# --- F2: an int8 variant refuses NaN and inf in the inputs it quantizes ---------------------------------------------

CALIBRATION = np.random.default_rng(5).standard_normal((32, 64)).astype(np.float32)


@pytest.fixture(scope="module")
def static() -> bytes:
    variant, report = int8.convert(_classifier(WEIGHT), Calibration(inputs={"x": CALIBRATION}))
    assert report["mode"] == "static QDQ"
    return variant


def _refusal(name: str, value: str, at: list[int]) -> str:
    return (f"input '{name}': received {value} at {at}, expected finite numbers: this int8 variant quantizes '{name}' "
            "to 8-bit integers, which hold no NaN or infinity, so its answer would not be the float32 model's (which "
            "passes NaN through); send finite values, or use the float32 model")


def test_without_the_refusal_onnxruntime_answers_nan_as_finite_logits(static: bytes) -> None:
    """Why (onnxruntime is the reference): QuantizeLinear saturates NaN to uint8 0, the low end of the calibrated
    range, so NaN answers exactly what that end answers; float32 (numpy) answers NaN."""
    session = ort.InferenceSession(static, providers=["CPUExecutionProvider"])
    x = np.repeat(X[:1], 2, axis=0)
    x[0, 0] = np.nan
    x[1, 0] = -1e6  # far below the calibrated range: saturates to the same end
    nan_row, low_row = session.run(["logits"], {"x": x})[0]
    assert np.isfinite(nan_row).all() and np.array_equal(nan_row, low_row)
    assert np.isnan(x[:1] @ WEIGHT).all()


@pytest.mark.parametrize(("value", "shown"), [(np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf")])
def test_the_predictor_refuses_a_non_finite_value_in_a_quantized_input(static: bytes, value: float, shown: str) -> None:
    predictor = Predictor(static, "cpu")
    assert predictor.quantized == ("x",)
    x = X[:3].copy()
    x[1, 7] = value
    x[2, 0] = value  # the first in reading order is named
    with pytest.raises(InputError) as refused:
        predictor({"x": x})
    assert str(refused.value) == _refusal("x", shown, [1, 7])
    assert predictor.out_of_range({"x": x}) == _refusal("x", shown, [1, 7])  # what the server asks
    assert np.isfinite(predictor({"x": X[:3]})["logits"]).all()


def test_float32_and_fp16_models_keep_nan_as_data(static: bytes) -> None:
    x = X[:2].copy()
    x[0, 0] = np.nan
    reference = x.astype(np.float64) @ WEIGHT  # numpy: NaN propagates to its row only
    variant, _ = fp16.convert(_classifier(WEIGHT), Calibration())
    for model in (_classifier(WEIGHT), variant):
        predictor = Predictor(model, "cpu")
        assert predictor.quantized == ()
        logits = predictor({"x": x})["logits"]
        assert np.isnan(logits[0]).all() and np.isnan(reference[0]).all()
        np.testing.assert_allclose(logits[1], reference[1], rtol=2e-3, atol=2e-2)  # fp16: 64 products, 2^-11 each


def test_specgen_infer_refuses_it_in_one_line(static: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "model.int8.onnx").write_bytes(static)
    x = X[:4].copy()
    x[2, 3] = np.nan
    np.savez(tmp_path / "edge.npz", x=x)
    code = main(["infer", str(tmp_path / "model.int8.onnx"), "--input", str(tmp_path / "edge.npz"),
                 "--output", str(tmp_path / "out.npz")])
    err = capsys.readouterr().err
    assert code == 1
    assert err.splitlines() == [f"{tmp_path / 'edge.npz'}: error: {_refusal('x', 'nan', [2, 3])}", "1 error found"]
    assert not (tmp_path / "out.npz").exists()


def test_a_dynamic_variant_records_its_input_too() -> None:
    """Dynamic quantization (quantize_dynamic, what int8 does for recurrent graphs) reads NaN as a number and an inf
    turns every row of the call into NaN (onnxruntime below): refused the same way."""
    variant = _quantized(WEIGHT)  # the same dynamic nodes (DynamicQuantizeMatMul) as a recurrent variant's head
    model = onnx.load_from_string(variant)
    quantized_inputs.stamp(model, quantized_inputs.reaching(model.graph))
    assert quantized_inputs.reaching(model.graph) == ["x"]
    session = ort.InferenceSession(variant, providers=["CPUExecutionProvider"])
    x = X[:3].copy()
    x[0, 0] = np.inf
    assert np.isnan(session.run(["logits"], {"x": x})[0][1:]).all()  # the other rows spoiled by row 0
    with pytest.raises(InputError) as refused:
        Predictor(model.SerializeToString(), "cpu")({"x": x})
    assert str(refused.value) == _refusal("x", "inf", [0, 0])


def test_the_export_s_convert_records_a_recurrent_variant_s_input() -> None:
    from serve_helpers import model_bytes

    _, lstm = model_bytes("digits_lstm")
    variant, report = int8.convert(lstm, Calibration())
    assert report["mode"] == "dynamic"
    assert Predictor(variant, "cpu").quantized == ("image",)


def _graph(nodes: list[Any], inputs: dict[str, int]) -> onnx.GraphProto:
    return helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, ["batch", 4]) for n, t in inputs.items()],
                             [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])


def test_reaching_follows_values_not_shapes_and_reads_defensively() -> None:
    nodes = [helper.make_node("Shape", ["shaped"], ["s"]), helper.make_node("Relu", ["q"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "scale"], ["qr"]), helper.make_node("Reshape", ["qr", "s"], ["o"]),
             helper.make_node("Cast", ["ids"], ["idf"], to=TensorProto.FLOAT),
             helper.make_node("QuantizeLinear", ["idf", "scale"], ["qi"]), helper.make_node("Identity", ["plain"], ["out"])]
    graph = _graph(nodes, {"shaped": TensorProto.FLOAT, "q": TensorProto.FLOAT, "ids": TensorProto.INT64,
                           "plain": TensorProto.FLOAT})
    assert quantized_inputs.reaching(graph) == ["q"]  # ids: integers carry no NaN; shaped: only its shape is read
    assert quantized_inputs.read({quantized_inputs.KEY: "not json"}) == ()
    assert quantized_inputs.read({quantized_inputs.KEY: json.dumps({"x": 1})}) == ()
    assert quantized_inputs.read({quantized_inputs.KEY: json.dumps(["x", 3])}) == ("x",)


def test_the_server_refuses_it_over_http_and_grpc(tmp_path: Path) -> None:
    """400 / INVALID_ARGUMENT with the Predictor's line, for binary tensors and for JSON's NaN token alike; a finite
    request is answered, as onnxruntime answers it."""
    httpx = pytest.importorskip("httpx")
    tg = pytest.importorskip("tritonclient.grpc")
    th = pytest.importorskip("tritonclient.http")
    from serve_helpers import Served, model_bytes

    from specgen.runtime.triton import write_repository
    from specgen.serve.models import load_repository

    ir, mlp = model_bytes("digits_mlp")
    images = np.random.default_rng(0).random((32, 8, 8, 1), dtype=np.float32)
    variant, _ = int8.convert(mlp, Calibration(inputs={"image": images}))
    write_repository(tmp_path, ir, variant)
    x = images[:2].copy()
    x[1, 3, 4, 0] = np.nan
    message = _refusal("image", "nan", [1, 3, 4, 0])
    with Served(load_repository(tmp_path, provider="cpu")) as served:
        for client, module in ((tg.InferenceServerClient(served.grpc), tg), (th.InferenceServerClient(served.http), th)):
            tensor = module.InferInput("image", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            with pytest.raises(Exception) as caught:
                client.infer(ir.name, [tensor])
            assert (caught.value.status(), caught.value.message()) == (
                ("StatusCode.INVALID_ARGUMENT", message) if module is tg else ("400", message))
            client.close()
        body = json.dumps({"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32",
                                       "data": x.reshape(-1).tolist()}]})  # Python's json writes the NaN token
        answer = httpx.post(f"http://{served.http}/v2/models/{ir.name}/infer", content=body, timeout=30)
        assert (answer.status_code, answer.json()) == (400, {"error": message})
        good = httpx.post(f"http://{served.http}/v2/models/{ir.name}/infer", timeout=30, json={"inputs": [
            {"name": "image", "shape": [1, 8, 8, 1], "datatype": "FP32", "data": images[:1].reshape(-1).tolist()}]})
    expected = ort.InferenceSession(variant, providers=["CPUExecutionProvider"]).run(None, {"image": images[:1]})[0]
    assert good.status_code == 200
    np.testing.assert_allclose(np.array(good.json()["outputs"][0]["data"], np.float32).reshape(expected.shape),
                               expected, rtol=0, atol=1e-6)


# --- F3: a refusal's advice fits where it is given ------------------------------------------------------------------

SLOWER = Timing((1e-4,) * 9, (1.2e-4,) * 9)
FIGURES = ("int8 0.120 ms vs float32 0.100 ms per batch of 8 on CPUExecutionProvider; time ratio int8/float32 1.20, "
           "96% interval 1.20-1.20 (medians of 9 paired rounds)")


def test_the_export_s_refusal_says_force_and_the_server_s_does_not() -> None:
    with pytest.raises(PrecisionRefusal) as export:
        speed_verdict("int8", "CPUExecutionProvider", 8, SLOWER, force=False)
    assert str(export.value) == f"int8 is not faster: {FIGURES}; pass --force to write it anyway"
    with pytest.raises(PrecisionRefusal) as serve:
        speed_verdict("int8", "CPUExecutionProvider", 8, SLOWER, force=False, advice=None)
    assert str(serve.value) == f"int8 is not faster: {FIGURES}"


def test_the_server_s_speed_refusal_line_has_no_export_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker's line ended "...; pass --force to write it anyway; serving ... (float32) instead": serve has no
    --force and writes nothing. The timing is made slower by hand, so the line is the same on any machine."""
    monkeypatch.setattr("specgen.runtime.precision.verify.paired_timing", lambda *args, **kwargs: SLOWER)
    folder = _write(tmp_path / "1", _quantized(WEIGHT), _classifier(WEIGHT))
    check = check_version(folder, provider="cpu")
    assert check is not None and not check.passed
    assert check.line == (f"{folder / 'model.onnx'}: int8 variant refused on CPUExecutionProvider: int8 is not faster: "
                          f"{FIGURES}; serving {folder / REFERENCE_FILE} (float32) instead")


def test_training_s_overflow_advice_names_the_rounding_threshold() -> None:
    """The same off-by-rounding claim in `specgen train`'s line: "an activation beyond 65504 becomes inf" is false
    from 65,504 to 65,520 (rounded to 65,504). The line is triggered by a real non-finite loss; only its words changed."""
    from types import SimpleNamespace

    from specgen.runtime.commands.session import Session

    session = SimpleNamespace(train_ir=SimpleNamespace(precision="mixed_float16"), step=0)
    assert Session._advice(session, float("nan")) == (  # type: ignore[arg-type]
        "The forward pass overflowed float16 (train.precision mixed_float16): an activation of 65520 or more "
        "(float16's largest value, 65504, plus half its step) rounds to inf and the loss becomes NaN, and loss scaling "
        "protects only the gradients. Train with precision mixed_bfloat16 (float32's range) or float32, or scale the "
        "inputs down (normalize them) so the activations stay within float16")
    assert np.float16(np.float32(65519.0)) == 65504.0  # numpy: the value the old words called inf
