"""`specgen import keras` of a model with an open (None) time axis: the spec declares it as the named
dynamic dimension dim1 and the generated model equals Keras at two lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")

from test_import_keras import RTOL, compare, randomize, run_import  # noqa: E402

from specgen.cli import main  # noqa: E402


def open_time_model(tmp_path: Path) -> tuple[object, Path]:
    """A Keras model on Input((None, 6)), saved and imported; (model, spec path)."""
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
    return model, spec


def test_open_time_axis_imports_as_a_symbol(tmp_path: Path) -> None:
    model, spec = open_time_model(tmp_path)
    doc = yaml.safe_load(spec.read_text())
    assert doc["inputs"] == {"x": {"shape": ["dim1", 6], "dtype": "float32"}}
    assert [(layer["name"], layer["op"]) for layer in doc["layers"]] == [
        ("causal", "conv1d"), ("residual", "add"), ("down", "conv1d"), ("pool", "max_pool1d"),
        ("avg", "avg_pool1d"), ("gap", "global_avg_pool"), ("head", "dense")]
    rng = np.random.default_rng(0)
    for steps in (7, 16):  # one spec, two lengths
        feeds = {"x": rng.standard_normal((2, steps, 6)).astype(np.float32)}
        assert compare(spec, tmp_path, model, feeds) <= RTOL


def test_exported_graph_serves_two_lengths(tmp_path: Path) -> None:
    """`specgen export` (restored from the .keras file) and the Predictor behind infer/serve, at two lengths."""
    from specgen.runtime.predictor import InputError, Predictor

    model, spec = open_time_model(tmp_path)
    assert main(["export", str(spec), "-o", str(tmp_path / "out"), "--triton"]) == 0
    predictor = Predictor(str(tmp_path / "out" / "model.onnx"))
    rng = np.random.default_rng(1)
    for steps in (4, 19):
        x = rng.standard_normal((3, steps, 6)).astype(np.float32)
        theirs = model.predict(x, verbose=0)
        ours = predictor({"x": x})["head"]
        assert float(np.abs(ours - theirs).max() / np.abs(theirs).max()) <= RTOL
    with pytest.raises(InputError, match=r"^input 'x': received shape \[3, 5, 7\], expected \['batch', 'dim1', 6\]$"):
        predictor({"x": np.zeros((3, 5, 7), np.float32)})
    config = next((tmp_path / "out").rglob("config.pbtxt")).read_text()
    assert "    dims: [ -1, 6 ]\n" in config  # the time axis open for Triton too
