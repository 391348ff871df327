"""Keras parity of multi_head_attention: keras.layers.MultiHeadAttention with the same configuration and
weights (set with Keras' own set_weights, in its order), self-attention; forward and the gradients of every
weight and of the input within 1e-5 (tests/keras_parity.py's tolerances; gradients over 1 relative to their
size), causal or not, with and without biases; positioned spec errors. The ONNX side is tests/op_cases_attention.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

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


# Cross-attention and masks: query [t, 6], value [s, 4], key [s, 5] (named: one graph, two lengths each
# run, query and key lengths different), the mask [t, s] of 0/1 floats.
CROSS = {"q": ["t", 6], "v": ["s", 4], "k": ["s", 5]}
LENGTHS = ({"t": 5, "s": 7}, {"t": 9, "s": 3})


def _rotary_mha(rotary: dict[str, float], **params: Any) -> Any:
    """Keras' MultiHeadAttention with KerasHub's RotaryEmbedding on the projected query and key (as
    KerasHub's decoders apply it), the reference for specgen's `rotary:`."""
    keras_hub = pytest.importorskip("keras_hub")

    class Rotary(keras.layers.MultiHeadAttention):
        def _compute_attention(self, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
            embed = keras_hub.layers.RotaryEmbedding(**rotary)
            return super()._compute_attention(embed(query), embed(key), value, *args, **kwargs)

    return Rotary(**params)


def _cross_diffs(params: dict[str, Any], parts: int, mask: bool, tmp_path: Path) -> list[dict[str, float]]:
    """Per length: max abs diffs (forward, every weight's gradient, scaled as _scaled) against Keras."""
    import tensorflow as tf

    rng = np.random.default_rng(3)
    names = ["q", "v", "k"][:parts]
    wiring: dict[str, Any] = {"inputs": names} if parts > 1 else {"input": "q"}
    inputs = {n: {"shape": CROSS[n] if parts > 1 else ["t", 6]} for n in names}
    if mask:
        inputs["m"] = {"shape": ["t", "s" if parts > 1 else "t"]}
        wiring["attention_mask"] = "m"
    layer = {"name": "att", "op": "multi_head_attention", **wiring, **params}
    text = yaml.safe_dump({"specgen": 1, "name": "cross", "inputs": inputs, "outputs": {"y": "att"}, "layers": [layer]})
    model = generated_model(text, tmp_path)
    keras_params = {k: v for k, v in params.items() if k not in ("causal", "rotary")}
    theirs = (_rotary_mha(params["rotary"], **keras_params) if "rotary" in params
              else keras.layers.MultiHeadAttention(**keras_params))
    theirs.build(*((None, None, CROSS[n][1] if parts > 1 else 6) for n in ["q", "v", "k"][:max(parts, 2)]))
    ours = model.variables_by_path()
    order = [f"att/{role}/{part}" for role in ROLES for part in ("kernel", "bias")[:1 + params.get("use_bias", True)]]
    values = [(rng.standard_normal(tuple(ours[p].shape)) / np.sqrt(ours[p].shape[0])).astype(np.float32) for p in order]
    theirs.set_weights(values)
    for path, value in zip(order, values, strict=True):
        ours[path].assign(value)
    found = []
    for sizes in LENGTHS:
        feeds = {n: rng.standard_normal((2, sizes[d[0]] if parts > 1 else sizes["t"], d[1] if parts > 1 else 6))
                 .astype(np.float32) for n, d in ((n, CROSS[n]) for n in names)}
        if mask:
            keep = rng.random((2, sizes["t"], sizes["s"] if parts > 1 else sizes["t"])) > 0.4
            keep[..., 0] = True  # no fully masked query step (Keras' dot_product_attention path gives it NaN-free zeros)
            feeds["m"] = keep.astype(np.float32)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(list(ours.values()))  # generated variables may be non-trainable tf.Variables
            out_ours = model({k: tf.constant(v) for k, v in feeds.items()}, training=False)["y"]
            call = [tf.constant(feeds[n]) for n in names] + ([tf.constant(feeds["q"])] if parts == 1 else [])
            out_theirs = theirs(*call, attention_mask=tf.constant(feeds["m"] > 0) if mask else None,
                                use_causal_mask=params.get("causal", False))
            projection = tf.constant(rng.standard_normal(tuple(out_theirs.shape)).astype(np.float32))
            loss_ours, loss_theirs = tf.reduce_sum(out_ours * projection), tf.reduce_sum(out_theirs * projection)
        assert tuple(out_ours.shape) == tuple(out_theirs.shape) == (2, sizes["t"], 6)
        diffs = {"forward": float(np.max(np.abs(out_ours.numpy() - out_theirs.numpy())))}
        for path, weight in zip(order, theirs.weights, strict=True):
            diffs[f"grad {path}"] = _scaled(tape.gradient(loss_ours, ours[path]), tape.gradient(loss_theirs, weight))
        found.append(diffs)
    return found


CROSS_CASES = {
    "cross_qv": ({}, 2, False),
    "cross_qvk_value_dim_no_bias": ({"value_dim": 3, "use_bias": False}, 3, False),
    "cross_qvk_mask": ({}, 3, True),
    "cross_qv_mask_causal": ({"causal": True}, 2, True),
    "cross_qv_causal": ({"causal": True}, 2, False),
    "self_mask": ({}, 1, True),
    "self_rotary_causal": ({"rotary": {"max_wavelength": 10000.0}, "causal": True}, 1, False),
    "cross_rotary_scaled_mask": ({"rotary": {"max_wavelength": 500.0, "scaling_factor": 4.0}}, 3, True),
}


@pytest.mark.parametrize("case", sorted(CROSS_CASES))
def test_cross_and_masks_match_keras(case: str, tmp_path: Path) -> None:
    params, parts, mask = CROSS_CASES[case]
    found = _cross_diffs({"num_heads": 2, "key_dim": 4, **params}, parts, mask, tmp_path)
    assert len(found) == 2 and len(found[0]) == 1 + 4 * (1 + params.get("use_bias", True))
    for diffs in found:
        assert_close(diffs)


def test_mask_changes_the_output(tmp_path: Path) -> None:
    """Parity above would hold for a mask both sides ignore: masking key step 1 changes every output."""
    import tensorflow as tf

    spec = {"specgen": 1, "name": "m", "inputs": {"q": {"shape": [4, 6]}, "m": {"shape": [4, 4]}},
            "outputs": {"y": "att"}, "layers": [{"name": "att", "op": "multi_head_attention", "input": "q",
                                                 "attention_mask": "m", "num_heads": 2, "key_dim": 4}]}
    model = generated_model(yaml.safe_dump(spec), tmp_path)
    q = tf.constant(np.random.default_rng(4).standard_normal((1, 4, 6)).astype(np.float32))
    ones = np.ones((1, 4, 4), np.float32)
    dropped = ones.copy()
    dropped[..., 1] = 0
    full, masked = (model({"q": q, "m": tf.constant(m)})["y"].numpy() for m in (ones, dropped))
    assert np.all(np.abs(full - masked).max(axis=-1) > 1e-4)


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


def test_rotary_changes_the_output(tmp_path: Path) -> None:
    """The rotary parity would hold if both sides skipped the rotation: with it, every step but the first
    (position 0: angle 0, the identity) changes."""
    import tensorflow as tf

    q = tf.constant(np.random.default_rng(5).standard_normal((1, 4, 6)).astype(np.float32))
    outs = []
    for extra in ({}, {"rotary": {}}):
        layer = {"name": "att", "op": "multi_head_attention", "num_heads": 2, "key_dim": 4, "causal": True, **extra}
        outs.append(generated_model(layer_spec(f"r{len(extra)}", [4, 6], [layer]), tmp_path)({"x": q})["y"].numpy())
    np.testing.assert_allclose(outs[0][:, 0], outs[1][:, 0], rtol=0, atol=1e-6)  # causal: step 0 sees itself only
    assert np.all(np.abs(outs[0][:, 1:] - outs[1][:, 1:]).max(axis=-1) > 1e-4)


LAYERS = """specgen: 1
name: bad
inputs:
  x: {shape: [6, 5]}
  v: {shape: [5]}
  val: {shape: [7, 4]}
  k: {shape: [8, 4]}
  m: {shape: [6, 8]}
outputs:
  y: last
layers:
LAST
"""

ERRORS = [
    ("rank2", "  - {name: last, op: multi_head_attention, input: v, num_heads: 2, key_dim: 4}",
     "12:51: error: layer 'last' (multi_head_attention): multi_head_attention needs a rank-3 float32 "
     "input (batch, time, features); received [batch, 5] float32"),
    ("heads_zero", "  - {name: last, op: multi_head_attention, input: x, num_heads: 0, key_dim: 4}",
     "12:65: error: num_heads: received 0, expected a value > 0 (in layer 'last')"),
    ("key_dim_zero", "  - {name: last, op: multi_head_attention, input: x, num_heads: 2, key_dim: 0}",
     "12:77: error: key_dim: received 0, expected a value > 0 (in layer 'last')"),
    ("key_value_steps", "  - {name: last, op: multi_head_attention, inputs: [x, val, k], num_heads: 2, key_dim: 4}",
     "12:52: error: layer 'last' (multi_head_attention): inputs: received key 'k' [batch, 8, 4] and value 'val' "
     "[batch, 7, 4]; expected the same number of steps (each key step goes with a value step)"),
    ("value_rank2", "  - {name: last, op: multi_head_attention, inputs: [x, v], num_heads: 2, key_dim: 4}",
     "12:52: error: layer 'last' (multi_head_attention): multi_head_attention needs its value rank-3 float32 input "
     "(batch, time, features); received [batch, 5] float32"),
    ("mask_shape", "  - {name: last, op: multi_head_attention, inputs: [x, val], attention_mask: m, num_heads: 2, "
     "key_dim: 4}", "12:78: error: layer 'last' (multi_head_attention): attention_mask: received 'm' [batch, 6, 8] "
     "float32; expected [batch, 6, 7] (batch, query steps, key steps) of float32, int32, int64"),
    ("mask_unknown", "  - {name: last, op: multi_head_attention, input: x, attention_mask: mm, num_heads: 2, key_dim: 4}",
     "12:70: error: layer 'last' reads 'mm', which is neither a layer nor an input; did you mean 'm'?"),
    ("both_inputs", "  - {name: last, op: multi_head_attention, input: x, inputs: [x, val], num_heads: 2, key_dim: 4}",
     "12:62: error: layer 'last' (multi_head_attention): received both input and inputs; expected input "
     "(self-attention) or inputs ([query, value] or [query, value, key]: cross-attention)"),
    ("four_inputs", "  - {name: last, op: multi_head_attention, inputs: [x, val, k, m], num_heads: 2, key_dim: 4}",
     "12:52: error: inputs: expected at most 3 item(s), received 4 (in layer 'last')"),
    ("rotary_odd", "  - {name: last, op: multi_head_attention, input: x, num_heads: 2, key_dim: 3, rotary: {}}",
     "12:88: error: layer 'last' (multi_head_attention): rotary: received key_dim 3; expected an even key_dim "
     "(rotary embedding turns pairs of a head's features)"),
    ("rotary_scaling", "  - {name: last, op: multi_head_attention, input: x, num_heads: 2, key_dim: 4, "
     "rotary: {scaling_factor: 0.5}}", "12:105: error: scaling_factor: received 0.5, expected a value >= 1.0 "
     "(in layer 'last')"),
    ("kernel_too_big", "  - {name: last, op: multi_head_attention, input: x, num_heads: 100000, key_dim: 5000}",
     "12:65: error: layer 'last' (multi_head_attention): num_heads: received 100000 heads of 5000 values over 5 "
     "features, a kernel of 2500000000 values; expected at most 2147483647 (fewer heads or a smaller key_dim / "
     "value_dim)"),
    ("dropout_one", "  - {name: last, op: multi_head_attention, input: x, num_heads: 2, key_dim: 4, dropout: 1}",
     "12:89: error: dropout: received 1, expected a value < 1.0 (in layer 'last')"),
]


@pytest.mark.parametrize(("layer", "expected"), [pytest.param(t, e, id=i) for i, t, e in ERRORS])
def test_positioned_errors(layer: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(LAYERS.replace("LAST", layer))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1:] == ["1 error found"] and err[0].endswith(f"spec.yaml:{expected}"), err
    assert list(tmp_path.iterdir()) == [path]  # nothing written
