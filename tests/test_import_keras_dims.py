"""`specgen import keras` of a model with an open (None) time axis: the spec declares it as the named
dynamic dimension dim1 and the generated model equals Keras at two lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")

from test_import_keras import RTOL, compare, randomize, run_import  # noqa: E402


def test_open_time_axis_imports_as_a_symbol(tmp_path: Path) -> None:
    layers = keras.layers
    x = keras.Input((None, 6), name="x")
    c = layers.Conv1D(6, 3, padding="causal", dilation_rate=2, name="causal")(x)
    s = layers.Add(name="residual")([x, c])
    s = layers.Conv1D(4, 3, strides=2, padding="same", activation="relu", name="down")(s)
    s = layers.MaxPooling1D(2, name="pool")(s)
    s = layers.AveragePooling1D(2, strides=1, padding="same", name="avg")(s)
    s = layers.GlobalAveragePooling1D(name="gap")(s)
    model = keras.Model(x, layers.Dense(3, name="head")(s))
    randomize(model)
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    assert doc["inputs"] == {"x": {"shape": ["dim1", 6], "dtype": "float32"}}
    assert [(layer["name"], layer["op"]) for layer in doc["layers"]] == [
        ("causal", "conv1d"), ("residual", "add"), ("down", "conv1d"), ("pool", "max_pool1d"),
        ("avg", "avg_pool1d"), ("gap", "global_avg_pool"), ("head", "dense")]
    rng = np.random.default_rng(0)
    for steps in (7, 16):  # one spec, two lengths
        feeds = {"x": rng.standard_normal((2, steps, 6)).astype(np.float32)}
        assert compare(spec, tmp_path, model, feeds) <= RTOL
