"""`specgen import keras`, checker round 7: automatic names are no stage, Keras-3-written legacy `.h5` files
(recurrent and Bidirectional weights in the legacy layout, `x[:, -1, :]`), custom objects named by `registered_name`
or a module outside Keras refused, names equal to the model's kept, and the messages for a missing class, a
wrong `--input-shape` and float ids before an Embedding."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

keras = pytest.importorskip("keras")
pytest.importorskip("h5py")

from test_import_keras import compare, randomize, run_import  # noqa: E402

from specgen.importers.keras.layers import CONVERTERS  # noqa: E402
from specgen.importers.keras.stages import stage_of  # noqa: E402
from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.runtime.commands.restore import plan_restore  # noqa: E402
from specgen.runtime.keras_weights import Reader, read_weights, snake  # noqa: E402
from specgen.spec.load import load_spec, load_spec_text  # noqa: E402

layers = keras.layers
WHAT_TO_DO = ("write the layer as spec ops in the imported spec by hand (docs/extending.md adds an op), or save the "
              "model without it")


def errors(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line != "1 error found"]


# --- 1. --collections stages ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["conv2d_3", "conv1d_1", "depthwise_conv2d_1", "separable_conv2d_2", "max_pooling2d_1",
                                  "conv2d_transpose_1", "up_sampling2d_4", "zero_padding2d_1", "re_lu_1", "conv2d"])
def test_automatic_names_are_no_stage(name: str) -> None:
    assert stage_of(name) is None


def test_every_known_class_automatic_name_is_no_stage() -> None:
    for cls in CONVERTERS:
        assert stage_of(f"{snake(cls)}_3") is None, cls


@pytest.mark.parametrize(("name", "stage"), [("conv2_block1_1_conv", "conv2"), ("block1a_dwconv", "block1"),
                                             ("expanded_conv_3_expand", "expanded_conv_3"), ("head/fc", "head")])
def test_application_names_are_stages(name: str, stage: str) -> None:
    assert stage_of(name) == stage


def test_freezing_a_stage_freezes_only_its_layers(tmp_path: Path) -> None:
    i = keras.Input((8, 8, 3), name="image")
    x = i
    for st in (2, 3):
        for blk in (1, 2):
            x = layers.Conv2D(4, 3, padding="same", name=f"conv{st}_block{blk}_1_conv")(x)
            x = layers.BatchNormalization(name=f"conv{st}_block{blk}_1_bn")(x)
    x = layers.Conv2D(4, 1, name="conv2d_3")(x)
    x = layers.Conv2D(4, 1, name="conv2d_4")(x)
    head = keras.Sequential([layers.GlobalAveragePooling2D(name="gap"), layers.Dense(8, name="fc1"),
                             layers.Dense(3, name="fc")], name="head")
    keras.Model(i, head(x), name="staged").save(tmp_path / "staged.keras")
    spec = tmp_path / "staged.yaml"
    assert run_import(tmp_path / "staged.keras", "--collections", "stages", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    assert doc["collections"] == {"conv2": ["conv2_*"], "conv3": ["conv3_*"], "head": ["head/*"]}
    doc["frozen"] = ["conv2"]
    doc["optimizers"] = {"rest": {"kind": "sgd", "learning_rate": 0.1}}  # the one optimizer takes what is not frozen
    doc["loss"] = {"kind": "sparse_softmax_cross_entropy", "logits": next(iter(doc["outputs"])), "labels": "label"}
    ir = build_ir(load_spec_text(yaml.safe_dump(doc, sort_keys=False), str(spec), path=spec))
    assert ir.collections["frozen"] == tuple(f"conv2_block{b}_1_{part}/{role}" for b in (1, 2)
                                             for part, roles in (("conv", ("kernel", "bias")), ("bn", ("gamma", "beta")))
                                             for role in roles)


# --- 2. legacy .h5 written by Keras 3 -----------------------------------------------------------


def _file_weights(path: Path) -> dict[str, np.ndarray]:
    """The file's weights as the restore reads them (runtime/keras_weights.py)."""
    stored = read_weights(path)
    with Reader(path) as reader:
        return {key: np.asarray(reader.get_tensor(w.dataset)) for key, w in stored.items()}


def _h5_parity(model: Any, tmp_path: Path, feeds: dict[str, np.ndarray], variables: int) -> dict[str, Any]:
    randomize(model)
    model.save(tmp_path / "m.h5")  # Keras 3's legacy writer
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.h5", "-o", spec) == 0
    loaded = load_spec(spec)
    plan = plan_restore(loaded, {v.path: (v.shape, v.dtype) for v in build_ir(loaded).model_variables})
    assert plan.ok and plan.count("restored") == variables and not plan.unused
    assert compare(spec, tmp_path, model, feeds, _file_weights(tmp_path / "m.h5")) < 1e-5
    return yaml.safe_load(spec.read_text())  # type: ignore[no-any-return]


def test_keras3_h5_recurrent_weights(tmp_path: Path) -> None:
    i = keras.Input((7,), dtype="int32", name="ids")
    h = layers.Embedding(20, 6, name="emb")(i)
    h = layers.LSTM(5, return_sequences=True, name="lstm")(h)
    h = layers.GRU(4, name="gru")(h)
    model = keras.Model(i, layers.Dense(2, name="out")(h), name="text")
    ids = np.random.default_rng(3).integers(0, 20, (3, 7)).astype(np.int32)
    doc = _h5_parity(model, tmp_path, {"ids": ids}, 9)
    assert {"from": "lstm/lstm_cell/kernel", "to": "lstm/kernel"} in doc["checkpoint"]["restore"][0]["map"]


def test_keras3_h5_bidirectional_and_get_item(tmp_path: Path) -> None:
    i = keras.Input((6, 3), name="seq")
    x = layers.Bidirectional(layers.LSTM(3, return_sequences=True), name="bi")(i)
    x = layers.SimpleRNN(4, return_sequences=True, name="srnn")(x)
    model = keras.Model(i, layers.Dense(2, name="out")(x[:, -1, :]), name="bm")
    feeds = {"seq": np.random.default_rng(4).standard_normal((3, 6, 3)).astype(np.float32)}
    doc = _h5_parity(model, tmp_path, feeds, 11)
    # Keras numbers the wrapped layer's name once other LSTMs exist in the process (`backward_lstm_9`): any suffix
    bias = [m for m in doc["checkpoint"]["restore"][0]["map"] if m["to"] == "bi/backward/bias"]
    assert len(bias) == 1 and re.fullmatch(r"bi/backward_lstm(_[0-9]+)?/lstm_cell/bias", bias[0]["from"]), bias
    assert [layer["op"] for layer in doc["layers"]] == ["bidirectional", "simple_rnn", "take", "dense"]


# --- 3. custom objects -------------------------------------------------------------------------


def _edited(tmp_path: Path, edit: Any) -> Path:
    """A saved tiny model whose config.json `edit` changed."""
    i = keras.Input((4,), name="x")
    keras.Model(i, layers.Dense(3, name="fc")(layers.Dense(5, name="hidden")(i)), name="net").save(tmp_path / "a.keras")
    with zipfile.ZipFile(tmp_path / "a.keras") as source:
        config = json.loads(source.read("config.json"))
        edit(config)
        with zipfile.ZipFile(tmp_path / "b.keras", "w") as out:
            for member in source.namelist():
                out.writestr(member, json.dumps(config) if member == "config.json" else source.read(member))
    return tmp_path / "b.keras"


def _layer(config: dict[str, Any], name: str) -> dict[str, Any]:
    return next(entry for entry in config["config"]["layers"] if entry["name"] == name)


@pytest.mark.parametrize(("edit", "line"), [
    (lambda c: _layer(c, "fc").update(registered_name="my>Dense"),
     f"Keras layer 'fc' (Dense): a custom object registered as 'my>Dense': specgen never imports a model's own code; "
     f"{WHAT_TO_DO}"),
    (lambda c: _layer(c, "hidden").update(module="mypkg.layers"),
     f"Keras layer 'hidden' (Dense): a custom class from module 'mypkg.layers': specgen never imports a model's own "
     f"code; {WHAT_TO_DO}"),
    (lambda c: c.update(module="evil"),
     "Keras model 'net' (Functional): a custom class from module 'evil': specgen never imports a model's own code; "
     "save the model as a Keras Functional or Sequential model"),
    (lambda c: c.update(registered_name="my>Net"),
     "Keras model 'net' (Functional): a custom object registered as 'my>Net': specgen never imports a model's own "
     "code; save the model as a Keras Functional or Sequential model"),
])
def test_custom_objects_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any, line: str) -> None:
    source = _edited(tmp_path, edit)
    assert run_import(source, "-o", tmp_path / "b.yaml") == 1
    assert errors(capsys) == [f"{source}: error: {line}"]
    assert not (tmp_path / "b.yaml").exists()


def test_registered_custom_layer_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    @keras.saving.register_keras_serializable(package="r7test")
    class Twice(layers.Layer):  # type: ignore[misc]
        def call(self, x: Any) -> Any:
            return x * 2

    i = keras.Input((4,), name="x")
    keras.Model(i, layers.Dense(2, name="fc")(Twice(name="tw")(i))).save(tmp_path / "c.keras")
    assert run_import(tmp_path / "c.keras", "-o", tmp_path / "c.yaml") == 1
    config = json.loads(zipfile.ZipFile(tmp_path / "c.keras").read("config.json"))
    why = (f"a custom class from module '{Twice.__module__}'" if _layer(config, "tw").get("module") else
           "a custom object registered as 'r7test>Twice'")  # Keras writes no module for a class of __main__
    assert errors(capsys) == [f"{tmp_path / 'c.keras'}: error: Keras layer 'tw' (Twice): {why}: specgen never imports "
                              f"a model's own code; {WHAT_TO_DO}"]


def test_keras_classes_without_spec_op_say_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    i = keras.Input((4, 3), name="x")
    keras.Model(i, layers.Permute((2, 1), name="perm")(i)).save(tmp_path / "p.keras")
    assert run_import(tmp_path / "p.keras", "-o", tmp_path / "p.yaml") == 1
    assert errors(capsys) == [f"{tmp_path / 'p.keras'}: error: Keras layer 'perm' (Permute): no spec op for this Keras "
                              f"class (docs/import.md, What maps to what, lists those that import); {WHAT_TO_DO}"]


# --- 4. names equal to the model's ---------------------------------------------------------------


@pytest.mark.parametrize(("input_name", "layer_names"), [("tiny", ["hidden", "fc"]), ("x", ["tiny", "fc"])])
def test_names_equal_to_the_model_name_are_kept(tmp_path: Path, input_name: str, layer_names: list[str]) -> None:
    import onnx

    from specgen.cli import main

    i = keras.Input((4,), name=input_name)
    out = layers.Dense(3, name=layer_names[1])(layers.Dense(5, name=layer_names[0])(i))
    keras.Model(i, out, name="tiny").save(tmp_path / "tiny.keras")
    spec = tmp_path / "tiny.yaml"
    assert run_import(tmp_path / "tiny.keras", "-o", spec) == 0
    text = spec.read_text()
    assert "Renamed" not in text
    doc = yaml.safe_load(text)
    assert doc["name"] == "tiny" and list(doc["inputs"]) == [input_name]
    assert [layer["name"] for layer in doc["layers"]] == layer_names
    assert not doc["checkpoint"]["restore"][0].get("map")
    assert main(["export", str(spec), "-o", str(tmp_path / "out")]) == 0
    assert [v.name for v in onnx.load(str(tmp_path / "out" / "model.onnx")).graph.input] == [input_name]


def test_renamed_header_reason(tmp_path: Path) -> None:
    i = keras.Input((4,), name="x")
    keras.Model(i, layers.Dense(3, name="conv-1")(i), name="net").save(tmp_path / "r.keras")
    assert run_import(tmp_path / "r.keras", "-o", tmp_path / "r.yaml") == 0
    header = [line for line in (tmp_path / "r.yaml").read_text().splitlines() if line.startswith("#")]
    assert header[2:4] == ["# Renamed (not valid, reserved or already taken as spec names; the restore map carries "
                           "layer renames):", "#   layer 'conv-1' -> 'conv_1'"]


# --- minor: --input-shape, float ids ------------------------------------------------------------


@pytest.mark.parametrize("given", ["32,32", "32,32,3,1"])
def test_input_shape_needs_three_numbers(given: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_import("MobileNetV3Small", "--input-shape", given, "-o", tmp_path / "m.yaml")
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("specgen import keras: error: argument --input-shape: "
                                                        f"expected 3 positive integers H,W,C (96,96,3); received "
                                                        f"'{given}'")


def test_float_ids_before_embedding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    i = keras.Input((6,), name="ids")  # float32: Keras' Embedding casts the ids itself
    h = layers.Embedding(15, 4, name="emb")(i)
    keras.Model(i, layers.Dense(2, name="out")(layers.GlobalAveragePooling1D(name="gap")(h))).save(tmp_path / "f.keras")
    assert run_import(tmp_path / "f.keras", "-o", tmp_path / "f.yaml") == 1
    assert errors(capsys) == [f"{tmp_path / 'f.keras'}: error: Keras layer 'emb' (Embedding): reads input 'ids', which "
                              "is float32 in the Keras model (Keras casts the ids to int32 in this layer; specgen's "
                              "embedding takes integer ids): save the model with keras.Input(..., dtype=\"int32\") for "
                              "'ids'"]
