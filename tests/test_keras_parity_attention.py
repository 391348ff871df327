"""Keras parity of multi_head_attention: keras.layers.MultiHeadAttention with the same configuration and
weights (set with Keras' own set_weights, in its order), self-attention; forward and the gradients of every
weight and of the input within 1e-5 (tests/keras_parity.py's tolerances; gradients over 1 relative to their
size), causal or not, with and without biases; positioned spec errors. The ONNX side is tests/op_cases_attention.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specgen.cli import main

keras = pytest.importorskip("keras")

from keras_parity import assert_close, generated_model, layer_spec  # noqa: E402

SHAPE = [6, 8]  # [time, features]
ROLES = ("query", "key", "value", "attention_output")  # Keras' weight order: kernel then bias of each


def _diffs(params: dict[str, Any], tmp_path: Path, batch: int = 3) -> dict[str, float]:
    """Max abs diffs {'forward', 'grad <path>', 'grad input'} between the generated layer and Keras'."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    spec_layer = {"name": "att", "op": "multi_head_attention", **params}
    model = generated_model(layer_spec("mha", SHAPE, [spec_layer]), tmp_path)
    keras_params = {k: v for k, v in params.items() if k != "causal"}
    theirs = keras.layers.MultiHeadAttention(**keras_params)
    theirs.build((None, *SHAPE), (None, *SHAPE))
    ours = model.variables_by_path()
    parts = ("kernel", "bias") if params.get("use_bias", True) else ("kernel",)
    order = [f"att/{role}/{part}" for role in ROLES for part in parts]
    assert sorted(ours) == sorted(order)
    # Scaled as glorot would (1/sqrt(fan-in)): unit-variance weights give scores of order 10, a softmax
    # saturated to one-hot whose gradients (of order 1e3) turn float32 rounding into 1e-4 differences.
    values = [(rng.standard_normal(tuple(ours[p].shape)) / np.sqrt(ours[p].shape[0])).astype(np.float32) for p in order]
    theirs.set_weights(values)  # raises on any shape that is not Keras'
    for path, value in zip(order, values, strict=True):
        ours[path].assign(value)
    x = rng.standard_normal((batch, *SHAPE)).astype(np.float32)
    x_ours, x_theirs = tf.Variable(x), tf.Variable(x)
    causal = params.get("causal", False)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(list(ours.values()))
        out_ours = model({"x": x_ours}, training=False)["y"]
        out_theirs = theirs(x_theirs, x_theirs, use_causal_mask=causal)
        projection = tf.constant(rng.standard_normal(tuple(out_theirs.shape)).astype(np.float32))
        loss_ours, loss_theirs = tf.reduce_sum(out_ours * projection), tf.reduce_sum(out_theirs * projection)
    assert tuple(out_ours.shape) == tuple(out_theirs.shape) == (batch, *SHAPE)
    diffs = {"forward": float(np.max(np.abs(out_ours.numpy() - out_theirs.numpy())))}
    for path, weight in zip(order, theirs.weights, strict=True):
        g_ours, g_theirs = tape.gradient(loss_ours, ours[path]), tape.gradient(loss_theirs, weight)
        diffs[f"grad {path}"] = _scaled(g_ours, g_theirs)
    g_ours, g_theirs = tape.gradient(loss_ours, x_ours), tape.gradient(loss_theirs, x_theirs)
    diffs["grad input"] = _scaled(g_ours, g_theirs)
    return diffs


def _scaled(ours: Any, theirs: Any) -> float:
    """Max abs diff of two gradients, divided by their size when that is over 1. A kernel's gradient sums
    batch x time products and reaches ~10 here, and the softmax backward (p * (g - sum(p * g))) cancels: the
    two float32 evaluations then differ by ~1.4e-6 relative (1.3e-5 absolute, query/kernel, causal with
    value_dim), a dozen ulps of the value, while any real mistake changes it by far more than 1e-5."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    return float(np.max(np.abs(ours - theirs)) / max(1.0, float(np.max(np.abs(theirs)))))


@pytest.mark.parametrize("use_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("heads", "key_dim", "value_dim"), [(2, 4, None), (3, 2, 5)], ids=["kv", "value_dim"])
def test_matches_keras(heads: int, key_dim: int, value_dim: int | None, causal: bool, use_bias: bool,
                       tmp_path: Path) -> None:
    params: dict[str, Any] = {"num_heads": heads, "key_dim": key_dim, "use_bias": use_bias, "causal": causal}
    if value_dim:
        params["value_dim"] = value_dim
    diffs = _diffs(params, tmp_path)
    assert len(diffs) == (10 if use_bias else 6)  # forward, input and one per weight
    assert_close(diffs)


def test_causal_mask_changes_the_output(tmp_path: Path) -> None:
    """The parity above would hold for a mask both sides ignore: the causal output must differ from the full
    one except at the last step, which sees every step either way."""
    import tensorflow as tf

    x = tf.constant(np.random.default_rng(1).standard_normal((2, *SHAPE)).astype(np.float32))
    outs = []
    for causal in (False, True):
        layer = {"name": "att", "op": "multi_head_attention", "num_heads": 2, "key_dim": 4, "causal": causal}
        outs.append(generated_model(layer_spec(f"m{causal:d}", SHAPE, [layer]), tmp_path)({"x": x})["y"].numpy())
    np.testing.assert_array_equal(outs[0][:, -1], outs[1][:, -1])  # same weights (seed 0, same paths)
    assert np.all(np.abs(outs[0][:, :-1] - outs[1][:, :-1]).max(axis=-1) > 1e-3)


def test_dropout_in_training_only(tmp_path: Path) -> None:
    """dropout falls on the attention weights in training (seeded: two calls agree) and is the identity at inference."""
    import tensorflow as tf

    x = tf.constant(np.random.default_rng(2).standard_normal((2, *SHAPE)).astype(np.float32))
    layer = {"name": "att", "op": "multi_head_attention", "num_heads": 2, "key_dim": 4, "dropout": 0.5}
    model = generated_model(layer_spec("drop", SHAPE, [layer]), tmp_path)
    plain = {"name": "att", "op": "multi_head_attention", "num_heads": 2, "key_dim": 4}
    reference = generated_model(layer_spec("plain", SHAPE, [plain]), tmp_path)({"x": x})["y"].numpy()
    np.testing.assert_array_equal(model({"x": x}, training=False)["y"].numpy(), reference)
    seed = tf.constant([7, 11], tf.int64)
    dropped = model({"x": x}, training=True, seed=seed)["y"].numpy()
    np.testing.assert_array_equal(model({"x": x}, training=True, seed=seed)["y"].numpy(), dropped)
    assert np.abs(dropped - reference).max() > 1e-2


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
    ("rank2", "  - {name: last, op: multi_head_attention, input: v, num_heads: 2, key_dim: 4}",
     "9:51: error: layer 'last' (multi_head_attention): multi_head_attention needs a rank-3 input "
     "(batch, time, features); received [batch, 5]"),
    ("heads_zero", "  - {name: last, op: multi_head_attention, input: x, num_heads: 0, key_dim: 4}",
     "9:65: error: num_heads: received 0, expected a value > 0 (in layer 'last')"),
    ("key_dim_zero", "  - {name: last, op: multi_head_attention, input: x, num_heads: 2, key_dim: 0}",
     "9:77: error: key_dim: received 0, expected a value > 0 (in layer 'last')"),
    ("dropout_one", "  - {name: last, op: multi_head_attention, input: x, num_heads: 2, key_dim: 4, dropout: 1}",
     "9:89: error: dropout: received 1, expected a value < 1.0 (in layer 'last')"),
]


@pytest.mark.parametrize(("layer", "expected"), [pytest.param(t, e, id=i) for i, t, e in ERRORS])
def test_positioned_errors(layer: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(LAYERS.replace("LAST", layer))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1:] == ["1 error found"] and err[0].endswith(f"spec.yaml:{expected}"), err
    assert list(tmp_path.iterdir()) == [path]  # nothing written
