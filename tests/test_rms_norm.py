"""rms_norm against keras.layers.RMSNormalization, and layer_norm over the last axis of [batch, time,
features] against keras.layers.LayerNormalization: the same weights, forward and the one-step gradients
of every weight and of the input within 1e-5 (tests/keras_parity.py's tolerances), at two sequence
lengths through one generated graph (a named `seq` dimension). The ONNX side: TF vs onnxruntime at both
lengths, layer_norm as one LayerNormalization node; and the positioned errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text

keras = pytest.importorskip("keras")

from keras_parity import assert_close, generated_model, layer_spec  # noqa: E402

FEATURES = 8
LENGTHS = (5, 13)  # two sequence lengths through the same graph


def _diffs(model: Any, theirs: Any, x: np.ndarray, seed: int) -> dict[str, float]:
    """Max abs diffs of the forward pass and of each weight's and the input's gradient (Keras weights by name)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    ours = model.variables_by_path()
    by_name = {w.name: w for w in theirs.weights}
    x_ours, x_theirs = tf.Variable(x), tf.Variable(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(list(ours.values()))
        out_ours, out_theirs = model({"x": x_ours})["y"], theirs(x_theirs)
        projection = tf.constant(rng.standard_normal(tuple(out_theirs.shape)).astype(np.float32))
        loss_ours, loss_theirs = tf.reduce_sum(out_ours * projection), tf.reduce_sum(out_theirs * projection)
    assert tuple(out_ours.shape) == tuple(out_theirs.shape) == x.shape
    diffs = {"forward": float(np.max(np.abs(out_ours.numpy() - out_theirs.numpy())))}
    for path, variable in ours.items():
        g_ours, g_theirs = tape.gradient(loss_ours, variable), tape.gradient(loss_theirs, by_name[path.rsplit("/")[-1]])
        diffs[f"grad {path}"] = float(np.max(np.abs(g_ours.numpy() - g_theirs.numpy())))
    diffs["grad input"] = float(np.max(np.abs(tape.gradient(loss_ours, x_ours).numpy()
                                              - tape.gradient(loss_theirs, x_theirs).numpy())))
    return diffs


def _two_lengths(layer: dict[str, Any], theirs: Any, tmp_path: Path) -> list[dict[str, float]]:
    """One generated model over `[seq, 8]` and the Keras layer built for any length, the same random weights,
    run at both LENGTHS."""
    model = generated_model(layer_spec("seqnorm", ["seq", FEATURES], [layer]), tmp_path)
    theirs.build((None, None, FEATURES))
    rng = np.random.default_rng(0)
    ours = model.variables_by_path()
    assert len(ours) == len(theirs.weights)
    for path, variable in ours.items():
        value = rng.standard_normal(tuple(variable.shape)).astype(np.float32)
        variable.assign(value)
        next(w for w in theirs.weights if w.name == path.rsplit("/")[-1]).assign(value)
    return [_diffs(model, theirs, rng.standard_normal((3, t, FEATURES)).astype(np.float32), t) for t in LENGTHS]


@pytest.mark.parametrize("epsilon", [None, 1e-5, 0.5], ids=["keras_default", "1e-5", "0.5"])
def test_rms_norm_matches_keras(epsilon: float | None, tmp_path: Path) -> None:
    layer: dict[str, Any] = {"name": "rn", "op": "rms_norm"} | ({"epsilon": epsilon} if epsilon else {})
    theirs = keras.layers.RMSNormalization(**({"epsilon": epsilon} if epsilon else {}))
    for diffs in _two_lengths(layer, theirs, tmp_path):
        assert set(diffs) == {"forward", "grad rn/scale", "grad input"}
        assert_close(diffs)


def test_layer_norm_on_sequences_matches_keras(tmp_path: Path) -> None:
    theirs = keras.layers.LayerNormalization(epsilon=1e-5)
    for diffs in _two_lengths({"name": "ln", "op": "layer_norm", "epsilon": 1e-5}, theirs, tmp_path):
        assert set(diffs) == {"forward", "grad ln/gamma", "grad ln/beta", "grad input"}
        assert_close(diffs)


def test_rms_norm_defaults_are_keras() -> None:
    """epsilon 1e-6 and a `scale` of ones, as keras.layers.RMSNormalization()."""
    ir = build_ir(load_spec_text(layer_spec("d", ["seq", 4], [{"name": "rn", "op": "rms_norm"}]), "d.yaml"))
    (node,) = ir.nodes
    assert node.params == {"epsilon": 1e-6}
    assert [(v.path, v.shape, v.init.kind) for v in ir.model_variables] == [("rn/scale", (4,), "ones")]
    assert keras.layers.RMSNormalization().epsilon == 1e-6


NODES = {("layer_norm", 21): ["LayerNormalization"], ("layer_norm", 23): ["LayerNormalization"],
         ("rms_norm", 21): ["Mul", "ReduceMean", "Add", "Sqrt", "Div", "Mul"], ("rms_norm", 23): ["RMSNormalization"]}


@pytest.mark.parametrize(("op", "opset"), sorted(NODES))
def test_onnx_matches_tensorflow_at_two_lengths(op: str, opset: int, tmp_path: Path) -> None:
    """The exported graph keeps the time dimension symbolic: one graph, two lengths, TF vs onnxruntime.
    Tolerance 1e-5: the same float32 formula in two runtimes (a few ulps of values of order 1)."""
    import yaml

    from specgen.runtime import parity

    document = yaml.safe_load(layer_spec(f"o_{op}", ["seq", FEATURES], [{"name": "n", "op": op, "epsilon": 0.25}]))
    document["export"] = {"onnx": {"opset": opset}}  # epsilon 0.25: a dropped or misplaced epsilon shows
    ir = build_ir(load_spec_text(yaml.safe_dump(document), "o.yaml"))
    files = render_files(ir)
    graph = onnx.load_from_string(files["model.onnx"]).graph
    assert [n.op_type for n in graph.node] == NODES[(op, opset)]
    assert graph.input[0].type.tensor_type.shape.dim[1].dim_param == "seq"
    path = tmp_path / f"o_{op}_model.py"
    path.write_bytes(files["model.py"])
    model = getattr(parity.load_generated(path), ir.class_name)(seed=0)
    rng = np.random.default_rng(3)
    values = parity.random_weights(ir, rng)
    parity.assign(model, values)
    for steps in LENGTHS:
        inputs = parity.random_inputs(ir, 2, rng, {"seq": steps})
        expected = parity.run_tf(model, inputs)
        actual = parity.run_onnx(files["model.onnx"], ir, values, inputs)
        assert actual["y"].shape == (2, steps, FEATURES)
        assert parity.max_abs_diff(expected, actual) <= 1e-5


SPEC = """specgen: 1
name: bad
inputs:
  x: {shape: [seq, 6]}
  v: {shape: [6]}
  f: {shape: [4, feat]}
  i: {shape: [6], dtype: int32}
outputs:
  y: last
layers:
LAST
"""

ERRORS = [
    ("epsilon_zero", "  - {name: last, op: rms_norm, input: x, epsilon: 0}",
     "11:51: error: epsilon: received 0, expected a value > 0.0 (in layer 'last')"),
    ("named_feature_axis", "  - {name: last, op: rms_norm, input: f}",
     "11:39: error: layer 'last' (rms_norm): rms_norm's feature axis needs a fixed size; received the named "
     "dynamic dimension 'feat' (its size is known only at run time)"),
    ("integer_input", "  - {name: last, op: rms_norm, input: i}",
     "11:39: error: layer 'last' (rms_norm): rms_norm needs a float32 input; received int32 (integer inputs "
     "feed embedding layers)"),
    ("unknown_key", "  - {name: last, op: rms_norm, input: v, center: true}",
     "11:42: error: unknown key 'center'; expected one of 'epsilon', 'input', 'name', 'op' or 'share' (in layer 'last')"),
]


@pytest.mark.parametrize(("layer", "expected"), [pytest.param(t, e, id=i) for i, t, e in ERRORS])
def test_positioned_errors(layer: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("LAST", layer))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1:] == ["1 error found"] and err[0].endswith(f"spec.yaml:{expected}"), err
    assert list(tmp_path.iterdir()) == [path]  # nothing written
