"""Parity of one generated layer with Keras' own layer: same configuration, same weights.

The numerical reference for an op is Keras (DESIGN.md), never specgen's own rendering. A case
is a spec layer and the Keras layer it stands for; `compare` builds both, gives them the same
random weights (matched by variable role: the spec path's last part equals the Keras weight's
name, `kernel`, `bias`, `gamma`, `depthwise_kernel`, ...), runs both on the same inputs and
returns the largest absolute differences of the forward pass and, for one training step, of the
gradients of a fixed random projection of the output with respect to every trainable weight and
the input. The ONNX side is covered by tests/test_op_parity.py (generated TF vs onnxruntime).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text

# Keras and specgen evaluate the same float32 ops in different summation orders: differences of a few ulps of
# values of order 1 (float32 eps 1.2e-7) grown through a handful of layers, far under any real mistake.
FORWARD_TOLERANCE = 1e-5
GRADIENT_TOLERANCE = 1e-5  # the same, for the gradients (a few more ops)


def layer_spec(name: str, input_shape: list[int], layers: list[dict[str, Any]], dtype: str = "float32") -> str:
    """A spec with input `x` of `input_shape` (batch implicit) and the last layer as output `y`."""
    document = {"specgen": 1, "name": name, "inputs": {"x": {"shape": input_shape, "dtype": dtype}},
                "outputs": {"y": layers[-1]["name"]}, "layers": layers}
    return yaml.safe_dump(document, sort_keys=False)


def generated_model(text: str, tmp_path: Path) -> Any:
    """The generated TensorFlow model of a spec text (seeded, weights from its initializers)."""
    from specgen.runtime import parity

    ir = build_ir(load_spec_text(text, "case.yaml"))
    files = render_files(ir)
    path = tmp_path / f"{ir.name}_model.py"
    path.write_bytes(files["model.py"])
    return getattr(parity.load_generated(path), ir.class_name)(seed=0)


def compare(keras_layer: Any, spec_layers: list[dict[str, Any]], input_shape: list[int], tmp_path: Path,
            *, batch: int = 3, seed: int = 0, training: bool = False, inputs: np.ndarray | None = None,
            roles: dict[str, str] | None = None) -> dict[str, float]:
    """Max abs diffs {'forward': ..., 'grad <path>': ..., 'grad input': ...} between the two.

    `spec_layers[-1]` is the layer under test (earlier entries may prepare its input, e.g. a
    reshape); every variable of the generated model must match one Keras weight by role, or be
    named in `roles` ({spec path: keras weight name}).
    """
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    model = generated_model(layer_spec("case", input_shape, spec_layers), tmp_path)
    x = inputs if inputs is not None else rng.standard_normal((batch, *input_shape)).astype(np.float32)
    keras_layer.build((None, *input_shape))
    by_role = {w.name: w for w in keras_layer.weights}
    ours = model.variables_by_path()
    assert len(ours) == len(by_role), f"generated variables {sorted(ours)} vs Keras weights {sorted(by_role)}"
    for path, variable in ours.items():
        theirs = by_role[(roles or {}).get(path, path.rsplit("/", 1)[-1])]
        assert tuple(theirs.shape) == tuple(variable.shape), f"{path}: {variable.shape} here, {theirs.shape} in Keras"
        value = rng.standard_normal(tuple(variable.shape)).astype(np.float32)
        if "variance" in path:
            value = np.abs(value) + 0.5  # a variance is positive
        theirs.assign(value)
        variable.assign(value)
    projection = None
    diffs: dict[str, float] = {}
    x_ours, x_theirs = tf.Variable(x), tf.Variable(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(list(ours.values()))  # generated variables may be non-trainable tf.Variables
        ours_out = model({"x": x_ours}, training=training)["y"]
        theirs_out = keras_layer(x_theirs, training=training)
        projection = tf.constant(rng.standard_normal(tuple(theirs_out.shape)).astype(np.float32))
        ours_loss = tf.reduce_sum(ours_out * projection)
        theirs_loss = tf.reduce_sum(theirs_out * projection)
    assert tuple(ours_out.shape) == tuple(theirs_out.shape), f"shape {ours_out.shape} here, {theirs_out.shape} in Keras"
    diffs["forward"] = float(np.max(np.abs(ours_out.numpy().astype(np.float64) - theirs_out.numpy())))
    for path, variable in ours.items():  # trainable as Keras says (generated variables leave it to train.py)
        theirs = by_role[(roles or {}).get(path, path.rsplit("/", 1)[-1])]
        if not theirs.trainable:
            continue
        g_ours, g_theirs = tape.gradient(ours_loss, variable), tape.gradient(theirs_loss, theirs)
        diffs[f"grad {path}"] = float(np.max(np.abs(np.asarray(g_ours, np.float64) - np.asarray(g_theirs))))
    g_ours, g_theirs = tape.gradient(ours_loss, x_ours), tape.gradient(theirs_loss, x_theirs)
    if g_ours is not None or g_theirs is not None:
        diffs["grad input"] = float(np.max(np.abs(np.asarray(g_ours, np.float64) - np.asarray(g_theirs))))
    return diffs


def assert_close(diffs: dict[str, float]) -> None:
    """Every difference finite and within its tolerance (NaN fails: `not d <= limit`)."""
    for key, value in diffs.items():
        limit = FORWARD_TOLERANCE if key == "forward" else GRADIENT_TOLERANCE
        assert value <= limit, f"{key}: max abs diff {value:.3g} (limit {limit})"
