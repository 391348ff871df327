"""`specgen import keras` of Bidirectional(LSTM / GRU / SimpleRNN), every merge mode, from real saved .keras
files: the imported spec's own restore section (and a .weights.h5 through --weights) restores every weight by
identity, and the generated TensorFlow model and the ONNX graph equal `model.predict`; what has no spec form is
refused by name. merge_mode None and return_state: tests/test_return_state_import.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")

from test_import_keras import randomize, refusal, run_import  # noqa: E402

from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime import parity  # noqa: E402
from specgen.runtime.commands.restore import apply_plan, plan_restore  # noqa: E402
from specgen.runtime.lib.generated import load_generated  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

TOLERANCE = 1e-5  # float32 through 7 steps and two directions: summation order differs (Keras, TF, onnxruntime)
MERGES = ("concat", "sum", "mul", "ave")


def bidirectional_model(merge: str) -> Any:
    """Each cell wrapped with `merge`, sequences in and out, then the last step."""
    layers = keras.layers
    x = keras.Input((7, 5), name="steps")
    h = layers.Bidirectional(layers.LSTM(4, return_sequences=True), merge_mode=merge, name="a")(x)
    h = layers.Bidirectional(layers.GRU(3, return_sequences=True, reset_after=False), merge_mode=merge, name="b")(h)
    h = layers.Bidirectional(layers.SimpleRNN(3, activation="relu"), merge_mode=merge, name="c")(h)
    model = keras.Model(x, layers.Dense(2, name="head")(h), name="bi")
    randomize(model)
    return model


def restored(spec: Path, tmp_path: Path) -> tuple[Any, Any, bytes]:
    """The generated model of `spec`, every variable restored by its own restore section."""
    loaded = load_spec(spec)
    ir = build_ir(loaded)
    files = render_files(ir)
    (tmp_path / "model.py").write_bytes(files["model.py"])
    ours = getattr(load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    variables = ours.variables_by_path()
    # 3 layers x 2 directions x (kernel, recurrent_kernel, bias) + the dense kernel and bias
    plan = plan_restore(loaded, {p: (tuple(v.shape), v.dtype.name) for p, v in variables.items()})
    assert plan.ok and plan.count("restored") == len(variables) == 20 and not plan.unused
    apply_plan(plan, variables)
    return ir, ours, files["model.onnx"]


@pytest.mark.parametrize("merge", MERGES)
def test_import_equals_predict(merge: str, tmp_path: Path) -> None:
    model = bidirectional_model(merge)
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    mode = {} if merge == "concat" else {"merge_mode": merge}
    assert [{k: v for k, v in x.items() if k not in ("name", "input")} for x in doc["layers"]] == [
        {"op": "bidirectional", "layer": {"op": "lstm", "units": 4, "return_sequences": True}, **mode},
        {"op": "bidirectional", "layer": {"op": "gru", "units": 3, "return_sequences": True, "reset_after": False},
         **mode},
        {"op": "bidirectional", "layer": {"op": "simple_rnn", "units": 3, "activation": "relu"}, **mode},
        {"op": "dense", "units": 2}]
    ir, ours, onnx_model = restored(spec, tmp_path)
    x = np.random.default_rng(4).standard_normal((3, 7, 5)).astype(np.float32)
    expected = model.predict(x, verbose=0)
    assert float(np.max(np.abs(ours({"steps": x}, training=False)["head"].numpy() - expected))) <= TOLERANCE
    values = {p: v.numpy() for p, v in ours.variables_by_path().items()}  # the ONNX graph: ONNX's layout
    assert float(np.max(np.abs(parity.run_onnx(onnx_model, ir, values, {"steps": x})["head"] - expected))) <= TOLERANCE


def test_weights_file_restores_by_identity(tmp_path: Path) -> None:
    """A bare .weights.h5 (no config: the cells' class unknown, their variable order the same) via --weights."""
    model = bidirectional_model("concat")
    model.save(tmp_path / "m.keras")
    trained = bidirectional_model("concat")  # other values, same structure
    randomize(trained, seed=9)
    trained.save_weights(tmp_path / "t.weights.h5")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec, "--weights", tmp_path / "t.weights.h5") == 0
    _, ours, _ = restored(spec, tmp_path)
    x = np.random.default_rng(5).standard_normal((2, 7, 5)).astype(np.float32)
    expected = trained.predict(x, verbose=0)
    assert float(np.max(np.abs(ours({"steps": x}, training=False)["head"].numpy() - expected))) <= TOLERANCE


@pytest.mark.parametrize(("layer", "message"), [
    (lambda: keras.layers.Bidirectional(keras.layers.LSTM(3, activation="softmax", name="l"), name="odd"),
     "Keras layer 'odd/forward_l' (LSTM): argument activation=softmax cannot be expressed in a spec (a recurrent "
     "activation: tanh, sigmoid, relu or hard_sigmoid)"),
    (lambda: keras.layers.Bidirectional(keras.layers.GRU(3, dropout=0.25, name="g"), name="odd"),
     "Keras layer 'odd/forward_g' (GRU): argument dropout=0.25 cannot be expressed in a spec (specgen's "
     "recurrent layers have no dropout yet)"),
    (lambda: keras.layers.Bidirectional(keras.layers.LSTM(3), backward_layer=keras.layers.LSTM(
        2, go_backwards=True), name="odd"),
     "Keras layer 'odd' (Bidirectional): argument backward_layer=LSTM("),
    (lambda: keras.layers.Bidirectional(keras.layers.LSTM(3, go_backwards=True), backward_layer=keras.layers.LSTM(3),
                                        name="odd"),
     "Keras layer 'odd' (Bidirectional): as spec op 'bidirectional': go_backwards inside bidirectional is not "
     "supported"),
])
def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str], layer: Any, message: str) -> None:
    a = keras.Input((4, 2), name="a")
    err = refusal(tmp_path, keras.Model(a, layer()(a)), capsys)
    assert err.count("\n") == 2 and err.endswith("\n1 error found\n"), err  # one line, no traceback
    assert re.search(re.escape(message), err), err
