"""Precision pieces without training: the registry, fp16's kept float32 ops, the gates' messages, spec errors."""

from __future__ import annotations

import typing
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from specgen.cli import main
from specgen.runtime.precision import NAMES, REGISTRY, fp16, int8
from specgen.runtime.precision.base import Calibration, PrecisionRefusal
from specgen.runtime.precision.gates import Timing, accuracy_gate, speed_verdict
from specgen.runtime.predictor import Predictor
from specgen.spec.io import OnnxExport

ROOT = Path(__file__).resolve().parents[1]


def test_registry_matches_the_spec_literal() -> None:
    literal = typing.get_args(OnnxExport.model_fields["precision"].annotation)
    assert literal == NAMES == ("fp32", "fp16", "int8")
    assert {n: d.file_name for n, d in REGISTRY.items()} == {"fp16": "model.fp16.onnx", "int8": "model.int8.onnx"}
    assert REGISTRY["fp16"] is fp16.DEF and REGISTRY["int8"] is int8.DEF


def _norm_graph() -> bytes:
    """Gemm -> LayerNormalization -> Softmax, float32, with weights: the ops fp16 must keep in float32."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((4, 6)).astype(np.float32), "w"),
               numpy_helper.from_array(np.ones(6, np.float32), "gamma"),
               numpy_helper.from_array(np.zeros(6, np.float32), "beta")]
    nodes = [helper.make_node("Gemm", ["x", "w"], ["h"]),
             helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["n"]),
             helper.make_node("Softmax", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return model.SerializeToString()


def test_fp16_keeps_io_norms_and_softmax_in_float32() -> None:
    source = _norm_graph()
    converted, report = fp16.convert(source, Calibration())
    model = onnx.load_from_string(converted)
    assert report == {"kept_float32": ["LayerNormalization", "Softmax"]}
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.value_info}
    io = [v.type.tensor_type.elem_type for v in (*model.graph.input, *model.graph.output)]
    assert io == [TensorProto.FLOAT, TensorProto.FLOAT]
    assert model.graph.initializer[0].data_type == TensorProto.FLOAT16  # the Gemm's weight is float16
    nodes = {n.op_type: n for n in model.graph.node}
    casts = {n.output[0]: helper.get_attribute_value(n.attribute[0]) for n in model.graph.node if n.op_type == "Cast"}
    assert casts[nodes["LayerNormalization"].input[0]] == TensorProto.FLOAT  # a Cast back to float32 feeds it
    assert types.get(nodes["LayerNormalization"].output[0], TensorProto.FLOAT) == TensorProto.FLOAT
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    expected = Predictor(source, provider="cpu")({"x": x})["y"]
    # float16 keeps 11 significant bits (2^-11 = 4.9e-4 relative) in the Gemm; softmax outputs are <= 1
    np.testing.assert_allclose(Predictor(converted, provider="cpu")({"x": x})["y"], expected, atol=2e-3)


def test_speed_gate_refuses_a_slower_variant_and_force_records_it() -> None:
    slower = Timing((0.000331,) * 9, (0.000472,) * 9)  # paired rounds (gates.paired_timing), all alike
    figures = ("int8 0.472 ms vs float32 0.331 ms per batch of 8 on CPUExecutionProvider; time ratio int8/float32 "
               "1.43, 96% interval 1.43-1.43 (medians of 9 paired rounds)")
    with pytest.raises(PrecisionRefusal) as refused:
        speed_verdict("int8", "CPUExecutionProvider", 8, slower, force=False)
    assert str(refused.value) == f"int8 is not faster: {figures}; pass --force to write it anyway"
    forced = speed_verdict("int8", "CPUExecutionProvider", 8, slower, force=True)
    assert forced["warning"] == f"written with --force although not faster: {figures}"
    faster = speed_verdict("fp16", "CUDAExecutionProvider", 8, Timing((0.002,) * 9, (0.001,) * 9), force=False)
    assert faster["speedup"] == 2.0 and "warning" not in faster
    with pytest.raises(PrecisionRefusal, match=r"^fp16 is not faster: fp16 1\.000 ms vs float32 1\.000 ms"):
        speed_verdict("fp16", "CUDAExecutionProvider", 8, Timing((0.001,) * 9, (0.001,) * 9), force=False)


def test_accuracy_gate_says_by_how_much() -> None:
    logits = np.array([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0], [0.0, 1.0]], np.float32)
    flipped = logits.copy()
    flipped[0] = [0.0, 1.0]  # one of four examples now wrong: 25 points lost
    labels = np.array([0, 1, 0, 1])
    with pytest.raises(PrecisionRefusal) as refused:
        accuracy_gate("int8", 1.0, {"logits": logits}, {"logits": flipped}, labels, "logits")
    assert str(refused.value) == ("int8 loses 25.00 points of accuracy against float32 (float32 1.0000, int8 0.7500 "
                                  "on 4 examples); the budget is 1 (export.onnx.budget): over by 24.00")
    assert accuracy_gate("int8", 25.0, {"logits": logits}, {"logits": flipped}, labels, "logits")["lost_points"] == 25.0
    # no labels: the relative L2 error of the outputs, in percent; [3, 4] vs [3, 4.05] is 0.05 / 5 = 1%
    with pytest.raises(PrecisionRefusal) as refused:
        accuracy_gate("fp16", 0.5, {"y": np.array([[3.0, 4.0]])}, {"y": np.array([[3.0, 4.05]])}, None, None)
    assert str(refused.value) == ("fp16 has 1.00% relative error against float32 (largest over outputs, 1 "
                                  "examples); the budget is 0.5% (export.onnx.budget): over by 0.50%")
    with pytest.raises(PrecisionRefusal, match=r"^int8 output 'logits' is NaN at \[0, 0\]"):
        accuracy_gate("int8", 1.0, {"logits": logits}, {"logits": np.full_like(logits, np.nan)}, labels, "logits")


def test_budget_that_is_not_a_number(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "cnn.yaml"
    text = (ROOT / "examples/specs/digits_cnn.yaml").read_text().replace("../data/digits.npz",
                                                                         str(ROOT / "examples/data/digits.npz"))
    spec.write_text(text.replace("dynamic_batch: true}", "dynamic_batch: true, budget: lots}"))
    assert main(["validate", str(spec)]) == 1
    line = capsys.readouterr().err.splitlines()[0]
    lines = spec.read_text().splitlines()
    row = next(i for i, t in enumerate(lines) if "budget: lots" in t)
    column = lines[row].index("lots") + 1
    assert line == f"{spec}:{row + 1}:{column}: error: budget: expected a number, received 'lots' (str)"


def test_recurrent_graph_is_quantized_dynamically() -> None:
    """digits_lstm with random weights (no TensorFlow): dynamic int8, its LSTM reported as left in float32."""
    from specgen.ir.resolve import build_ir
    from specgen.render.files import render_files
    from specgen.runtime.onnx_export import with_weights
    from specgen.runtime.parity import random_inputs, random_weights
    from specgen.spec.load import load_spec

    ir = build_ir(load_spec(ROOT / "examples/specs/digits_lstm.yaml"))
    built = onnx.load_from_string(render_files(ir)["model.onnx"])
    source = with_weights(built, ir, random_weights(ir, np.random.default_rng(0))).SerializeToString()
    converted, report = int8.convert(source, Calibration("minmax", random_inputs(ir, 4, np.random.default_rng(1))))
    assert report == {"mode": "dynamic", "calibration": None, "calibration_examples": None,
                      "reduce_range": not int8.has_vnni()}  # 7-bit weights where the kernels add int16 pairs
    checked = int8.check(converted, "cpu")
    # the LSTM and the head's Gemm both run as integer kernels: the LSTM's gate kernels, which the export
    # concatenates, are folded into stored weights first (unfolded, the quantizer leaves it in float32)
    assert (checked["integer_kernels"], checked["float32_compute"]) == (2, [])
    x = random_inputs(ir, 8, np.random.default_rng(2))
    expected = Predictor(source, provider="cpu")(x)["logits"]
    actual = Predictor(converted, provider="cpu")(x)["logits"]
    error = float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))
    # The error is rounding: weights to steps of max|w|/127 per channel (0.4-0.6% of each kernel's norm here: a step
    # over sqrt(12), max|w| 1.8-2.8x the rms; twice that with the 7-bit weights of a CPU without VNNI) and each
    # call's activations to range/255 (0.65% of the inputs'), about 1% per matmul, a few percent through the LSTM
    # and the head at most: measured 0.5% (seeds 1-4: 0.4-1.0%), and 0.6% with 7-bit weights under
    # `qemu-x86_64 -cpu Haswell`. There 8-bit weights saturated the kernels' int16 pair sums: 5.0% (2-17% over
    # seeds), which this bound catches. A wrong graph (another model's weights) is off by 160%.
    assert error < 0.03
