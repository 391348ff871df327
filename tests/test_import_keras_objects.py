"""Keras initializers, regularizers and constraints in an imported layer config are read whole (issue 28: a
`VarianceScaling` initializer with `scale: "x"` imported with exit 0, skipped unread).

The tables of importers/keras/objects.py list each class's arguments; they are compared here with Keras' own
`get_config()` keys, so a Keras release that adds an argument shows up as a failing test, not as an argument the
importer refuses (or worse, reads wrongly). Configs are built as JSON in the test (tests/keras_configs.py)."""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from keras_configs import functional, input_layer, layer, write_keras

from specgen.cli import main
from specgen.importers.keras.objects import CONSTRAINTS, INITIALIZERS, NAMES, REGULARIZERS

keras = pytest.importorskip("keras")


def serialized(cls: str, config: dict[str, Any], module: str = "keras.initializers") -> dict[str, Any]:
    return {"module": module, "class_name": cls, "config": config, "registered_name": None}


@pytest.mark.parametrize(("module", "table"), [("initializers", INITIALIZERS), ("regularizers", REGULARIZERS),
                                               ("constraints", CONSTRAINTS)])
def test_the_tables_list_what_keras_serializes(module: str, table: dict[str, Any]) -> None:
    """Every class Keras exports, with every argument its get_config() writes and only arguments its constructor
    takes (Keras 2's Identity also writes `gain`, Keras 3's does not); the names its get() takes."""
    import keras.src.constraints
    import keras.src.initializers
    import keras.src.regularizers

    space = getattr(keras, module)
    shipped = {name: getattr(space, name) for name in dir(space) if name[:1].isupper()
               and isinstance(getattr(space, name), type) and name not in ("Initializer", "Regularizer", "Constraint")}
    assert sorted(table) == sorted(shipped)
    for name, cls in shipped.items():
        written = (cls(0.0) if name == "Constant" else cls()).get_config()
        taken = set(inspect.signature(cls).parameters) - {"args", "kwargs"}
        assert set(written) <= set(table[name]) <= taken, name
    kind = module.removesuffix("s")
    names = getattr(keras.src, module).ALL_OBJECTS_DICT
    assert NAMES[kind] == {n for n in names if n.islower()} - {kind}


def model(init: Any = "glorot_uniform", **extra: Any) -> dict[str, Any]:
    return functional("m", [input_layer("x", [4]), layer("Dense", "fc", {
        "units": 2, "activation": "linear", "use_bias": True, "kernel_initializer": init, **extra}, "x")],
        ["x"], ["fc"])


def imported(tmp_path: Path, config: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    source = write_keras(tmp_path / "m.keras", config)
    code = main(["import", "keras", str(source), "-o", str(tmp_path / "m.yaml")])
    return code, capsys.readouterr().err


SCALING = {"seed": None, "scale": 2.0, "mode": "fan_in", "distribution": "truncated_normal"}
REFUSED = [
    ("kernel_initializer", serialized("VarianceScaling", {**SCALING, "scale": "x"}),
     "VarianceScaling with scale a number above 0"),
    ("kernel_initializer", serialized("VarianceScaling", {**SCALING, "scale": -1.0}),
     "VarianceScaling with scale a number above 0"),
    ("kernel_initializer", serialized("VarianceScaling", {**SCALING, "mode": "fan_middle"}),
     "VarianceScaling with mode 'fan_in' or 'fan_out' or 'fan_avg'"),
    ("kernel_initializer", serialized("RandomNormal", {"mean": 0.0, "stddev": math.inf}),
     "RandomNormal with stddev a number from 0"),
    ("kernel_initializer", serialized("GlorotUniform", {"seed": "7"}), "GlorotUniform with seed an integer or null"),
    ("kernel_initializer", serialized("GlorotUniform", {"sead": 7}),
     "only the arguments Keras' GlorotUniform takes (seed, input_axes, output_axes)"),
    ("kernel_initializer", serialized("Orthogonal", [1.0]), "a Keras initializer whose config is a mapping of its "
                                                             "arguments"),
    ("kernel_initializer", "glorot_uniformm", "the name of a Keras initializer (constant, glorot_normal, "
                                              "glorot_uniform, he_normal, he_uniform, identity, lecun_normal, "
                                              "lecun_uniform, normal, one, ones, orthogonal, random_normal, "
                                              "random_uniform, stft, truncated_normal, uniform, variance_scaling, "
                                              "zero, zeros)"),
    ("kernel_regularizer", serialized("L2", {"l2": "0.01"}, "keras.regularizers"), "L2 with l2 a number from 0"),
    ("kernel_regularizer", {"class_name": 5}, "a Keras regularizer: a name, or {class_name, config}"),
    ("kernel_constraint", serialized("MaxNorm", {"max_value": 2, "axis": "0"}, "keras.constraints"),
     "MaxNorm with axis an axis, a list of axes, or null"),
    ("bias_constraint", serialized("NonNeg", {"x": 1}, "keras.constraints"),
     "only the arguments Keras' NonNeg takes (none)"),
]


@pytest.mark.parametrize(("key", "value", "expected"), REFUSED)
def test_a_malformed_object_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: Any,
                                       expected: str) -> None:
    config = model(**{key: value}) if key != "kernel_initializer" else model(value)
    code, err = imported(tmp_path, config, capsys)
    assert (code, err.splitlines()[1:]) == (1, ["1 error found"])
    line = err.splitlines()[0]
    assert line.startswith(f"{tmp_path / 'm.keras'}: error: Keras layer 'fc' (Dense): argument {key}: received "), err
    assert line.endswith(f", expected {expected}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.keras"]


def test_well_formed_objects_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Keras' defaults fill what a config leaves out: VarianceScaling(scale=2.0) is he_normal; with input_axes it
    is none of specgen's kinds (a note); regularizers and constraints read, then dropped with a note; a custom
    class (never run) is dropped with a note saying its arguments were not read."""
    config = model(serialized("VarianceScaling", {"scale": 2.0}),
                   bias_initializer=serialized("VarianceScaling", {"input_axes": [0]}),
                   kernel_regularizer=serialized("L1L2", {"l1": 0.0, "l2": 1e-4}, "keras.regularizers"),
                   kernel_constraint={"module": None, "class_name": "Clip", "config": {"lo": "anything"},
                                      "registered_name": "mine>Clip"})
    code, err = imported(tmp_path, config, capsys)
    assert (code, err) == (0, "")
    text = (tmp_path / "m.yaml").read_text()
    dense = yaml.safe_load(text)["layers"][0]
    assert dense["kernel_init"] == "he_normal" and "bias_init" not in dense
    assert "#   Dense bias_initializer=VarianceScaling({'input_axes': [0]}) (not one of specgen's initializers" in text
    assert "#   Dense kernel_regularizer=L1L2({'l1': 0.0, 'l2': 0.0001}) (training only): fc\n" in text
    assert "#   Dense kernel_constraint=Clip({'lo': 'anything'}) (a constraint class Keras does not ship: specgen " \
           "never runs a model's own code, and its arguments were not read): fc\n" in text
