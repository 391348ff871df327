"""Precision variants as files other readers take: valid ONNX, attention's softmax in float32, layers named as in
the spec, and the CPU kind an int8 variant was made and gated on (runtime/precision/valid.py, fp16.py, verify.py).

No TensorFlow: graphs are built here, or rendered from an example spec with random weights.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from specgen.runtime.precision import fp16, int8
from specgen.runtime.precision.base import Calibration, PrecisionRefusal
from specgen.runtime.precision.fp16_emulation import emulate
from specgen.runtime.precision.step import PrecisionRequest, make_variant
from specgen.runtime.precision.valid import checked_variant, topological
from specgen.runtime.precision.verify import INFO_FILE, VariantInfo, check_version, needs_check, read_info, version_files
from specgen.runtime.predictor import CPU, CUDA, Predictor

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(0)


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           weights: dict[str, np.ndarray], opset: int = 21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10 if opset < 23 else 11)


def _float(name: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _written_in_order(graph: onnx.GraphProto) -> bool:
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    for node in graph.node:
        if not all(name in known for name in node.input):
            return False
        known.update(node.output)
    return True


def test_an_fp16_variant_is_sorted_valid_onnx_that_the_reference_evaluator_runs() -> None:
    # the shape of specgen's image exports: the float16 converter's input Cast feeds the first node
    nodes = [helper.make_node("Transpose", ["image"], ["nchw"], name="nchw", perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["nchw", "k", "b"], ["conv"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["conv"], ["flat"], name="flat"),
             helper.make_node("Softmax", ["flat"], ["probs"], name="probs")]
    source = _model(nodes, [_float("image", ["batch", 8, 8, 1])], [_float("probs", ["batch", 256])],
                    {"k": RNG.standard_normal((4, 1, 3, 3)), "b": RNG.standard_normal(4)})
    variant, report = fp16.convert(source.SerializeToString(), Calibration())
    model = onnx.load_from_string(variant)
    assert report == {"kept_float32": ["Softmax"]} and _written_in_order(model.graph)
    onnx.checker.check_model(model, full_check=True)  # the spec's rule: raised "topologically sorted" before
    x = RNG.random((2, 8, 8, 1), dtype=np.float32)
    expected = Predictor(source.SerializeToString(), provider="cpu")({"image": x})["probs"]
    (got,) = ReferenceEvaluator(model).run(None, {"image": x})
    # float16 activations and weights (2^-11 relative) before a float32 softmax over 256 values
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=1e-4)


def test_topological_order_is_stable_and_counts_what_a_subgraph_reads() -> None:
    chain = [helper.make_node("Relu", [f"t{k}"], [f"t{k + 1}"], name=f"n{k}") for k in range(4)]
    assert [n.name for n in topological(chain)] == ["n0", "n1", "n2", "n3"]  # sorted: kept as written
    assert [n.name for n in topological(chain[::-1])] == ["n0", "n1", "n2", "n3"]
    # an If whose branches read 'h', written by a node listed after it: 'h' is an input of the If too
    branch = [helper.make_graph([helper.make_node("Identity", ["h"], [f"{side}_y"])], side, [],
                                [_float(f"{side}_y", ["batch", 4])]) for side in ("then", "else")]
    nodes = [helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch[0], else_branch=branch[1]),
             helper.make_node("Relu", ["x"], ["h"], name="h")]
    source = _model(nodes, [_float("x", ["batch", 4]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                    [_float("y", ["batch", 4])], {})
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(source)
    model = onnx.load_from_string(checked_variant(source.SerializeToString(), "fp16"))
    assert [n.name for n in model.graph.node] == ["h", "if"]


def test_a_variant_the_checker_refuses_is_one_line() -> None:
    # declares 5 columns where MatMul writes 4: onnxruntime runs it, strict shape inference refuses it
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="y")]
    source = _model(nodes, [_float("x", ["batch", 3])], [_float("y", ["batch", 5])], {"w": np.ones((3, 4))})
    with pytest.raises(PrecisionRefusal) as refusal:
        checked_variant(source.SerializeToString(), "int8")
    message = str(refusal.value)
    assert message.startswith("int8: the variant is not a valid ONNX model (onnx.checker: ") and "\n" not in message
    assert message.endswith("Inferred shape and existing shape differ in dimension 1: (4) vs (5))")


def _attention(precision: int | None) -> bytes:
    """An opset-23 multi-head attention (`export.onnx.opset: 23`): one ONNX Attention node on three projections."""
    d, rng = 8, np.random.default_rng(3)
    nodes = [helper.make_node("MatMul", ["x", w], [f"{w}_o"], name=f"{w}_o") for w in ("wq", "wk", "wv")]
    extra = {} if precision is None else {"softmax_precision": precision}
    nodes.append(helper.make_node("Attention", ["wq_o", "wk_o", "wv_o"], ["y"], name="att", q_num_heads=2,
                                  kv_num_heads=2, **extra))
    model = _model(nodes, [_float("x", ["batch", 5, d])], [_float("y", ["batch", 5, d])],
                   {w: rng.standard_normal((d, d)) for w in ("wq", "wk", "wv")}, opset=23)
    return model.SerializeToString()


@pytest.mark.parametrize("given", [None, TensorProto.FLOAT16])
def test_attention_keeps_its_softmax_in_float32(given: int | None) -> None:
    variant, report = fp16.convert(_attention(given), Calibration())
    model = onnx.load_from_string(variant)
    (node,) = [n for n in model.graph.node if n.op_type == "Attention"]
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attributes["softmax_precision"] == TensorProto.FLOAT and report == {"kept_float32": ["Attention"]}
    types = {v.name: v.type.tensor_type.elem_type for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    assert types[node.input[0]] == TensorProto.FLOAT16  # the matmuls around it stay float16
    onnx.checker.check_model(model, full_check=True)
    x = RNG.standard_normal((2, 5, 8)).astype(np.float32)
    expected = Predictor(_attention(None), provider="cpu")({"x": x})["y"]
    np.testing.assert_allclose(Predictor(variant, provider="cpu")({"x": x})["y"], expected, rtol=2e-2, atol=2e-2)


def test_messages_name_the_layer_not_the_converters_tensor() -> None:
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["hidden"], name="hidden"),
             helper.make_node("LayerNormalization", ["hidden", "gamma", "beta"], ["norm"], name="norm"),
             helper.make_node("Gemm", ["norm", "w2"], ["logits"], name="logits")]
    weights = {"w1": RNG.standard_normal((8, 16)), "gamma": np.full(16, 100.0), "beta": np.zeros(16),
               "w2": RNG.standard_normal((16, 4)) / 1000}
    source = _model(nodes, [_float("x", ["batch", 8])], [_float("logits", ["batch", 4])], weights)
    variant, _ = fp16.convert(source.SerializeToString(), Calibration())
    with pytest.raises(PrecisionRefusal) as refusal:  # no float16 Gemm on the CPU
        fp16.check(variant, "cpu")
    assert str(refusal.value) == ("fp16: 2 node(s) have no float16 kernel on the cpu provider (onnxruntime would cast "
                                  "them back to float32): Gemm 'hidden', Gemm 'logits'; fp16 pays off with --provider "
                                  "cuda")  # the output layer was "Gemm 'graph_output_cast_0'"
    # the normalization kept in float32 (gamma 100: the largest float16 tensor) by its name, not '<name>_cast_to_fp16'
    _, report = emulate(variant, {"x": RNG.standard_normal((4, 8)).astype(np.float32)})
    assert report["float16_peak"]["tensor"] == "LayerNormalization 'norm'" and report["float16_peak"]["abs"] > 100


def test_needs_check_on_a_cpu_of_the_other_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    base = VariantInfo("int8", True, CPU, None, 1.0, "logits", ("x",), "0" * 64)
    for here in (True, False):
        monkeypatch.setattr(int8, "has_vnni", lambda here=here: here)  # this CPU: with or without VNNI
        for made in (True, False):
            assert needs_check(dataclasses.replace(base, vnni=made), CPU) is (made != here)
        # a variant.json from before the record: gated again where 8-bit weights could saturate (no VNNI)
        assert needs_check(base, CPU) is (not here)
        assert not needs_check(dataclasses.replace(base, precision="fp16", verified_on=CUDA), CUDA)
        assert not needs_check(dataclasses.replace(base, vnni=not here, verified_on=CUDA), CUDA)  # no CPU kernels


def test_an_int8_variant_records_its_cpu_and_is_gated_again_on_the_other_kind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """digits_mlp with random weights through the export's precision step, made as on a CPU without VNNI."""
    from specgen.ir.resolve import build_ir
    from specgen.render.files import render_files
    from specgen.runtime.onnx_export import with_weights
    from specgen.runtime.parity import random_weights
    from specgen.spec.load import load_spec

    loaded = load_spec(ROOT / "examples/specs/digits_mlp.yaml")
    ir = build_ir(loaded)
    built = onnx.load_from_string(render_files(ir)["model.onnx"])
    source = with_weights(built, ir, random_weights(ir, np.random.default_rng(0))).SerializeToString()
    with np.load(ROOT / "examples/data/digits.npz") as data:
        inputs, labels = {"image": data["x_test"][:64].astype(np.float32)}, data["y_test"][:64].astype(np.int64)
    monkeypatch.setattr(int8, "has_vnni", lambda: False)
    variant = make_variant(loaded, ir, source, inputs, labels, "eval set", PrecisionRequest("int8", force=True))
    assert variant is not None and (variant.info.vnni, variant.info.reduce_range) == (False, True)
    onnx.checker.check_model(onnx.load_from_string(variant.model_bytes), full_check=True)
    # as the export verified it (a forced variant is unverified, gated anyway): then only the CPU kind can differ
    info = dataclasses.replace(variant.info, verified=True, verified_on=CPU, reason=None)
    folder = tmp_path / "1"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(variant.model_bytes)
    for name, data_bytes in version_files(info, source, inputs, labels).items():
        (folder / name).write_bytes(data_bytes)
    written = json.loads((folder / INFO_FILE).read_text())
    assert (written["vnni"], written["reduce_range"]) == (False, True) and read_info(folder) == info
    same = check_version(folder, provider="cpu")
    assert same is not None and same.report == {} and same.line.endswith("verified on CPUExecutionProvider by the export")
    monkeypatch.setattr(int8, "has_vnni", lambda: True)  # served on a CPU with VNNI: the gates run again
    other = check_version(folder, provider="cpu")
    assert other is not None and other.report["examples"] == 64 and "accuracy" in other.report
    for check in (same, other):
        if check.predictor is not None:
            check.predictor.close()
