"""A TF2 object-based checkpoint of a Keras model with a Bidirectional layer (tf.train.Checkpoint(model=...))
restores specgen's bidirectional through one pattern per layer: Keras keys its halves
`<model>/_operations/<i>/forward_layer/cell/<weight>` (`backward_layer`), and the pattern turns them into
`<layer>/forward/<weight>`. (.keras and .weights.h5 restore by identity: tests/test_bidirectional_import.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from test_import_keras import randomize  # noqa: E402

from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime import parity  # noqa: E402
from specgen.runtime.commands.restore import apply_plan, plan_restore  # noqa: E402
from specgen.runtime.lib.generated import load_generated  # noqa: E402
from specgen.spec.load import load_spec_text  # noqa: E402

SPEC = r"""specgen: 1
name: bi_restore
inputs:
  x: {shape: [seq, 5]}
outputs:
  y: fc
layers:
  - {name: enc, op: bidirectional, layer: {op: gru, units: 4, return_sequences: true}, merge_mode: ave}
  - {name: fc, op: dense, units: 2}
checkpoint:
  dir: run
  restore:
    - from: SOURCE
      map:
        - {pattern: "^model/_operations/1/(forward|backward)_layer/cell/(.*)$", to: "enc/\\1/\\2"}
        - {pattern: "^model/_operations/2/_?(kernel|bias)$", to: "fc/\\1"}
"""
TOLERANCE = 1e-5  # float32 through 9 steps and two directions: summation order differs (Keras, TF, onnxruntime)


def test_tf2_checkpoint_restores_through_a_pattern(tmp_path: Path) -> None:
    x = keras.Input((None, 5))
    h = keras.layers.Bidirectional(keras.layers.GRU(4, return_sequences=True), merge_mode="ave", name="enc")(x)
    model = keras.Model(x, keras.layers.Dense(2, name="fc")(h))
    randomize(model, seed=2)
    prefix = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt" / "ckpt"))
    loaded = load_spec_text(SPEC.replace("SOURCE", prefix), str(tmp_path / "spec.yaml"), path=tmp_path / "spec.yaml")
    ir = build_ir(loaded)
    files = render_files(ir)
    (tmp_path / "model.py").write_bytes(files["model.py"])
    ours = getattr(load_generated(tmp_path / "model.py"), ir.class_name)(seed=0)
    variables = ours.variables_by_path()
    plan = plan_restore(loaded, {p: (tuple(v.shape), v.dtype.name) for p, v in variables.items()})
    assert plan.ok and plan.count("restored") == len(variables) == 8 and not plan.unused
    apply_plan(plan, variables)
    inputs = {"x": np.random.default_rng(4).standard_normal((3, 9, 5)).astype(np.float32)}
    expected = model.predict(inputs["x"], verbose=0)
    assert float(np.max(np.abs(ours(inputs, training=False)["y"].numpy() - expected))) <= TOLERANCE
    values = {p: v.numpy() for p, v in variables.items()}
    assert float(np.max(np.abs(parity.run_onnx(files["model.onnx"], ir, values, inputs)["y"] - expected))) <= TOLERANCE
