"""batch_norm's center/scale, scale, rescale, normalize, broadcasting merges, keepdims pools:
positioned errors, the `constant` variable kind (model only, never trained), report, export folding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specgen.cli import main
from specgen.ir.resolve import build_ir
from specgen.report import report
from specgen.spec.load import load_spec, load_spec_text

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"

SPEC = f"""\
specgen: 1
name: se_net
inputs:
  image: {{shape: [8, 8, 1]}}
outputs:
  logits: head
layers:
  - {{name: n, op: normalize}}
  - {{name: c, op: conv2d, filters: 4, kernel: 3, padding: same}}
  - {{name: bn, op: batch_norm, scale: false, activation: relu}}
  - {{name: p, op: global_avg_pool, keepdims: true}}
  - {{name: fc, op: conv2d, filters: 4, kernel: 1}}
  - {{name: gate, op: sigmoid}}
  - {{name: se, op: multiply, inputs: [bn, gate]}}
  - {{name: ls, op: scale, init_values: 0.5}}
  - {{name: r, op: rescale, scale: [1.0, 2.0, 0.5, 1.5], offset: 0.25}}
  - {{name: d, op: subtract, inputs: [r, p]}}
  - {{name: g, op: global_max_pool}}
  - {{name: head, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  body: {{kind: sgd, momentum: 0.9, learning_rate: 0.01, variables: ["n/*", "c/*", "bn/*"]}}
  rest: {{kind: adam, learning_rate: 0.001}}
train: {{batch_size: 16, seed: 0}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
checkpoint: {{dir: run, every_steps: 2}}
"""


def test_normalize_statistics_are_model_state_no_optimizer_claims() -> None:
    ir = build_ir(load_spec_text(SPEC, "se.yaml"))
    by_path = {v.path: v for v in ir.variables}
    assert by_path["n/mean"].collections == ("model",) == by_path["n/variance"].collections
    assert ir.optimizers["body"] == ("c/kernel", "c/bias", "bn/beta")  # "n/*" takes no statistics
    assert "n/mean" not in ir.optimizers["rest"] and "ls/gamma" in ir.optimizers["rest"]
    assert not [p for p in ir.collections["optimizer"] if p.endswith(("n/mean", "n/variance"))]
    assert {"n/mean", "n/variance"} <= set(ir.collections["model"]) - set(ir.collections["frozen"])
    assert "bn/gamma" not in by_path and by_path["bn/beta"].collections == ("model", "trainable")
    text = report(ir, "se.yaml")
    assert any(line.split()[:4] == ["n/mean", "[1]", "float32", "model"] for line in text.splitlines())


def test_flops_of_the_new_ops() -> None:
    ir = build_ir(load_spec_text(SPEC, "se.yaml"))
    flops = {n.name: n.flops for n in ir.nodes}
    hwc = 8 * 8 * 4
    assert flops["n"] == 2 * 64 + 2 and flops["bn"] == 2 * hwc + hwc  # batch norm + relu
    assert (flops["p"], flops["se"], flops["ls"], flops["r"], flops["d"], flops["g"]) == (hwc, hwc, hwc, 2 * hwc, hwc, hwc)


def test_training_leaves_the_statistics_and_saves_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import tensorflow as tf

    spec = tmp_path / "se.yaml"
    spec.write_text(SPEC)
    assert main(["train", str(spec), "--steps", "2", "--quiet"]) == 0
    reader = tf.train.load_checkpoint(str(tmp_path / "run"))
    saved = reader.get_variable_to_shape_map()
    np.testing.assert_array_equal(reader.get_tensor("n/mean"), [0.0])
    np.testing.assert_array_equal(reader.get_tensor("n/variance"), [1.0])
    assert not [k for k in saved if k.startswith("optimizers/") and k.endswith(("/n/mean", "/n/variance"))]
    assert not np.allclose(reader.get_tensor("ls/gamma"), 0.5)  # the weight beside them did train

    capsys.readouterr()
    assert main(["export", str(spec), "--checkpoint", str(tmp_path / "run"), "-o", str(tmp_path / "out")]) == 0
    assert "parity" in capsys.readouterr().out


def test_export_folds_batch_norm_without_gamma_and_keeps_the_statistics(tmp_path: Path) -> None:
    import onnx
    import tensorflow as tf
    from onnx import numpy_helper

    from specgen.pipeline import build
    from specgen.runtime.commands.export import export
    from specgen.runtime.parity import random_weights

    spec = tmp_path / "se.yaml"
    spec.write_text(SPEC)
    loaded = load_spec(spec)
    ir = build_ir(loaded)
    values = random_weights(ir, np.random.default_rng(1))
    names = sorted(values)
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "ckpt"), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(values[n]) for n in names])
    result = export(build(loaded), tmp_path / "ckpt", tmp_path / "out")
    assert result["parity_max_abs_diff"] <= 1e-5
    model = onnx.load(str(tmp_path / "out" / "model.onnx"))
    ops = {node.op_type for node in model.graph.node}
    assert not ops & {"BatchNormalization", "ConstantOfShape"}  # folded into the conv, filler dropped
    initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    np.testing.assert_array_equal(initializers["n__mean"], values["n/mean"])
    assert "bn___channels" not in initializers


def test_restore_map_fills_the_statistics(tmp_path: Path) -> None:
    import tensorflow as tf

    from specgen.runtime.commands.restore import plan_restore
    from specgen.spec.io import RestoreSource

    stats = {"normalization/mean": np.array([0.25], np.float32), "normalization/variance": np.array([4.0], np.float32)}
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "keras.ckpt"), tensor_names=list(stats), shape_and_slices=["", ""],
                      tensors=[tf.constant(v) for v in stats.values()])
    loaded = load_spec_text(SPEC, "se.yaml")
    targets = {v.path: (v.shape, v.dtype) for v in build_ir(loaded).model_variables}
    source = RestoreSource.model_validate({"from": "keras.ckpt", "map": [{"pattern": "^normalization/(.*)$",
                                                                          "to": "n/\\1"}]})
    plan = plan_restore(loaded, targets, [(tmp_path / "keras.ckpt", source)])
    restored = {r.path: r.key for r in plan.rows if r.status == "restored"}
    assert restored == {"n/mean": "normalization/mean", "n/variance": "normalization/variance"}


LAYERS = """\
specgen: 1
name: bad
inputs:
  image: {shape: [6, 6, 3]}
outputs:
  y: last
layers:
  - {name: c, op: conv2d, filters: 4, kernel: 3}
LAST
"""

ERRORS = [
    ("rescale_list_length", "  - {name: last, op: rescale, scale: [1.0, 2.0]}",
     "9:38: error: layer 'last' (rescale): scale: received 2 values, expected one number or 4 (one per channel of "
     "the input)"),
    ("normalize_mean_without_variance", "  - {name: last, op: normalize, input: image, mean: [0.5, 0.5, 0.5]}",
     "9:53: error: layer 'last' (normalize): mean: received mean without variance, expected both (fixed statistics) "
     "or neither (variables 'mean' and 'variance' filled by a restore or checkpoint)"),
    ("normalize_negative_variance", "  - {name: last, op: normalize, mean: 0.0, variance: -1.0}",
     "9:54: error: variance: received -1.0, expected a value >= 0.0 (in layer 'last')"),
    ("multiply_no_broadcast",
     "  - {name: p, op: avg_pool, size: 2}\n  - {name: last, op: multiply, inputs: [c, p]}",
     "10:40: error: layer 'last' (multiply): inputs: received 'c' [batch, 4, 4, 4] and 'p' [batch, 2, 2, 4], which "
     "do not broadcast; expected inputs of one rank whose axes are equal or 1 in one of them"),
    ("add_lower_rank", "  - {name: p, op: global_avg_pool}\n  - {name: last, op: add, inputs: [c, p]}",
     "10:35: error: layer 'last' (add): inputs: received 'c' [batch, 4, 4, 4] and 'p' [batch, 4], which do not "
     "broadcast; expected inputs of one rank whose axes are equal or 1 in one of them; an input of lower rank "
     "needs size-1 axes first (e.g. global_avg_pool's keepdims: true)"),
    ("subtract_three_inputs", "  - {name: last, op: subtract, inputs: [c, c, c]}",
     "9:40: error: inputs: expected at most 2 item(s), received 3 (in layer 'last')"),
    ("keepdims_not_bool", "  - {name: last, op: global_max_pool, keepdims: 2}",
     "9:49: error: keepdims: expected true or false, received 2 (a number: write true or false, unquoted) (in layer "
     "'last')"),
]


@pytest.mark.parametrize(("layer", "expected"), [pytest.param(t, e, id=i) for i, t, e in ERRORS])
def test_positioned_errors(layer: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(LAYERS.replace("LAST", layer))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith(f"spec.yaml:{expected}"), err


def test_momentum_zero_keeps_the_last_batch_statistics_as_keras(tmp_path: Path) -> None:
    """batch_norm momentum: 0 (Keras' BatchNormalization(momentum=0), refused before): after one training step the
    moving statistics are that batch's mean and (biased) variance, as Keras' after one step in training mode."""
    keras = pytest.importorskip("keras")
    from test_training_numerics import build, train_step  # sibling module, by bare name as CI runs it

    layers = [{"name": "fc", "op": "dense", "input": "x", "units": 4},
              {"name": "bn", "op": "batch_norm", "momentum": 0.0, "epsilon": 0.001},
              {"name": "out", "op": "dense", "units": 3}]
    doc = {"specgen": 1, "name": "bn0", "inputs": {"x": {"shape": [6]}}, "outputs": {"logits": "out"},
           "layers": layers, "optimizers": {"all": {"kind": "sgd", "learning_rate": 0.1}}, "train": {"batch_size": 8},
           "loss": {"kind": "sparse_softmax_cross_entropy", "logits": "logits", "labels": "label"}}
    built = build(tmp_path, doc)
    ours = built.model.variables_by_path()
    fc, bn = keras.layers.Dense(4, name="fc"), keras.layers.BatchNormalization(momentum=0.0, epsilon=0.001, name="bn")
    inputs = keras.Input((6,))
    keras_model = keras.Model(inputs, keras.layers.Dense(3, name="out")(bn(fc(inputs))))
    theirs = {w.path: w for w in keras_model.weights}
    rng = np.random.default_rng(0)
    for path, variable in ours.items():  # statistics far from their initial values: a momentum > 0 would show
        value = rng.standard_normal(tuple(variable.shape)).astype(np.float32)
        value = np.abs(value) + 0.5 if "variance" in path else value
        variable.assign(value)
        theirs[path].assign(value)
    x = rng.standard_normal((8, 6)).astype(np.float32) * 2 + 1
    hidden = keras_model.get_layer("fc")(x).numpy()  # the batch the statistics come from (fc before the step)
    keras_model(x, training=True)  # Keras' update: one forward pass in training mode
    train_step(built.trainer, x, rng.integers(0, 3, 8).astype(np.int64))
    for name, want in (("moving_mean", hidden.mean(axis=0)), ("moving_variance", hidden.var(axis=0))):
        np.testing.assert_allclose(ours[f"bn/{name}"].numpy(), theirs[f"bn/{name}"].numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(ours[f"bn/{name}"].numpy(), want, rtol=1e-5, atol=1e-6)
