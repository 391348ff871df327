"""Shared layers (`share: <owner>`): checks, one set of variables, TF/ONNX/Keras numbers, export, training.

The reference for numbers is Keras: a functional model that calls one Conv2D, one BatchNormalization
and one Dense twice each. Its gradients sum both calls' contributions and its batch norm updates the
moving statistics on each call; the generated model must do the same (to 1e-5).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from test_op_parity import check_parity

from specgen.diagnostics import SpecError
from specgen.ir.resolve import build_ir
from specgen.report import report
from specgen.spec.load import load_spec_text

TOLERANCE = 1e-5  # max |ORT - TF|: two float32 evaluations of one graph, different summation orders
RELATIVE = 1e-5  # imported models: of the output's largest magnitude, as tests/test_import_keras.py

# enc and bn are each called on both images; fc on its own output. One layer a line (positions below).
SPEC = """\
specgen: 1
name: shared
inputs:
  a: {shape: [6, 6, 3]}
  b: {shape: [6, 6, 3]}
outputs:
  y: out
layers:
  - {name: enc, op: conv2d, input: a, filters: 4, kernel: 3, padding: same, activation: relu}
  - {name: bn, op: batch_norm}
  - {name: enc2, op: conv2d, input: b, filters: 4, kernel: [3, 3], share: enc}
  - {name: bn2, op: batch_norm, share: bn}
  - {name: sum, op: add, inputs: [bn, bn2]}
  - {name: gap, op: global_avg_pool}
  - {name: pre, op: dense, units: 6}
  - {name: fc, op: dense, units: 6, activation: tanh}
  - {name: fc2, op: dense, units: 6, input: fc, share: fc}
  - {name: out, op: add, inputs: [fc, fc2]}
"""
LINE = {"enc2": 11, "bn2": 12, "fc2": 17}  # 1-based lines of SPEC


def replaced(old: str, new: str, text: str = SPEC) -> str:
    assert old in text
    return text.replace(old, new)


def errors(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        build_ir(load_spec_text(text, "s.yaml"))
    return [str(d) for d in caught.value.diagnostics]


# --- checks --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new", "where", "words"), [
    ("share: fc}", "share: fcc}", ("fc2", "share"), "layer 'fc2' shares 'fcc', which is not a layer; did you mean 'fc'?"),
    ("{name: bn2, op: batch_norm,", "{name: bn2, op: layer_norm,", ("bn2", "op"),
     "layer 'bn2' shares 'bn' (op batch_norm) but is op layer_norm"),
    ("units: 6, input: fc", "units: 7, input: fc", ("fc2", "units"), "layer 'fc2' shares 'fc' but sets units 7, where "
     "'fc' has 6: a shared layer runs with its owner's configuration; write the owner's value"),
    ("share: bn}", "momentum: 0.9, share: bn}", ("bn2", "momentum"), "layer 'bn2' shares 'bn' but sets momentum 0.9, "
     "where 'bn' has 0.99: a shared layer runs with its owner's configuration; leave 'momentum' out (it takes the "
     "owner's value) or make it equal"),
    ("kernel: [3, 3], share", "kernel: [3, 3], activation: linear, share", ("enc2", "activation"),
     "sets activation 'linear', where 'enc' has 'relu'"),
    ("input: fc, share: fc}", "input: pre, share: fc}", None, None),  # [6] -> [6]: fits
    ("input: b, filters", "input: a, filters", None, None),  # the same input twice: fine
    ("input: fc, share: fc}", "input: gap, share: fc}", ("fc2", "input"),
     "layer 'fc2' shares the variables of 'fc', but its input [batch, 4] would need kernel [4, 6], and "
     "'fc/kernel' is [6, 6] (for the input [batch, 6] of 'fc')"),
])
def test_share_checks_name_the_key(old: str, new: str, where: tuple[str, str] | None, words: str | None) -> None:
    text = replaced(old, new)
    if where is None:
        build_ir(load_spec_text(text, "s.yaml"))
        return
    (message,) = errors(text)
    layer, key = where
    column = text.splitlines()[LINE[layer] - 1].index(f"{key}: ") + len(key) + 3  # the value's column
    assert message.startswith(f"s.yaml:{LINE[layer]}:{column}: error: ")
    assert words in message


def test_share_of_a_share_resolves_to_the_owner_and_a_loop_is_an_error() -> None:
    text = SPEC + "  - {name: fc3, op: dense, units: 6, input: fc2, share: fc2}\n"
    ir = build_ir(load_spec_text(replaced("y: out", "y: out\n  z: fc3", text), "s.yaml"))
    assert ir.node("fc3").shares == "fc"
    assert ir.node("fc3").variables["kernel"] is ir.node("fc").variables["kernel"]
    looped = replaced("{name: fc, op: dense, units: 6,", "{name: fc, op: dense, units: 6, share: fc2,")
    assert [m.split(": error: ")[1] for m in errors(looped)] == [
        f"the shares form a loop ({loop}): one layer of a shared group must own the variables"
        for loop in ("fc -> fc2 -> fc", "fc2 -> fc -> fc2")]


def test_a_conv_shared_on_other_channels_is_an_error() -> None:
    text = replaced("b: {shape: [6, 6, 3]}", "b: {shape: [6, 6, 5]}")
    (message,) = errors(text)
    assert message.startswith(f"s.yaml:{LINE['enc2']}:")
    assert ("layer 'enc2' shares the variables of 'enc', but its input [batch, 6, 6, 5] would need kernel "
            "[3, 3, 5, 4], and 'enc/kernel' is [3, 3, 3, 4] (for the input [batch, 6, 6, 3] of 'enc')") in message


def test_a_sharing_layer_owns_no_variables_and_reports_its_owner() -> None:
    ir = build_ir(load_spec_text(SPEC, "s.yaml"))
    paths = [v.path for v in ir.model_variables]
    assert len(paths) == len(set(paths)) == 10 and not any(p.startswith(("enc2/", "bn2/", "fc2/")) for p in paths)
    for sharer, owner in (("enc2", "enc"), ("bn2", "bn"), ("fc2", "fc")):
        node = ir.node(sharer)
        assert node.shares == owner and node.variables == ir.node(owner).variables
        assert node.flops == ir.node(owner).flops > 0  # both calls count
    assert ir.node("enc2").activation == "relu"  # left out: the owner's value, not the default
    assert ir.collections["model"].count("enc/kernel") == 1
    text = report(ir, "s.yaml")
    row = next(line for line in text.splitlines() if line.startswith("fc2 "))
    assert row.split()[1:6] == ["dense+tanh,", "shares", "fc", "[batch,", "6]"] and row.split()[6] == "0"


def test_patterns_name_the_owner_paths() -> None:
    doc = yaml.safe_load(SPEC)
    doc |= {"loss": {"kind": "mean_squared_error", "predictions": "y", "labels": "t"}, "frozen": ["fc2/*"],
            "optimizers": {"all": {"kind": "sgd", "learning_rate": 0.1}}}
    (message,) = errors(yaml.safe_dump(doc, sort_keys=False))
    assert "'fc2/*'" in message and "matches no variable" in message


# --- generated code ----------------------------------------------------------------------------


def test_generated_code_reads_the_owner_variables_once_declared() -> None:
    from specgen.render.files import render_files

    files = render_files(build_ir(load_spec_text(SPEC, "s.yaml")))
    model = files["model.py"].decode()
    assert model.count("self.enc_kernel = tf.Variable(") == 1
    assert "enc2 = tf.nn.conv2d(b, self.enc_kernel," in model and "# enc2: conv2d -> [batch, 6, 6, 4] (shares enc)" in model
    graph = onnx.load_from_string(files["model.onnx"])
    assert [i.name for i in graph.graph.input].count("enc__kernel") == 1
    convs = [n for n in graph.graph.node if n.op_type == "Conv"]
    assert [n.input[1] for n in convs] == ["enc__kernel", "enc__kernel"]
    assert not any(n.op_type == "Transpose" and n.input[0].endswith("kernel") for n in graph.graph.node)


def test_tf_and_onnxruntime_agree(tmp_path: Path) -> None:
    assert check_parity(load_spec_text(SPEC, "s.yaml"), tmp_path) <= TOLERANCE


# --- export: batch-norm folding never touches a shared kernel ---------------------------------------

ONE_USE_BN = """\
specgen: 1
name: one_use_bn
inputs: {a: {shape: [5, 5, 2]}, b: {shape: [5, 5, 2]}}
outputs: {y: bn, z: enc2, w: bnp}
layers:
  - {name: enc, op: conv2d, input: a, filters: 3, kernel: 3, padding: same}
  - {name: bn, op: batch_norm}
  - {name: enc2, op: conv2d, input: b, filters: 3, kernel: 3, padding: same, share: enc}
  - {name: plain, op: conv2d, input: b, filters: 3, kernel: 1}
  - {name: bnp, op: batch_norm}
"""


def test_batch_norm_after_one_use_of_a_shared_conv_is_not_folded(tmp_path: Path) -> None:
    """Folding bn into enc's kernel would change enc2's output too (enc2 reads the same initializer)."""
    import onnxruntime as ort
    from keras_parity import generated_model

    from specgen.render.files import render_files
    from specgen.runtime import parity
    from specgen.runtime.lib.onnx_layout import onnx_feeds
    from specgen.runtime.onnx_export import fold_batch_norms, node_counts, with_weights

    ir = build_ir(load_spec_text(ONE_USE_BN, "s.yaml"))
    built = render_files(ir)["model.onnx"]
    rng = np.random.default_rng(0)
    values = parity.random_weights(ir, rng)
    weights = onnx_feeds(ir.model_variables, values)
    before = weights["enc__kernel"].copy()
    assert fold_batch_norms(onnx.load_from_string(built).graph, weights) == 1  # bnp only
    np.testing.assert_array_equal(weights["enc__kernel"], before)

    exported = with_weights(onnx.load_from_string(built), ir, values)
    assert node_counts(exported)["BatchNormalization"] == 1
    model = generated_model(ONE_USE_BN, tmp_path)
    parity.assign(model, values)
    inputs = parity.random_inputs(ir, 4, rng)
    expected = parity.run_tf(model, inputs)
    session = ort.InferenceSession(exported.SerializeToString(), providers=["CPUExecutionProvider"])
    actual = dict(zip(ir.outputs, session.run(list(ir.outputs), inputs), strict=True))
    assert parity.max_abs_diff(expected, actual) <= TOLERANCE


def test_export_of_the_shared_model(tmp_path: Path) -> None:
    from test_export import write_checkpoint

    from specgen.pipeline import build
    from specgen.runtime.commands.export import export

    loaded = load_spec_text(SPEC, str(tmp_path / "s.yaml"), tmp_path / "s.yaml")
    values = write_checkpoint(tmp_path / "ckpt", build_ir(loaded), np.random.default_rng(3))
    result = export(build(loaded), tmp_path / "ckpt", tmp_path / "out")
    assert result["parity_max_abs_diff"] <= TOLERANCE
    model = onnx.load(str(tmp_path / "out" / "model.onnx"))
    names = [i.name for i in model.graph.initializer]
    assert len(names) == len(set(names)) and "enc__kernel" in names
    kernel = next(i for i in model.graph.initializer if i.name == "fc__kernel")
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(kernel), values["fc/kernel"])  # Gemm keeps [in, out]


# --- Keras: the same model with layers called twice ------------------------------------------------


def keras_shared_model() -> Any:
    keras = pytest.importorskip("keras")
    layers = keras.layers
    a, b = keras.Input((6, 6, 3), name="a"), keras.Input((6, 6, 3), name="b")
    enc = layers.Conv2D(4, 3, padding="same", activation="relu", name="enc")
    bn = layers.BatchNormalization(name="bn")
    fc = layers.Dense(6, activation="tanh", name="fc")
    pooled = layers.GlobalAveragePooling2D(name="gap")(layers.Add(name="sum")([bn(enc(a)), bn(enc(b))]))
    first = fc(layers.Dense(6, name="pre")(pooled))
    return keras.Model([a, b], layers.Add(name="out")([first, fc(first)]))


def test_forward_gradients_and_statistics_equal_keras(tmp_path: Path) -> None:
    """Keras sums the shared kernel's gradient over both calls and updates bn's statistics on each call."""
    import tensorflow as tf
    from keras_parity import generated_model

    keras_model = keras_shared_model()
    model = generated_model(SPEC, tmp_path)
    ours = model.variables_by_path()
    theirs = {f"{layer.name}/{w.name}": w for layer in keras_model.layers for w in layer.weights}
    assert sorted(ours) == sorted(theirs)  # one set: Keras too has enc/kernel once
    rng = np.random.default_rng(0)
    for path, variable in ours.items():
        value = rng.standard_normal(tuple(variable.shape)).astype(np.float32) * 0.5
        value = np.abs(value) + 0.5 if "variance" in path else value
        variable.assign(value)
        theirs[path].assign(value)
    feeds = {name: rng.standard_normal((5, 6, 6, 3)).astype(np.float32) for name in ("a", "b")}
    forward = np.abs(model(feeds)["y"].numpy() - keras_model.predict(feeds, verbose=0)).max()
    assert forward <= TOLERANCE

    projection = tf.constant(rng.standard_normal((5, 6)).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(list(ours.values()))  # no optimizer in SPEC: its weights are non-trainable tf.Variables
        ours_loss = tf.reduce_sum(model({k: tf.constant(v) for k, v in feeds.items()}, training=True)["y"] * projection)
        theirs_loss = tf.reduce_sum(keras_model(feeds, training=True) * projection)
    for path in ("enc/kernel", "enc/bias", "bn/gamma", "bn/beta", "fc/kernel", "fc/bias", "pre/kernel"):
        mine, reference = tape.gradient(ours_loss, ours[path]), tape.gradient(theirs_loss, theirs[path])
        scale = max(1.0, float(np.abs(reference).max()))
        assert np.abs(mine.numpy() - reference.numpy()).max() / scale <= TOLERANCE, path
    for path in ("bn/moving_mean", "bn/moving_variance"):  # two updates each, in call order
        np.testing.assert_allclose(ours[path].numpy(), theirs[path].numpy(), rtol=0, atol=TOLERANCE)


def test_training_a_shared_layer_frozen_and_trained(tmp_path: Path) -> None:
    """One SGD step: the shared kernel moves by the sum of both calls' gradients; frozen, it stays bitwise."""
    import tensorflow as tf
    from test_training_numerics import build, data, spec_doc, train_step, values

    shared = [{"name": "body", "op": "dense", "input": "x", "units": 6, "activation": "tanh"},
              {"name": "body2", "op": "dense", "units": 6, "share": "body"},
              {"name": "out", "op": "dense", "units": 3}]
    sgd = {"all": {"kind": "sgd", "learning_rate": 0.1}}  # every weight not frozen
    trained = build(tmp_path, spec_doc("trained", sgd, layers=shared), "trained")
    assert list(trained.trainer.trainable_paths) == ["body/kernel", "body/bias", "out/kernel", "out/bias"]
    before = values(trained.model.variables_by_path())
    x, y = data(8, seed=7)
    weights = {p: tf.Variable(v) for p, v in before.items()}
    with tf.GradientTape() as tape:  # the same network written out: body's weights used twice
        hidden = tf.tanh(tf.matmul(x, weights["body/kernel"]) + weights["body/bias"])
        hidden = tf.tanh(tf.matmul(hidden, weights["body/kernel"]) + weights["body/bias"])
        logits = tf.matmul(hidden, weights["out/kernel"]) + weights["out/bias"]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    grads = dict(zip(weights, tape.gradient(loss, list(weights.values())), strict=True))
    train_step(trained.trainer, x, y)
    after = values(trained.model.variables_by_path())
    for path in weights:
        np.testing.assert_allclose(after[path], before[path] - 0.1 * grads[path].numpy(), rtol=0, atol=1e-6)

    frozen = build(tmp_path, spec_doc("frozen", sgd, layers=shared, frozen=["body/*"]), "frozen")
    assert list(frozen.trainer.trainable_paths) == ["out/kernel", "out/bias"]
    start = values(frozen.model.variables_by_path())
    for step in range(3):
        train_step(frozen.trainer, *data(8, seed=20 + step))
    end = values(frozen.model.variables_by_path())
    np.testing.assert_array_equal(end["body/kernel"], start["body/kernel"])
    assert np.abs(end["out/kernel"] - start["out/kernel"]).max() > 1e-3


# --- import keras: a layer called twice becomes `share:` ------------------------------------------


def imported_shared_model(tmp_path: Path) -> tuple[Any, dict[str, np.ndarray]]:
    """keras_shared_model, plus a nested Sequential called on both branches; random weights; saved as m.keras."""
    keras = pytest.importorskip("keras")
    from test_import_keras import randomize

    layers = keras.layers
    a, b = keras.Input((6, 6, 3), name="a"), keras.Input((6, 6, 3), name="b")
    enc = layers.Conv2D(4, 3, padding="same", activation="relu", name="enc")
    bn = layers.BatchNormalization(name="bn")
    head = keras.Sequential([layers.Dense(5, activation="tanh", name="d1"), layers.Dense(6, name="d2")], name="head")
    fc = layers.Dense(6, activation="tanh", name="fc")
    pool = layers.GlobalAveragePooling2D(name="gap")
    left, right = pool(bn(enc(a))), pool(bn(enc(b)))
    first = fc(layers.Add(name="sum")([head(left), head(right)]))
    model = keras.Model([a, b], {"y": layers.Add(name="out")([first, fc(first)])}, name="shared_import")
    randomize(model)
    model.save(tmp_path / "m.keras")
    rng = np.random.default_rng(5)
    return model, {name: rng.standard_normal((4, 6, 6, 3)).astype(np.float32) for name in ("a", "b")}


def test_import_keras_shared_layers_and_a_nested_model_called_twice(tmp_path: Path) -> None:
    import onnxruntime as ort
    from test_import_keras import compare, run_import

    from specgen.cli import main

    model, feeds = imported_shared_model(tmp_path)
    spec = tmp_path / "m.yaml"
    assert run_import(tmp_path / "m.keras", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    shares = {layer["name"]: layer["share"] for layer in doc["layers"] if "share" in layer}
    assert shares == {"enc/call2": "enc", "bn/call2": "bn", "gap/call2": "gap", "head/call2/d1": "head/d1",
                      "head/call2/d2": "head/d2", "fc/call2": "fc"}
    assert not any(e["to"].startswith(tuple(shares)) for e in doc["checkpoint"]["restore"][0].get("map", []))
    assert main(["validate", str(spec)]) == 0
    assert compare(spec, tmp_path, model, feeds) < RELATIVE

    assert main(["export", str(spec), "-o", str(tmp_path / "out")]) == 0  # weights from m.keras, no checkpoint
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    theirs = model.predict(feeds, verbose=0)["y"]
    ours = session.run(["y"], feeds)[0]
    assert float(np.abs(ours - theirs).max() / np.abs(theirs).max()) < RELATIVE


def test_import_legacy_h5_shared_layer(tmp_path: Path) -> None:
    """Keras 2 configs number a layer's calls the same way: [layer, call, tensor] in each inbound node."""
    tf_keras = pytest.importorskip("tf_keras")
    from test_import_keras import compare, randomize, run_import

    layers = tf_keras.layers
    a, b = tf_keras.Input((5,), name="a"), tf_keras.Input((5,), name="b")
    shared = layers.Dense(5, activation="tanh", name="shared")
    model = tf_keras.Model([a, b], layers.Add(name="sum")([shared(shared(a)), shared(b)]), name="legacy_shared")
    randomize(model)
    model.save(tmp_path / "legacy.h5")
    spec = tmp_path / "legacy.yaml"
    assert run_import(tmp_path / "legacy.h5", "-o", spec) == 0
    doc = yaml.safe_load(spec.read_text())
    assert {layer["name"]: layer.get("share") for layer in doc["layers"]} == {
        "shared": None, "shared/call2": "shared", "shared/call3": "shared", "sum": None}
    rng = np.random.default_rng(6)
    feeds = {name: rng.standard_normal((3, 5)).astype(np.float32) for name in ("a", "b")}
    assert compare(spec, tmp_path, model, feeds) < RELATIVE
