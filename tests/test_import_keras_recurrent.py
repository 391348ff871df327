"""`specgen import keras` of LSTM, GRU and SimpleRNN (Keras 3 .keras and Keras 2 .h5): the imported spec,
restored from the file through its own restore section, equals `model.predict`; unsupported
arguments are refused by name."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")

from test_import_keras import compare, randomize, refusal, run_import  # noqa: E402

from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.runtime.commands.restore import plan_restore  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

RTOL = 1e-5  # relative to the largest output: float32 summation order differs over 7 steps


def sequence_model(api: Any) -> Any:
    layers = api.layers
    x = api.Input((7, 5), name="steps")
    h = layers.LSTM(6, return_sequences=True, recurrent_activation="hard_sigmoid" if api is keras else "sigmoid",
                    name="enc")(x)
    h = layers.GRU(4, return_sequences=True, go_backwards=True, name="mid")(h)
    h = layers.GRU(3, reset_after=False, return_sequences=True, use_bias=False, name="old")(h)
    h = layers.SimpleRNN(3, activation="relu", name="last")(h)
    model = api.Model(x, layers.Dense(2, name="head")(h), name="seq")
    randomize(model)
    return model


@pytest.mark.parametrize("kind", ["keras3", "keras2"])
def test_recurrent_import_equals_predict(kind: str, tmp_path: Path) -> None:
    api = keras if kind == "keras3" else pytest.importorskip("tf_keras")
    model = sequence_model(api)
    source = tmp_path / ("m.keras" if kind == "keras3" else "m.h5")
    model.save(source)
    spec = tmp_path / "m.yaml"
    assert run_import(source, "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    keys = {layer["name"]: {k: v for k, v in layer.items() if k not in ("name", "input")} for layer in doc["layers"]}
    assert keys == {"enc": {"op": "lstm", "units": 6, "return_sequences": True,
                            **({"recurrent_activation": "hard_sigmoid"} if kind == "keras3" else {})},
                    "mid": {"op": "gru", "units": 4, "return_sequences": True, "go_backwards": True},
                    "old": {"op": "gru", "units": 3, "return_sequences": True, "reset_after": False, "use_bias": False},
                    "last": {"op": "simple_rnn", "units": 3, "activation": "relu"},
                    "head": {"op": "dense", "units": 2}}
    loaded = load_spec(spec)
    plan = plan_restore(loaded, {v.path: (v.shape, v.dtype) for v in build_ir(loaded).model_variables})
    assert plan.ok and plan.count("restored") == 13 and not plan.unused  # every weight, from the file
    feeds = {"steps": np.random.default_rng(5).standard_normal((3, 7, 5)).astype(np.float32)}
    assert compare(spec, tmp_path, model, feeds) < RTOL


@pytest.mark.parametrize(("layer", "argument"), [
    (lambda: keras.layers.LSTM(3, recurrent_dropout=0.5, name="odd"), "recurrent_dropout=0.5"),
    (lambda: keras.layers.GRU(3, dropout=0.25, name="odd"), "dropout=0.25"),
    (lambda: keras.layers.SimpleRNN(3, activation="softplus", name="odd"), "activation=softplus"),
])
def test_recurrent_arguments_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], layer: Any,
                                     argument: str) -> None:
    a = keras.Input((4, 2), name="a")
    err = refusal(tmp_path, keras.Model(a, layer()(a)), capsys)
    assert re.search(rf"Keras layer 'odd' \(\w+\): argument {re.escape(argument)} cannot be expressed", err), err
