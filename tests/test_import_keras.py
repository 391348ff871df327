"""`specgen import keras`: Keras models -> specs whose generated model equals Keras' outputs.

Each case builds a Keras model here, saves it (.keras, or a legacy .h5 through tf_keras), imports
it with the CLI, validates and builds the spec, gives the generated TensorFlow model Keras'
weights through the spec's own restore map, and compares with `model.predict`. Refusals must
name the Keras layer, its class and the argument, and write nothing.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from keras_parity import generated_model

from specgen.cli import main

keras = pytest.importorskip("keras")
RTOL = 1e-5


def keras_weights(model: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """Keras' weights by the restore side's key: <layer>/<weight>, <nested model>/<layer>/<weight>."""
    out: dict[str, np.ndarray] = {}
    for layer in model.layers:
        if hasattr(layer, "layers"):
            out |= keras_weights(layer, f"{prefix}{layer.name}/")
            continue
        for weight in layer.weights:
            out[f"{prefix}{layer.name}/{weight.name.split('/')[-1].split(':')[0]}"] = np.asarray(weight.numpy())
    return out


def spec_model(spec_path: Path, tmp_path: Path, weights: dict[str, np.ndarray]) -> Any:
    """The generated model of an imported spec, its variables set through the spec's restore map."""
    text = spec_path.read_text()
    doc = yaml.safe_load(text)
    renames = {e["from"]: e["to"] for e in doc["checkpoint"]["restore"][0].get("map", [])}
    model = generated_model(text, tmp_path)
    by_path = {renames.get(key, key): value for key, value in weights.items()}
    ours = model.variables_by_path()
    for path, variable in ours.items():
        assert path in by_path, f"{path} has no Keras weight (keys: {sorted(by_path)[:8]}...)"
        variable.assign(by_path[path])
    return model


def run_import(*args: str) -> int:
    return main(["import", "keras", *map(str, args)])


def compare(spec_path: Path, tmp_path: Path, keras_model: Any, feeds: dict[str, np.ndarray],
            weights: dict[str, np.ndarray] | None = None) -> float:
    """Max relative difference over every output, after checking output names."""
    model = spec_model(spec_path, tmp_path, weights or keras_weights(keras_model))
    ours = model(feeds, training=False)
    theirs = keras_model.predict(feeds if len(feeds) > 1 else next(iter(feeds.values())), verbose=0)
    if not isinstance(theirs, dict):
        theirs = dict(zip(keras_model.output_names, theirs if isinstance(theirs, list) else [theirs], strict=True))
    assert sorted(ours) == sorted(theirs)
    worst = 0.0
    for name, value in theirs.items():
        diff = np.abs(np.asarray(ours[name]) - value).max() / max(np.abs(value).max(), 1e-6)
        worst = max(worst, float(diff))
        print(f"{name}: max rel diff {diff:.3g}, Keras output std {value.std():.3g}")  # figures for -s runs
    return worst


def randomize(model: Any, seed: int = 1, scale: float = 0.5) -> None:
    """Non-trivial weights and statistics (positive variances), so BN and Normalization count."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        path = getattr(weight, "path", weight.name)  # tf_keras variables have no .path
        value = rng.standard_normal(tuple(weight.shape)).astype(np.float32) * scale
        if "variance" in path:
            value = np.abs(value) + 0.5
        if "count" not in path:
            weight.assign(value)


def functional_model(tmp_path: Path) -> tuple[Any, dict[str, np.ndarray]]:
    """Two inputs, dict outputs, a nested Sequential, BN, an adapted Normalization, a bad name; saved as m.keras."""
    layers = keras.layers
    image, vec = keras.Input((9, 9, 3), name="image"), keras.Input((6,), name="vec")
    norm = layers.Normalization(name="norm")
    norm.adapt(np.random.default_rng(0).standard_normal((32, 9, 9, 3)).astype(np.float32) * 3 + 1)
    x = norm(image)
    x = layers.Conv2D(8, 3, strides=2, padding="same", activation="relu", name="conv__1")(x)
    x = layers.BatchNormalization(synchronized=True, name="bn")(x)  # imported as `sync: true`
    x = layers.ZeroPadding2D(((1, 0), (0, 1)), name="pad")(x)
    x = layers.DepthwiseConv2D(3, name="dw")(x)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    inner = keras.Sequential([layers.Dense(5, activation="swish", name="d1"), layers.Dense(4, name="d2")],
                             name="inner")
    v = inner(vec)
    joined = layers.Concatenate(name="cat")([x, v])
    seq = layers.Reshape((3, 4), name="rs")(joined)
    seq = layers.Dense(2, name="per_step")(seq)  # Dense on a rank-3 input
    head = layers.Dense(3, activation="softmax", name="probs")(joined)
    model = keras.Model([image, vec], {"probabilities": head, "steps": seq}, name="two_in")
    randomize(model)
    norm.finalize_state()  # Normalization caches its statistics at adapt time; take the new ones
    model.save(tmp_path / "m.keras")
    rng = np.random.default_rng(2)
    feeds = {"image": rng.standard_normal((4, 9, 9, 3)).astype(np.float32) * 3 + 1,
             "vec": rng.standard_normal((4, 6)).astype(np.float32)}
    return model, feeds


def test_functional_nested_bn_normalization(tmp_path: Path) -> None:
    model, feeds = functional_model(tmp_path)

    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    assert list(doc["inputs"]) == ["vec", "image"] or set(doc["inputs"]) == {"image", "vec"}
    assert set(doc["outputs"]) == {"probabilities", "steps"}
    names = [layer["name"] for layer in doc["layers"]]
    assert "conv_1" in names and "inner/d1" in names and "norm" in names
    assert next(layer for layer in doc["layers"] if layer["name"] == "bn")["sync"] is True
    restore = doc["checkpoint"]["restore"][0]
    assert restore["from"] == "m.keras"
    assert {"from": "conv__1/kernel", "to": "conv_1/kernel"} in restore["map"]
    assert restore["map"] == [{"from": "conv__1/kernel", "to": "conv_1/kernel"},
                              {"from": "conv__1/bias", "to": "conv_1/bias"}]  # Keras 3 names match roles
    assert "'conv__1' -> 'conv_1'" in spec.read_text()
    assert main(["validate", str(spec)]) == 0
    assert main(["build", str(spec), "--out", str(tmp_path / "gen")]) == 0
    assert compare(spec, tmp_path, model, feeds) < RTOL


HAS_KERAS_RESTORE = importlib.util.find_spec("specgen.runtime.keras_weights") is not None


@pytest.mark.skipif(not HAS_KERAS_RESTORE, reason="restoring from Keras weight files has not landed")
def test_export_without_checkpoint_equals_predict(tmp_path: Path) -> None:
    """`specgen export SPEC` (no --checkpoint) restores from the .keras file: ONNX == model.predict."""
    import onnxruntime as ort

    model, feeds = functional_model(tmp_path)
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    assert main(["export", str(spec), "-o", str(tmp_path / "out")]) == 0
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert sorted(i.name for i in session.get_inputs()) == ["image", "vec"]  # Keras' names
    names = [o.name for o in session.get_outputs()]
    assert sorted(names) == ["probabilities", "steps"]
    theirs = model.predict(feeds, verbose=0)
    for name, ours in zip(names, session.run(names, feeds), strict=True):
        diff = float(np.abs(ours - theirs[name]).max() / np.abs(theirs[name]).max())
        print(f"onnxruntime {name}: max rel diff {diff:.3g}")
        assert diff < RTOL


def test_mobilenet_v3_small_constructor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """keras.applications by name: hard-swish, squeeze-excite (keras.ops x + 3, x * 1/6), pads."""
    spec = tmp_path / "mnv3.yaml"
    assert run_import("MobileNetV3Small", "--input-shape", "32,32,3", "--classes", "7", "-o", spec,
                      "--collections", "stages") == 0
    assert "wrote" in capsys.readouterr().out
    weights = tmp_path / "mnv3.keras"
    doc = yaml.safe_load(spec.read_text())
    assert doc["checkpoint"]["restore"][0]["from"] == "mnv3.keras" and weights.is_file()
    assert doc["collections"]["expanded_conv_3"] == ["expanded_conv_3_*"]
    assert main(["validate", str(spec)]) == 0
    model = keras.applications.MobileNetV3Small(weights=None, input_shape=(32, 32, 3), classes=7)
    model.load_weights(weights)  # the file the spec restores from
    # Fresh MobileNetV3 weights give uniform softmax outputs (nothing to compare): use random ones
    randomize(model, scale=0.2)
    x = np.random.default_rng(3).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    assert list(doc["inputs"]) == ["input_layer"]  # Keras' own name, whatever this process built before
    assert compare(spec, tmp_path, model, {"input_layer": x}) < RTOL


def refusal(tmp_path: Path, model: Any, capsys: pytest.CaptureFixture[str]) -> str:
    model.save(tmp_path / "bad.keras")
    assert run_import(tmp_path / "bad.keras", "-o", tmp_path / "bad.yaml") == 1
    assert not (tmp_path / "bad.yaml").exists()
    return capsys.readouterr().err


def test_lambda_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = keras.Input((4,), name="a")
    model = keras.Model(a, keras.layers.Lambda(lambda t: t * 2, name="double")(a))
    err = refusal(tmp_path, model, capsys)
    assert "Keras layer 'double' (Lambda): refused" in err


@pytest.mark.parametrize(("layer", "argument"), [
    (lambda: keras.layers.ReLU(threshold=0.5, name="odd"), "threshold=0.5"),
    (lambda: keras.layers.LayerNormalization(rms_scaling=True, name="odd"), "rms_scaling=True"),
    (lambda: keras.layers.Activation("mish", name="odd"), "activation=mish"),
])
def test_unsupported_argument_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], layer: Any,
                                      argument: str) -> None:
    a = keras.Input((4,), name="a")
    err = refusal(tmp_path, keras.Model(a, layer()(a)), capsys)
    assert re.search(rf"Keras layer 'odd' \(\w+\): argument {re.escape(argument)} cannot be expressed", err), err


def test_legacy_h5(tmp_path: Path) -> None:
    """A Keras 2 (tf_keras) .h5 model file: read from model_config, weights keyed by layer names."""
    tf_keras = pytest.importorskip("tf_keras")
    layers = tf_keras.layers
    x_in = tf_keras.Input((8, 8, 2), name="pixels")
    x = layers.Conv2D(4, 3, padding="same", name="c1")(x_in)
    x = layers.BatchNormalization(name="b1")(x)
    x = layers.ReLU(6.0, name="r1")(x)
    x = layers.MaxPooling2D(2, name="p1")(x)
    x = layers.DepthwiseConv2D(3, padding="same", name="dw")(x)  # Keras 2 calls its kernel depthwise_kernel
    x = layers.Flatten(name="f")(x)
    out = layers.Dense(3, name="logits")(x)
    model = tf_keras.Model(x_in, out, name="legacy")
    randomize(model)
    model.save(tmp_path / "legacy.h5")
    spec = tmp_path / "legacy.yaml"
    assert run_import(tmp_path / "legacy.h5", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    assert doc["outputs"] == {"logits": "logits"} and list(doc["inputs"]) == ["pixels"]
    assert doc["checkpoint"]["restore"][0] == {"from": "legacy.h5", "strict": True,
                                               "map": [{"from": "dw/depthwise_kernel", "to": "dw/kernel"}]}
    feeds = {"pixels": np.random.default_rng(5).standard_normal((3, 8, 8, 2)).astype(np.float32)}
    assert compare(spec, tmp_path, model, feeds) < RTOL


def test_custom_class_refused_without_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A config naming a user's module is refused by name; the module is never imported."""
    import json
    import sys
    import zipfile

    layer = {"module": "mypkg_never_imported.layers", "class_name": "Fancy", "registered_name": "mypkg>Fancy",
             "name": "fancy", "config": {"name": "fancy"},
             "inbound_nodes": [{"args": [{"class_name": "__keras_tensor__",
                                          "config": {"shape": [None, 4], "dtype": "float32", "keras_history": ["a", 0, 0]}}],
                                "kwargs": {}}]}
    inputs = {"module": "keras.layers", "class_name": "InputLayer", "name": "a", "inbound_nodes": [],
              "config": {"batch_shape": [None, 4], "dtype": "float32", "name": "a"}}
    config = {"class_name": "Functional", "config": {"name": "m", "layers": [inputs, layer],
                                                     "input_layers": [["a", 0, 0]], "output_layers": [["fancy", 0, 0]]}}
    with zipfile.ZipFile(tmp_path / "c.keras", "w") as archive:
        archive.writestr("config.json", json.dumps(config))
    assert run_import(tmp_path / "c.keras", "-o", tmp_path / "c.yaml") == 1
    assert not (tmp_path / "c.yaml").exists() and "mypkg_never_imported" not in sys.modules
    assert "Keras layer 'fancy' (Fancy): a custom class from module 'mypkg_never_imported.layers'" in \
        capsys.readouterr().err


def test_weights_option_wins(tmp_path: Path) -> None:
    """--weights replaces the model file's own weights in checkpoint.restore (path relative to the spec)."""
    a = keras.Input((4,), name="a")
    model = keras.Model(a, keras.layers.Dense(2, name="fc")(a))
    model.save(tmp_path / "m.keras")
    (tmp_path / "w").mkdir()
    model.save_weights(tmp_path / "w" / "tuned.weights.h5")  # read by the import (bare_weights.py): a real one
    (tmp_path / "specs").mkdir()
    assert run_import(tmp_path / "m.keras", "-o", tmp_path / "specs" / "m.yaml",
                      "--weights", tmp_path / "w" / "tuned.weights.h5") == 0
    doc = yaml.safe_load((tmp_path / "specs" / "m.yaml").read_text())
    assert doc["checkpoint"]["restore"] == [{"from": "../w/tuned.weights.h5", "strict": True}]
    assert not list((tmp_path / "specs").glob("*.h5"))


def test_legacy_h5_separable_conv_and_nested_model(tmp_path: Path) -> None:
    """tf_keras writes Conv's unused kernel_initializer for SeparableConv2D (every Keras 2 Xception was refused)
    and counts a nested model's nodes from 1; both import, and `specgen export` equals model.predict."""
    import onnxruntime as ort

    tf_keras = pytest.importorskip("tf_keras")
    layers = tf_keras.layers
    x_in = tf_keras.Input((8, 8, 3), name="pixels")
    x = layers.SeparableConv2D(6, 3, padding="same", depth_multiplier=2, name="sep")(x_in)
    x = layers.BatchNormalization(name="bn")(x)
    head = tf_keras.Sequential([layers.GlobalAveragePooling2D(name="gap"), layers.Dense(4, name="fc")], name="head")
    model = tf_keras.Model(x_in, head(x), name="legacy_sep")
    randomize(model)
    model.save(tmp_path / "sep.h5")
    spec = tmp_path / "sep.yaml"
    assert run_import(tmp_path / "sep.h5", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    assert doc["layers"][0] == {"name": "sep", "op": "separable_conv2d", "filters": 6, "kernel": 3, "padding": "same",
                                "depth_multiplier": 2}
    assert [layer["name"] for layer in doc["layers"]] == ["sep", "bn", "head/gap", "head/fc"]
    assert main(["export", str(spec), "-o", str(tmp_path / "out")]) == 0
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"pixels": np.random.default_rng(6).standard_normal((3, 8, 8, 3)).astype(np.float32)}
    ours = session.run(None, feeds)[0]
    theirs = model.predict(feeds["pixels"], verbose=0)
    diff = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    print(f"onnxruntime: max rel diff {diff:.3g}")
    assert diff < RTOL


def lacking(source: Path, target: Path, dataset: str) -> Path:
    """`source` (a .keras) with one dataset of its model.weights.h5 deleted: written at test time."""
    import zipfile

    import h5py

    with zipfile.ZipFile(source) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    weights = target.with_suffix(".h5")
    weights.write_bytes(members["model.weights.h5"])
    with h5py.File(weights, "r+") as f:
        del f[dataset]
    members["model.weights.h5"] = weights.read_bytes()
    weights.unlink()
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return target


def test_weights_the_file_lacks_are_refused_and_the_restore_is_strict(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28: a .keras whose weights lack the embedding's table imported with exit 0 and exported a random one
    ("initialized: emb/embeddings"). The import checks every variable against the file's keys; the spec it writes
    for a complete file is `strict: true`, so a file that later lacks a weight stops the export too."""
    layers = keras.layers
    ids = keras.Input((None,), dtype="int32", name="ids")
    out = layers.Dense(3, name="head")(layers.GlobalAveragePooling1D(name="pool")(layers.Embedding(20, 8, name="emb")(ids)))
    keras.Model(ids, out).save(tmp_path / "m.keras")
    bad = lacking(tmp_path / "m.keras", tmp_path / "lacking.keras", "layers/embedding/vars/0")
    assert run_import(bad, "-o", tmp_path / "lacking.yaml") == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{bad}: error: {bad} holds no value for 1 ('emb/embeddings') of the model's 3 variables (looked for by the "
        "Keras layer and weight name): a restore would leave them at random initial values; import a file saved "
        "with every weight of this model", "1 error found"]
    assert not (tmp_path / "lacking.yaml").exists()

    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    assert yaml.safe_load(spec.read_text())["checkpoint"]["restore"] == [{"from": "m.keras", "strict": True}]
    spec.write_text(spec.read_text().replace("from: m.keras", "from: lacking.keras"))
    capsys.readouterr()
    assert main(["export", str(spec), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "lacking.keras (strict): no key for 1 of the model's variables ('emb/embeddings'); restore them from it, " \
           "or name them in this entry's exclude to keep their initializers" in err
    assert not (tmp_path / "out").exists()


def test_normalization_over_no_axis_imports_its_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Normalization(axis=None, mean=, variance=): one mean and one variance for every element, the spec's scalar
    normalize (the import said "argument axis: received []"); the export equals model.predict. An adapted one keeps
    them as weights of shape (), which per-channel variables cannot restore: refused, saying so."""
    import onnxruntime as ort

    layers = keras.layers
    x = keras.Input((4, 3), name="x")
    model = keras.Model(x, layers.Normalization(axis=None, mean=0.3, variance=2.0, name="norm")(x))
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    assert yaml.safe_load(spec.read_text())["layers"] == [{"name": "norm", "op": "normalize", "mean": 0.3,
                                                           "variance": 2.0}]
    assert main(["export", str(spec), "-o", str(tmp_path / "out")]) == 0
    feeds = {"x": np.random.default_rng(0).standard_normal((5, 4, 3)).astype(np.float32) * 3}
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    ours, theirs = session.run(None, feeds)[0], model.predict(feeds["x"], verbose=0)
    assert float(np.abs(ours - theirs).max() / np.abs(theirs).max()) < RTOL

    adapted = layers.Normalization(axis=None, name="norm")
    adapted.adapt(feeds["x"])
    err = refusal(tmp_path, keras.Model(x, adapted(x)), capsys)
    assert err.splitlines() == [
        f"{tmp_path / 'bad.keras'}: error: Keras layer 'norm' (Normalization): argument axis=[] cannot be expressed in "
        "a spec (axis=None (one mean and variance for every element) imports only with fixed mean= and variance= "
        "numbers; an adapted layer keeps them as scalar weights, which the spec's per-channel variables cannot "
        "restore: adapt it with axis=-1, or pass the adapted values as mean= and variance=)", "1 error found"]


def test_batch_norm_momentum_zero_imports(tmp_path: Path) -> None:
    """Keras takes BatchNormalization(momentum=0) (the moving statistics become the last batch's); the spec's
    batch_norm refused it ("expected a value > 0.0"). tests/test_norms_ops.py checks a training step."""
    layers = keras.layers
    x = keras.Input((5,), name="x")
    model = keras.Model(x, layers.BatchNormalization(momentum=0.0, name="bn")(layers.Dense(4, name="fc")(x)))
    randomize(model)
    model.save(tmp_path / "m.keras")
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    assert yaml.safe_load(spec.read_text())["layers"][1]["momentum"] == 0.0
    feeds = {"x": np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)}
    assert compare(spec, tmp_path, model, feeds) < RTOL


def test_tensor_call_arguments_are_named_by_their_layers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A refused call argument that holds tensors names the layers that make them, not a truncated dict of Keras'
    tensor reference ("call argument 'initial_state' ([{'class_name': '__keras_tensor__', 'config': {'shape': ...")."""
    layers = keras.layers
    ids, context = keras.Input((None,), dtype="int32", name="ids"), keras.Input((3,), name="context")
    seq, start = layers.Embedding(9, 4, name="emb")(ids), layers.Dense(3, name="start")(context)
    bad = tmp_path / "bad.keras"
    err = refusal(tmp_path, keras.Model({"ids": ids, "context": context},
                                        layers.Bidirectional(layers.GRU(3), name="bi")(seq, initial_state=[start, start])),
                  capsys)
    assert err.splitlines() == [
        f"{bad}: error: Keras layer 'bi' (Bidirectional): call argument 'initial_state' ([the output of 'start' "
        "(Dense), the output of 'start' (Dense)]) cannot be expressed", "1 error found"]
    err = refusal(tmp_path, keras.Model({"ids": ids, "context": context},
                                        layers.GRU(3, name="gru")(seq, initial_state=[start, start, start])), capsys)
    assert err.splitlines() == [
        f"{bad}: error: Keras layer 'gru' (GRU): call argument 'initial_state' is [the output of 'start' (Dense), the "
        "output of 'start' (Dense), the output of 'start' (Dense)]: a recurrent layer starts from one or two states "
        "(LSTM's state_h and state_c)", "1 error found"]
