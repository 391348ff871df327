"""A batch_norm whose weights are all frozen runs in inference mode, in training too (Keras' trainable=False).

Checked: one training step against Keras (a BatchNormalization with trainable=False inside a model
called in training mode): outputs, the trained head and the unchanged statistics; the collections
(`update` loses the statistics, `model` keeps them, `frozen` stays weights only) and `specgen report`;
the cases that keep training mode: only gamma frozen, a batch norm without weights, a spec without
optimizers; a sharing layer follows its owner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from specgen.cli import main
from specgen.ir.model import ModelIR
from specgen.ir.resolve import build_ir
from specgen.render.files import render_files
from specgen.spec.load import load_spec_text

FEATURES, CLASSES, BATCH = 6, 3, 8
LAYERS = [
    {"name": "fc", "op": "dense", "input": "x", "units": 4},
    {"name": "bn", "op": "batch_norm", "momentum": 0.9, "epsilon": 0.001},
    {"name": "out", "op": "dense", "units": CLASSES},
]
STATISTICS = ("bn/moving_mean", "bn/moving_variance")


def spec_doc(frozen: list[str], optimizers: dict[str, Any] | None = None,
             layers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"specgen": 1, "name": "fbn", "inputs": {"x": {"shape": [FEATURES]}},
                           "outputs": {"logits": "out"}, "layers": layers or LAYERS}
    if optimizers is not None:
        doc |= {"frozen": frozen, "optimizers": optimizers, "train": {"batch_size": BATCH},
                "loss": {"kind": "sparse_softmax_cross_entropy", "logits": "logits", "labels": "label"}}
    return doc


def ir_of(doc: dict[str, Any]) -> ModelIR:
    return build_ir(load_spec_text(yaml.safe_dump(doc, sort_keys=False), "fbn.yaml"))


def model_py(doc: dict[str, Any]) -> str:
    loaded = load_spec_text(yaml.safe_dump(doc, sort_keys=False), "fbn.yaml")
    return render_files(build_ir(loaded))["model.py"].decode()


HEAD_SGD = {"head": {"variables": ["out/*"], "kind": "sgd", "learning_rate": 0.1}}


def test_frozen_batch_norm_leaves_update_and_stays_in_model() -> None:
    ir = ir_of(spec_doc(["fc/*", "bn/*"], HEAD_SGD))
    assert ir.node("bn").inference_mode
    assert ir.collections["update"] == ()
    assert ir.collections["frozen"] == ("fc/kernel", "fc/bias", "bn/gamma", "bn/beta")  # weights only, as before
    assert set(STATISTICS) <= set(ir.collections["model"])
    for path in STATISTICS:
        assert next(v for v in ir.variables if v.path == path).collections == ("model",)
    text = model_py(spec_doc(["fc/*", "bn/*"], HEAD_SGD))
    assert "# frozen: inference mode, as Keras" in text and "training=False, axes=[0]" in text


def test_only_gamma_frozen_keeps_training_mode() -> None:
    """All of a batch norm's weights must be frozen: with beta trained it normalizes with batch statistics."""
    optimizers = {"rest": {"kind": "sgd", "learning_rate": 0.1}}
    ir = ir_of(spec_doc(["fc/*", "bn/gamma"], optimizers))
    assert not ir.node("bn").inference_mode
    assert ir.collections["update"] == STATISTICS
    assert ir.optimizers["rest"] == ("bn/beta", "out/kernel", "out/bias")
    assert "training=training, axes=[0]" in model_py(spec_doc(["fc/*", "bn/gamma"], optimizers))


def test_batch_norm_without_weights_keeps_updating_its_statistics() -> None:
    """center: false and scale: false: nothing to freeze, so it trains its statistics as before; a
    `frozen` pattern that names only its statistics is accepted and changes nothing (frozen takes weights)."""
    layers = [LAYERS[0], {**LAYERS[1], "center": False, "scale": False}, LAYERS[2]]
    ir = ir_of(spec_doc(["fc/*", "bn/moving_*"], HEAD_SGD, layers))
    assert not ir.node("bn").inference_mode
    assert ir.collections["update"] == STATISTICS
    assert ir.collections["frozen"] == ("fc/kernel", "fc/bias")


def test_without_optimizers_batch_norm_keeps_training_mode() -> None:
    """Every weight is in `frozen` only because nothing trains: `model(..., training=True)` keeps Keras'
    training semantics (the parity harness and imported models rely on it)."""
    ir = ir_of(spec_doc([], None))
    assert ir.collections["frozen"] == ("fc/kernel", "fc/bias", "bn/gamma", "bn/beta", "out/kernel", "out/bias")
    assert not ir.node("bn").inference_mode and ir.collections["update"] == STATISTICS


def test_sharing_layer_follows_its_owner() -> None:
    layers = [{"name": "fc", "op": "dense", "input": "x", "units": 4},
              {"name": "bn", "op": "batch_norm"},
              {"name": "fc2", "op": "dense", "units": 4},
              {"name": "bn2", "op": "batch_norm", "share": "bn"},
              {"name": "out", "op": "dense", "units": CLASSES}]
    frozen = spec_doc(["bn/*"], {"rest": {"kind": "sgd", "learning_rate": 0.1}}, layers)
    ir = ir_of(frozen)
    assert ir.node("bn").inference_mode and ir.node("bn2").inference_mode
    assert ir.collections["update"] == ()
    assert model_py(frozen).count("training=False, axes=") == 2
    trained = ir_of(spec_doc([], {"rest": {"kind": "sgd", "learning_rate": 0.1}}, layers))
    assert not trained.node("bn").inference_mode and not trained.node("bn2").inference_mode


def test_report_and_collections_yaml_show_statistics_out_of_update(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "fbn.yaml"
    spec.write_text(yaml.safe_dump(spec_doc(["fc/*", "bn/*"], HEAD_SGD), sort_keys=False))
    assert main(["report", str(spec)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    assert rows["bn/moving_mean"][-1] == "model" and rows["bn/moving_variance"][-1] == "model"
    assert rows["update"][:2] == ["0", "0"] and rows["frozen"][:2] == ["4", "36"]  # 6*4 + 4 + 4 + 4
    assert main(["build", str(spec), "--out", str(tmp_path / "gen")]) == 0
    table = yaml.safe_load((tmp_path / "gen" / "fbn" / "collections.yaml").read_text())
    assert table["collections"]["update"] == []
    assert table["variables"]["bn/moving_mean"]["collections"] == ["model"]
    assert set(STATISTICS) <= set(table["collections"]["model"])


def test_one_training_step_equals_keras_trainable_false(tmp_path: Path) -> None:
    """Keras: Dense and BatchNormalization with trainable=False, the model called with training=True."""
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    from test_training_numerics import build, train_step, values  # sibling module, by bare name as CI runs it

    built = build(tmp_path, spec_doc(["fc/*", "bn/*"], HEAD_SGD))
    ours = built.model.variables_by_path()
    assert list(built.trainer.trainable_paths) == ["out/kernel", "out/bias"]

    fc, bn = keras.layers.Dense(4, name="fc"), keras.layers.BatchNormalization(momentum=0.9, epsilon=0.001, name="bn")
    out = keras.layers.Dense(CLASSES, name="out")
    inputs = keras.Input((FEATURES,))
    keras_model = keras.Model(inputs, out(bn(fc(inputs))))
    fc.trainable = bn.trainable = False
    theirs = {f"{layer.name}/{w.name}": w for layer in (fc, bn, out) for w in layer.weights}
    assert sorted(theirs) == sorted(ours)
    rng = np.random.default_rng(0)
    for path, variable in ours.items():  # statistics far from their initial values, so using them shows
        value = rng.standard_normal(tuple(variable.shape)).astype(np.float32)
        value = np.abs(value) + 0.5 if "variance" in path else value
        variable.assign(value)
        theirs[path].assign(value)
    before = values(ours)
    x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, BATCH).astype(np.int64)

    forward = built.model({"x": tf.constant(x)}, training=True)["logits"].numpy()
    np.testing.assert_allclose(forward, keras_model(x, training=True).numpy(), rtol=0, atol=1e-5)

    train_step(built.trainer, x, y)
    optimizer = keras.optimizers.SGD(0.1)
    with tf.GradientTape() as tape:
        logits = keras_model(x, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    assert [w.path for w in keras_model.trainable_weights] == ["out/kernel", "out/bias"]
    grads = tape.gradient(loss, keras_model.trainable_weights)
    optimizer.apply_gradients(zip(grads, keras_model.trainable_weights, strict=True))

    after = values(ours)
    for path in ("fc/kernel", "fc/bias", "bn/gamma", "bn/beta", *STATISTICS):  # frozen backbone, statistics too
        np.testing.assert_array_equal(after[path], before[path], err_msg=path)
        np.testing.assert_array_equal(after[path], theirs[path].numpy(), err_msg=path)
    for path in ("out/kernel", "out/bias"):
        assert not np.array_equal(after[path], before[path]), path
        np.testing.assert_allclose(after[path], theirs[path].numpy(), rtol=0, atol=1e-6, err_msg=path)
    forward = built.model({"x": tf.constant(x)}, training=True)["logits"].numpy()
    np.testing.assert_allclose(forward, keras_model(x, training=True).numpy(), rtol=0, atol=1e-5)
