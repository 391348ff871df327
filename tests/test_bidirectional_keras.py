"""Keras parity of bidirectional: Keras' own Bidirectional(LSTM / GRU / SimpleRNN) with the same weights,
every merge mode, both output selections, forward and the gradients of every weight and the input within
1e-5 (tests/keras_parity.py's tolerances), at two sequence lengths through one generated model ([seq, 5]);
the same ONNX graph against onnxruntime at both lengths; positioned spec errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from op_cases_bidirectional import MERGES, bidir

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.runtime import parity
from specgen.spec.load import load_spec_text

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from keras_parity import FORWARD_TOLERANCE, GRADIENT_TOLERANCE, generated_model  # noqa: E402

KERAS = {"lstm": "LSTM", "gru": "GRU", "simple_rnn": "SimpleRNN"}
FEATURES, LENGTHS = 5, (4, 9)  # two lengths through the same model and the same ONNX bytes
ONNX_TOLERANCE = 1e-5  # TF vs onnxruntime: one float32 graph, different summation orders


def spec_text(layers: list[dict[str, Any]]) -> str:
    document = {"specgen": 1, "name": "bi", "inputs": {"x": {"shape": ["seq", FEATURES]}},
                "outputs": {"y": layers[-1]["name"]}, "layers": layers}
    return yaml.safe_dump(document, sort_keys=False)


def keras_path(weight: Any) -> str:
    """Keras 3 names the halves forward_<layer> / backward_<layer>: '<half>/<role>' as specgen's paths end."""
    half = "forward" if "/forward_" in weight.path else "backward"
    assert f"/{half}_" in weight.path, weight.path
    return f"{half}/{weight.name}"


def _diffs(model: Any, layer: Any, x: np.ndarray, rng: np.random.Generator) -> dict[str, float]:
    ours, theirs = model.variables_by_path(), {keras_path(w): w for w in layer.weights}
    x_ours, x_theirs = tf.Variable(x), tf.Variable(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(list(ours.values()))  # generated variables may be non-trainable tf.Variables
        out, ref = model({"x": x_ours})["y"], layer(x_theirs)
        projection = tf.constant(rng.standard_normal(tuple(ref.shape)).astype(np.float32))
        loss, ref_loss = tf.reduce_sum(out * projection), tf.reduce_sum(ref * projection)
    assert tuple(out.shape) == tuple(ref.shape)
    found = {"forward": float(np.max(np.abs(out.numpy() - ref.numpy())))}
    for path, variable in ours.items():
        g, g_ref = tape.gradient(loss, variable), tape.gradient(ref_loss, theirs[path.split("/", 1)[1]])
        found[f"grad {path}"] = float(np.max(np.abs(g.numpy() - g_ref.numpy())))
    found["grad input"] = float(np.max(np.abs(tape.gradient(loss, x_ours).numpy() -
                                              tape.gradient(ref_loss, x_theirs).numpy())))
    return found


def check(op: str, merge: str, tmp_path: Path, **params: Any) -> None:
    keras_layer = keras.layers.Bidirectional(getattr(keras.layers, KERAS[op])(4, **params), merge_mode=merge)
    keras_layer.build((None, None, FEATURES))
    model = generated_model(spec_text([bidir(op, merge, **params)]), tmp_path)
    rng = np.random.default_rng(7)
    theirs = {keras_path(w): w for w in keras_layer.weights}
    ours = model.variables_by_path()
    assert sorted(p.split("/", 1)[1] for p in ours) == sorted(theirs)
    for path, variable in ours.items():
        value = rng.standard_normal(tuple(variable.shape)).astype(np.float32) * 0.5
        variable.assign(value)
        theirs[path.split("/", 1)[1]].assign(value)
    for steps in LENGTHS:
        diffs = _diffs(model, keras_layer, rng.standard_normal((3, steps, FEATURES)).astype(np.float32), rng)
        assert len(diffs) == 2 + len(ours)  # forward, the input and every weight
        for key, value in diffs.items():
            limit = FORWARD_TOLERANCE if key == "forward" else GRADIENT_TOLERANCE
            assert value <= limit, f"{steps} steps, {key}: max abs diff {value:.3g} (limit {limit})"


@pytest.mark.parametrize("sequences", [False, True], ids=["last", "seq"])
@pytest.mark.parametrize("merge", MERGES)
@pytest.mark.parametrize("op", ["lstm", "gru", "simple_rnn"])
def test_matches_keras(op: str, merge: str, sequences: bool, tmp_path: Path) -> None:
    check(op, merge, tmp_path, return_sequences=sequences)


@pytest.mark.parametrize(("op", "params"), [
    ("gru", {"reset_after": False, "return_sequences": True}),
    ("lstm", {"use_bias": False, "recurrent_activation": "hard_sigmoid", "activation": "relu"}),
])
def test_options_match_keras(op: str, params: dict[str, Any], tmp_path: Path) -> None:
    check(op, "concat", tmp_path, **params)


@pytest.mark.parametrize("sequences", [False, True], ids=["last", "seq"])
@pytest.mark.parametrize("op", ["lstm", "gru", "simple_rnn"])
def test_one_onnx_graph_runs_two_lengths_like_tensorflow(op: str, sequences: bool, tmp_path: Path) -> None:
    layers = [bidir(op, "concat", return_sequences=sequences), {"name": "out", "op": "dense", "units": 3}]
    ir = build_ir(load_spec_text(spec_text(layers), "bi.yaml"))
    files = render_files(ir)
    (tmp_path / "m.py").write_bytes(files["model.py"])
    model = getattr(parity.load_generated(tmp_path / "m.py"), ir.class_name)(seed=0)
    rng = np.random.default_rng(0)
    values = parity.random_weights(ir, rng)
    parity.assign(model, values)
    for steps in LENGTHS:
        inputs = parity.random_inputs(ir, 4, rng, {"seq": steps})
        expected = parity.run_tf(model, inputs)
        actual = parity.run_onnx(files["model.onnx"], ir, values, inputs)
        assert actual["y"].shape == ((4, steps, 3) if sequences else (4, 3))
        assert parity.max_abs_diff(expected, actual) <= ONNX_TOLERANCE
    recurrent = [n for n in ir.nodes if n.op == "bidirectional"]
    assert files["model.onnx.txt"].decode().count('direction = "bidirectional"') == len(recurrent) == 1


LAYERS = """specgen: 1
name: bad
inputs:
  x: {shape: [6, 5]}
  v: {shape: [5]}
outputs:
  y: last
layers:
LAST
"""

ERRORS = [
    ("rank2", "  - {name: last, op: bidirectional, input: v, layer: {op: lstm, units: 4}}",
     "9:54: error: layer 'last' (bidirectional): lstm needs a rank-3 input (batch, time, features); "
     "received [batch, 5]"),
    ("go_backwards", "  - {name: last, op: bidirectional, input: x, layer: {op: gru, units: 4, go_backwards: true}}",
     "9:54: error: layer 'last' (bidirectional): go_backwards inside bidirectional is not supported; received true, "
     "expected false (the backward half already reads the sequence last step first)"),
    ("merge_mode", "  - {name: last, op: bidirectional, input: x, merge_mode: max, layer: {op: gru, units: 4}}",
     "9:59: error: merge_mode: received 'max', expected 'ave', 'concat', 'mul', 'none' or 'sum' (in layer 'last')"),
    ("wrapped_op", "  - {name: last, op: bidirectional, input: x, layer: {op: dense, units: 4}}",
     "9:59: error: unknown op 'dense' (expected 'gru', 'lstm' or 'simple_rnn') (in layer 'last')"),
    ("wrapped_name", "  - {name: last, op: bidirectional, input: x, layer: {op: lstm, units: 4, name: f}}",
     "9:75: error: unknown key 'name'; expected one of 'activation', 'bias_init', 'go_backwards', 'kernel_init', "
     "'op', 'recurrent_activation', 'recurrent_init', 'return_sequences', 'return_state', 'unit_forget_bias', "
     "'units' or 'use_bias' (in layer 'last')"),
]


@pytest.mark.parametrize(("layer", "expected"), [pytest.param(t, e, id=i) for i, t, e in ERRORS])
def test_positioned_errors(layer: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(LAYERS.replace("LAST", layer))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1:] == ["1 error found"] and err[0].endswith(f"spec.yaml:{expected}"), err
    assert list(tmp_path.iterdir()) == [path]  # nothing written
