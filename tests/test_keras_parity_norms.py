"""Keras parity of batch_norm's center/scale, scale, rescale, normalize, the broadcasting merges and
the keepdims global pools: Keras' own layer with the same configuration and weights (forward and
gradients within 1e-5; tests/keras_parity.py). Merges take two inputs, which the harness does not
build, so they are compared here with the same structure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")

from keras_parity import assert_close, compare, generated_model  # noqa: E402

MEAN, VARIANCE = [0.485, 0.456, -0.406], [0.052, 2.5, 0.049]


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize(("center", "scale"), [(False, True), (True, False), (False, False)])
def test_batch_norm_center_scale_match_keras(center: bool, scale: bool, training: bool, tmp_path: Path) -> None:
    layer = {"name": "bn", "op": "batch_norm", "momentum": 0.9, "epsilon": 1e-3, "center": center, "scale": scale}
    diffs = compare(keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-3, center=center, scale=scale),
                    [layer], [5, 3, 4], tmp_path, training=training)
    grads = {k for k in diffs if k.startswith("grad bn/")}
    assert grads == {f"grad bn/{r}" for r, on in (("gamma", scale), ("beta", center)) if on}
    assert_close(diffs)


def test_scale_matches_layer_scale(tmp_path: Path) -> None:
    """ConvNeXt's LayerScale (x * gamma); its weight is named 'variable' in Keras 3."""
    from keras.src.applications.convnext import LayerScale

    diffs = compare(LayerScale(1e-6, 4), [{"name": "ls", "op": "scale"}], [5, 3, 4], tmp_path,
                    roles={"ls/gamma": "variable"})
    assert set(diffs) == {"forward", "grad ls/gamma", "grad input"}
    assert_close(diffs)


def test_scale_starts_at_init_values(tmp_path: Path) -> None:
    model = generated_model(_spec([{"name": "ls", "op": "scale", "init_values": 0.25}], {"x": [3]}), tmp_path)
    np.testing.assert_array_equal(model.variables_by_path()["ls/gamma"].numpy(), np.full(3, 0.25, np.float32))


@pytest.mark.parametrize(("scale", "offset"), [(1 / 255, 0.0), (1 / 127.5, -1.0), ([0.5, -2.0, 3.0], [0.1, 0.0, -1.5])])
def test_rescale_matches_rescaling(scale: Any, offset: Any, tmp_path: Path) -> None:
    diffs = compare(keras.layers.Rescaling(scale, offset), [{"name": "r", "op": "rescale", "scale": scale,
                                                              "offset": offset}],
                    [5, 4, 3], tmp_path, inputs=np.random.default_rng(1).uniform(0, 255, (3, 5, 4, 3)).astype(np.float32))
    assert_close(diffs)


@pytest.mark.parametrize(("mean", "variance"), [(MEAN, VARIANCE), (0.5, 4.0), (MEAN, [0.052, 0.0, 0.049])])
def test_normalize_matches_normalization_with_fixed_statistics(mean: Any, variance: Any, tmp_path: Path) -> None:
    """A zero variance divides by Keras' epsilon (1e-7), as Keras does."""
    diffs = compare(keras.layers.Normalization(mean=mean, variance=variance),
                    [{"name": "n", "op": "normalize", "mean": mean, "variance": variance}], [5, 4, 3], tmp_path)
    assert_close(diffs)


def test_normalize_variables_match_an_adapted_normalization(tmp_path: Path) -> None:
    """Left out in the spec, mean and variance are variables; given an adapted layer's values, the same output."""
    import tensorflow as tf

    rng = np.random.default_rng(2)
    data = (rng.standard_normal((64, 5, 4, 3)) * [1.0, 3.0, 0.2] + [0.5, -2.0, 4.0]).astype(np.float32)
    theirs = keras.layers.Normalization()
    theirs.adapt(data)
    model = generated_model(_spec([{"name": "n", "op": "normalize"}], {"x": [5, 4, 3]}), tmp_path)
    ours = model.variables_by_path()
    assert set(ours) == {"n/mean", "n/variance"}
    ours["n/mean"].assign(theirs.adapt_mean.numpy())
    ours["n/variance"].assign(theirs.adapt_variance.numpy())
    x_ours, x_theirs = tf.Variable(data[:3]), tf.Variable(data[:3])
    projection = tf.constant(rng.standard_normal((3, 5, 4, 3)).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        out_ours = model({"x": x_ours})["y"]
        out_theirs = theirs(x_theirs)
        loss_ours, loss_theirs = tf.reduce_sum(out_ours * projection), tf.reduce_sum(out_theirs * projection)
    assert_close({"forward": _diff(out_ours, out_theirs),
                  "grad input": _diff(tape.gradient(loss_ours, x_ours), tape.gradient(loss_theirs, x_theirs))})


MERGES = [("add", "Add"), ("multiply", "Multiply"), ("subtract", "Subtract")]
SHAPES = [([5, 4, 3], [1, 1, 3]), ([5, 1, 3], [5, 4, 1]), ([5, 4, 3], [5, 4, 3])]


@pytest.mark.parametrize(("op", "keras_name"), MERGES)
@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES, ids=["squeeze_excite", "both_sides", "same"])
def test_merges_broadcast_like_keras(op: str, keras_name: str, a_shape: list[int], b_shape: list[int],
                                     tmp_path: Path) -> None:
    import tensorflow as tf

    rng = np.random.default_rng(3)
    model = generated_model(_spec([{"name": "m", "op": op, "inputs": ["a", "b"]}], {"a": a_shape, "b": b_shape}),
                            tmp_path)
    a = tf.Variable(rng.standard_normal((3, *a_shape)).astype(np.float32))
    b = tf.Variable(rng.standard_normal((3, *b_shape)).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        out_ours = model({"a": a, "b": b})["y"]
        out_theirs = getattr(keras.layers, keras_name)()([a, b])
        projection = tf.constant(rng.standard_normal(tuple(out_theirs.shape)).astype(np.float32))
        loss_ours, loss_theirs = tf.reduce_sum(out_ours * projection), tf.reduce_sum(out_theirs * projection)
    assert tuple(out_ours.shape) == tuple(out_theirs.shape)
    assert_close({"forward": _diff(out_ours, out_theirs),
                  **{f"grad {n}": _diff(tape.gradient(loss_ours, v), tape.gradient(loss_theirs, v))
                     for n, v in (("a", a), ("b", b))}})


@pytest.mark.parametrize(("op", "keras_name"), [("global_avg_pool", "GlobalAveragePooling2D"),
                                                ("global_max_pool", "GlobalMaxPooling2D")])
@pytest.mark.parametrize("keepdims", [True, False])
def test_global_pools_match_keras(op: str, keras_name: str, keepdims: bool, tmp_path: Path) -> None:
    diffs = compare(getattr(keras.layers, keras_name)(keepdims=keepdims),
                    [{"name": "g", "op": op, "keepdims": keepdims}], [9, 7, 3], tmp_path)
    assert_close(diffs)


def _spec(layers: list[dict[str, Any]], inputs: dict[str, list[int]]) -> str:
    document = {"specgen": 1, "name": "case", "inputs": {n: {"shape": s} for n, s in inputs.items()},
                "outputs": {"y": layers[-1]["name"]}, "layers": layers}
    return yaml.safe_dump(document, sort_keys=False)


def _diff(ours: Any, theirs: Any) -> float:
    return float(np.max(np.abs(np.asarray(ours, np.float64) - np.asarray(theirs, np.float64))))
