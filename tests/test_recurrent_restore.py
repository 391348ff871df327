"""Keras weight files of LSTM / GRU / SimpleRNN restore specgen's lstm / gru / simple_rnn by identity (no map):
Keras 3 keeps a recurrent layer's variables in its cell (`<layer>/cell/vars/<i>`), read as
`<layer>/kernel`, `<layer>/recurrent_kernel`, `<layer>/bias`. After the restore the generated model
and the exported ONNX graph give Keras' outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime import parity  # noqa: E402
from specgen.runtime.commands.restore import apply_plan, plan_restore  # noqa: E402
from specgen.runtime.keras_weights import read_weights  # noqa: E402
from specgen.runtime.lib.generated import load_generated  # noqa: E402
from specgen.spec.load import load_spec_text  # noqa: E402

SPEC = """specgen: 1
name: rnn_restore
inputs:
  x: {shape: [7, 5]}
outputs:
  y: fc
layers:
  - {name: enc, op: lstm, units: 6, return_sequences: true}
  - {name: mid, op: gru, units: 4, return_sequences: true, go_backwards: true}
  - {name: mid_v1, op: gru, units: 3, reset_after: false, return_sequences: true}
  - {name: last, op: simple_rnn, units: 3}
  - {name: fc, op: dense, units: 2}
checkpoint:
  dir: run
  restore:
    - from: SOURCE
"""
RECURRENT = ("kernel", "recurrent_kernel", "bias")
TOLERANCE = 1e-5  # float32 through 7 steps: summation order differs between Keras, TF and onnxruntime


def keras_model() -> keras.Model:
    x = keras.Input((7, 5))
    h = keras.layers.LSTM(6, return_sequences=True, name="enc")(x)
    h = keras.layers.GRU(4, return_sequences=True, go_backwards=True, name="mid")(h)
    h = keras.layers.GRU(3, reset_after=False, return_sequences=True, name="mid_v1")(h)
    h = keras.layers.SimpleRNN(3, name="last")(h)
    model = keras.Model(x, keras.layers.Dense(2, name="fc")(h))
    rng = np.random.default_rng(3)  # away from the initial values, biases included
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.5 for w in model.get_weights()])
    return model


@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_keras_recurrent_weights_restore_by_identity(suffix: str, tmp_path: Path) -> None:
    model = keras_model()
    source = tmp_path / f"model{suffix}"
    model.save_weights(source) if suffix == ".weights.h5" else model.save(source)
    roles = {"enc": RECURRENT, "mid": RECURRENT, "mid_v1": RECURRENT, "last": RECURRENT, "fc": ("kernel", "bias")}
    assert sorted(read_weights(source)) == sorted(f"{layer}/{role}" for layer, rs in roles.items() for role in rs)
    loaded = load_spec_text(SPEC.replace("SOURCE", str(source)), str(tmp_path / "spec.yaml"), path=tmp_path / "spec.yaml")
    ir = build_ir(loaded)
    files = render_files(ir)
    (tmp_path / "model.py").write_bytes(files["model.py"])
    ours = getattr(load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    variables = ours.variables_by_path()
    plan = plan_restore(loaded, {p: (tuple(v.shape), v.dtype.name) for p, v in variables.items()})
    assert plan.ok and plan.count("restored") == len(variables) == 14 and not plan.unused
    apply_plan(plan, variables)
    x = np.random.default_rng(4).standard_normal((3, 7, 5)).astype(np.float32)
    expected = model.predict(x, verbose=0)
    assert float(np.max(np.abs(ours({"x": x}, training=False)["y"].numpy() - expected))) <= TOLERANCE
    values = {p: v.numpy() for p, v in variables.items()}  # the exported graph: weights in ONNX's layout
    onnx_out = parity.run_onnx(files["model.onnx"], ir, values, {"x": x})["y"]
    assert float(np.max(np.abs(onnx_out - expected))) <= TOLERANCE
