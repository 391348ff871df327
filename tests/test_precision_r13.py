"""Round 13 of the precision checks: the accuracy gate compares the exact loss with the budget (never a rounded
one) and prints the digits that show it; a classifier's outputs other than its logits are gated on relative error,
at export and at load; `calibration: entropy` runs a KL search with choices (2048 bins into 128), not minmax."""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_precision_verify import LABELS, WEIGHT, X

from specgen.runtime.precision import int8
from specgen.runtime.precision.base import Calibration, PrecisionRefusal
from specgen.runtime.precision.gates import accuracy_gate, gate_figures
from specgen.runtime.precision.verify import VariantInfo, check_version, version_files

# --- F1: the loss compared exactly, printed with the digits that show the verdict ------------------------------------

def _one_of_360() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """A classifier right on all 360 examples in float32 and on 359 in the variant: 100/360 = 0.2777... points."""
    labels = np.arange(360) % 4
    logits = np.eye(4, dtype=np.float32)[labels]
    flipped = logits.copy()
    flipped[0] = np.roll(flipped[0], 1)
    return {"logits": logits}, {"logits": flipped}, labels


def test_a_budget_above_the_loss_passes_and_one_below_is_refused_with_its_excess() -> None:
    fp32, variant, labels = _one_of_360()
    for budget in (0.2777778, 0.277778):  # both above 0.2777...; rounded to 6 decimals the loss was 0.277778
        report = accuracy_gate("int8", budget, fp32, variant, labels, "logits")
        assert report == {"fp32_accuracy": 1.0, "accuracy": 359 / 360, "lost_points": float(Fraction(100, 360)),
                          "examples": 360, "fp32_correct": 360, "correct": 359, "budget": budget}
    for budget, shown, over in ((0.277777, "0.28", "0.000001"), (0.2777, "0.28", "0.0001"), (0.2, "0.28", "0.08")):
        with pytest.raises(PrecisionRefusal) as refused:
            accuracy_gate("int8", budget, fp32, variant, labels, "logits")
        assert str(refused.value) == (f"int8 loses {shown} points of accuracy against float32 (float32 1.0000, int8 "
                                      f"0.9972 on 360 examples); the budget is {budget} (export.onnx.budget): over "
                                      f"by {over}")


def test_a_loss_equal_to_the_budget_as_written_passes() -> None:
    """3 of 1000 examples is 0.3 points exactly; the float 0.3 is 0.29999..., below it: the spec's decimal counts."""
    labels = np.arange(1000) % 4
    logits = np.eye(4, dtype=np.float32)[labels]
    flipped = logits.copy()
    flipped[:3] = np.roll(flipped[:3], 1, axis=1)
    assert accuracy_gate("int8", 0.3, {"y": logits}, {"y": flipped}, labels, "y")["lost_points"] == 0.3


def test_a_relative_error_refusal_never_reads_over_by_zero() -> None:
    fp32, variant = {"y": np.array([[100000.0]])}, {"y": np.array([[101000.4]])}  # 1.0004%
    with pytest.raises(PrecisionRefusal) as refused:
        accuracy_gate("fp16", 1.0, fp32, variant, None, None)
    assert str(refused.value) == ("fp16 has 1.0004% relative error against float32 (largest over outputs, 1 "
                                  "examples); the budget is 1% (export.onnx.budget): over by 0.0004%")


def test_the_printed_pass_lines_show_the_loss_within_the_budget() -> None:
    from specgen.report.export_lines import variant_lines

    fp32, variant, labels = _one_of_360()
    accuracy = accuracy_gate("int8", 0.2777778, fp32, variant, labels, "logits")
    assert gate_figures(accuracy) == "0.2777778 points of accuracy lost"
    precision = {"precision": "int8", "file": "model.int8.onnx", "bytes": 10, "fp32_bytes": 20, "speed": None,
                 "unverified": "forced", "accuracy": accuracy}
    assert variant_lines("out", precision)[1] == ("int8 accuracy: 0.9972 vs float32 1.0000 (0.2777778 points lost, "
                                                  "budget 0.2777778)")
    assert gate_figures({"lost_points": 0.0, "budget": 1.0}) == "0.00 points of accuracy lost"  # as before


# --- F2: a classifier's other outputs ---------------------------------------------------------------------------------

def _two_outputs(aux_scale: float) -> bytes:
    """x [batch, 64] -> logits = x @ WEIGHT and aux = x @ (AUX * aux_scale): a classifier with a second output."""
    aux = np.random.default_rng(5).standard_normal((64, 3)).astype(np.float32) * aux_scale
    inits = [numpy_helper.from_array(WEIGHT.astype(np.float32), "w"), numpy_helper.from_array(aux, "a")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"]), helper.make_node("MatMul", ["x", "a"], ["aux"])]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4]),
                               helper.make_tensor_value_info("aux", TensorProto.FLOAT, ["batch", 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


AUX_REFUSED = ("int8 output 'aux' has 8.00% relative error against float32 (16 examples; a classifier's outputs other "
               "than its logits 'logits' are gated on it); the budget is 1% (export.onnx.budget): over by 7.00%")


def test_a_classifier_s_other_output_is_gated_on_relative_error() -> None:
    logits = X @ WEIGHT
    aux = X[:, :3]
    fp32 = {"logits": logits, "aux": aux}
    with pytest.raises(PrecisionRefusal) as refused:
        accuracy_gate("int8", 1.0, fp32, {"logits": logits, "aux": aux * 1.08}, LABELS, "logits")
    assert str(refused.value) == AUX_REFUSED
    report = accuracy_gate("int8", 10.0, fp32, {"logits": logits, "aux": aux * 1.08}, LABELS, "logits")
    assert report["lost_points"] == 0.0 and report["relative_error_percent_by_output"] == {"aux": pytest.approx(8.0)}
    assert gate_figures(report) == "0.00 points of accuracy lost, 8.000% relative error in its other outputs ('aux' largest)"


def test_the_other_outputs_in_the_export_line_and_an_older_export_json(tmp_path: Path) -> None:
    from specgen.pictures.export_json import read_export
    from specgen.report.export_lines import variant_lines

    accuracy = {"lost_points": 0.0, "accuracy": 0.975, "fp32_accuracy": 0.975, "budget": 10.0,
                "relative_error_percent": 8.284, "relative_error_percent_by_output": {"aux": 8.284}}
    precision = {"precision": "int8", "file": "model.int8.onnx", "bytes": 10, "fp32_bytes": 20, "speed": None,
                 "unverified": "forced", "accuracy": accuracy}
    assert variant_lines("out", precision)[1:3] == [
        "int8 accuracy: 0.9750 vs float32 0.9750 (0.00 points lost, budget 10)",
        "int8 error of the other outputs: 'aux' 8.284% relative to float32 (budget 10%)"]
    path = tmp_path / "export.json"
    report = {"parity_max_abs_diff": 0.0, "parity_scaled_diff": 0.0, "compared_examples": 360, "precision": precision}
    path.write_text(json.dumps(report))
    assert read_export(path)["precision"]["accuracy"] == accuracy
    for key in ("relative_error_percent", "relative_error_percent_by_output"):  # written before round 13
        del accuracy[key]
    path.write_text(json.dumps(report))
    assert read_export(path)["precision"]["accuracy"] == accuracy
    assert len(variant_lines("out", precision)) == 3  # no line for other outputs: the older file has none


def test_the_server_gates_a_classifier_s_other_output_at_load(tmp_path: Path) -> None:
    """The same gate at load: a dynamic int8 variant whose 'aux' is 8% off float32 is refused, float32 served."""
    import tempfile

    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder) / "float.onnx", Path(folder) / "int8.onnx"
        source.write_bytes(_two_outputs(1.08))
        quantize_dynamic(source, target, weight_type=QuantType.QInt8)
        variant = target.read_bytes()
    info = VariantInfo(precision="int8", verified=False, verified_on=None, reason="forced", budget=1.0,
                       logits="logits", inputs=("x",), model_sha256=hashlib.sha256(variant).hexdigest(),
                       vnni=int8.has_vnni())
    version = tmp_path / "1"
    version.mkdir()
    (version / "model.onnx").write_bytes(variant)
    for name, data in version_files(info, _two_outputs(1.0), {"x": X}, LABELS).items():
        (version / name).write_bytes(data)
    check = check_version(version, provider="cpu")
    assert check is not None and not check.passed
    error = check.line.split("'aux' has ")[1].split("%")[0]  # 8% scaled, plus int8's own rounding on both
    assert 7 < float(error) < 9, check.line
    assert check.line == (
        f"{tmp_path}/1/model.onnx: int8 variant refused on CPUExecutionProvider: int8 output 'aux' has {error}% "
        "relative error against float32 (16 examples; a classifier's outputs other than its logits 'logits' are "
        f"gated on it); the budget is 1% (export.onnx.budget): over by {float(error) - 1:.2f}%; serving "
        f"{tmp_path}/1/model.fp32.onnx (float32) instead")


# --- F3: entropy and percentile calibration -------------------------------------------------------------------------

def _matmul() -> bytes:
    """x [batch, 32] -> y = x @ w: two calibrated tensors (x and y), so an entropy export takes about 2 s."""
    weight = np.random.default_rng(3).standard_normal((32, 8)).astype(np.float32) / 6
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
                              [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10).SerializeToString()


def _outliers() -> np.ndarray:
    """4096 x 32 normal activations and one of 1000: minmax spends the 8 bits on that one value."""
    x = np.random.default_rng(4).standard_normal((4096, 32)).astype(np.float32)
    x[7, 5] = 1000.0
    return x


OUT = "y_QuantizeLinear_Input"  # the quantizer's name for the graph output `y` it quantizes


def _scales(model: bytes) -> dict[str, float]:
    """The activation scales of a QDQ variant: each QuantizeLinear's of a tensor that is not a weight."""
    graph = onnx.load_from_string(model).graph
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    return {n.input[0]: float(values[n.input[1]]) for n in graph.node
            if n.op_type == "QuantizeLinear" and n.input[0] not in values}


Variants = dict[str, list[tuple[bytes, dict[str, Any]]]]


@pytest.fixture(scope="module")
def variants() -> Variants:
    inputs = {"x": _outliers()}
    return {method: [int8.convert(_matmul(), Calibration(method, inputs)) for _ in range(1 if method == "minmax" else 2)]
            for method in ("minmax", "entropy", "percentile")}


def test_entropy_and_percentile_calibrate_other_ranges_than_minmax(variants: Variants) -> None:
    minmax = _scales(variants["minmax"][0][0])
    assert minmax["x"] == pytest.approx(1000.0 / 255, rel=0.02)  # the outlier sets it: 4 units a step
    entropy, percentile = (_scales(variants[method][0][0]) for method in ("entropy", "percentile"))
    assert set(entropy) == set(percentile) == set(minmax)
    # the KL search clips the outlier of x and of the output row it makes; 99.999% of x is within 4.5
    assert entropy["x"] < minmax["x"] / 5 and entropy[OUT] < minmax[OUT] / 2, (entropy, minmax)
    assert percentile["x"] < minmax["x"] / 5, (percentile, minmax)
    assert entropy != percentile


def test_calibrated_variants_are_byte_identical_and_record_their_settings(variants: Variants) -> None:
    for method in ("entropy", "percentile"):
        first, second = variants[method]
        assert first[0] == second[0] and first[1] == second[1]
    assert variants["entropy"][0][1]["calibration"] == "entropy"
    assert variants["entropy"][0][1]["calibration_settings"] == {"num_bins": 2048, "num_quantized_bins": 128,
                                                                 "symmetric": False}
    assert variants["percentile"][0][1]["calibration_settings"] == {"num_bins": 2048, "percentile": 99.999,
                                                                    "symmetric": True}
    assert variants["minmax"][0][1]["calibration_settings"] == {"symmetric": False}
