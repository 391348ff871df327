"""`specgen train --probe` (specgen/runtime/commands/probe.py) against a hand computation in TensorFlow.

One probe of a small spec, shared by the module: its gradient norms are compared with a
GradientTape over the same weights written out with plain TensorFlow ops (to 1e-6 relative),
its first-update sizes with Keras' own SGD and Adam applied to copies, its activation
statistics with numpy in float64 on the same forward pass. A layer whose relu never opens gets
exactly zero gradients, which the table flags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from specgen.cli import main  # noqa: E402
from specgen.ir.resolve import build_ir  # noqa: E402
from specgen.pipeline import build  # noqa: E402
from specgen.render.files import render_files  # noqa: E402
from specgen.runtime.commands import probe as probing  # noqa: E402
from specgen.runtime.lib.generated import load_generated  # noqa: E402
from specgen.spec.load import load_spec  # noqa: E402

SPEC = """specgen: 1
name: probed
inputs:
  x: {shape: [6]}
outputs:
  logits: out
layers:
  - {name: hidden, op: dense, units: 5, activation: tanh}
  - {name: dead, op: dense, input: x, units: 3, activation: relu, kernel_init: zeros,
     bias_init: {kind: constant, value: -1.0}}
  - {name: both, op: concat, inputs: [hidden, dead]}
  - {name: out, op: dense, units: 3, bias_init: {kind: constant, value: 0.1}}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  body: {variables: ["hidden/*", "dead/*"], kind: sgd, momentum: 0.9, learning_rate: 0.1}
  head: {variables: ["out/*"], kind: adam, learning_rate: 0.01}
train: {batch_size: 32, seed: 3}
data:
  train: {npz: data.npz, features: {x: x}, labels: {label: y}}
"""
EXAMPLES = 32  # one batch is the whole data set: the mean loss does not depend on the shuffled order


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("probe")
    rng = np.random.default_rng(0)
    np.savez(path / "data.npz", x=rng.normal(size=(EXAMPLES, 6)).astype(np.float32),
             y=rng.integers(0, 3, size=EXAMPLES).astype(np.int64))
    (path / "spec.yaml").write_text(SPEC)
    return path


@pytest.fixture(scope="module")
def result(folder: Path) -> probing.Probe:
    return probing.probe(build(load_spec(folder / "spec.yaml")))


@pytest.fixture(scope="module")
def hand(folder: Path) -> dict[str, Any]:
    """The same initial weights (a model of the same spec and seed), the forward pass in plain TensorFlow."""
    ir = build_ir(load_spec(folder / "spec.yaml"))
    code = folder / "code"
    code.mkdir()
    for name, content in render_files(ir).items():
        if name.endswith(".py"):
            (code / name).write_bytes(content)
    model = load_generated(code / "model.py").Probed(seed=3)
    w = {p: tf.Variable(v.read_value(), name=p.replace("/", "_")) for p, v in model.variables_by_path().items()}
    npz = np.load(folder / "data.npz")
    x, y = tf.constant(npz["x"]), tf.constant(npz["y"])
    with tf.GradientTape() as tape:
        hidden = tf.tanh(x @ w["hidden/kernel"] + w["hidden/bias"])
        dead = tf.nn.relu(x @ w["dead/kernel"] + w["dead/bias"])
        both = tf.concat([hidden, dead], axis=-1)
        out = both @ w["out/kernel"] + w["out/bias"]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=out))
    grads = dict(zip(w, tape.gradient(loss, list(w.values())), strict=True))
    return {"w": w, "grads": grads, "loss": float(loss),
            "layers": {"hidden": hidden, "dead": dead, "both": both, "out": out}}


def _keras_update(make: Any, weight: tf.Variable, grad: tf.Tensor) -> float:
    """|w_after - w_before| of one step of a new Keras optimizer on a copy of the weight."""
    copy = tf.Variable(weight.read_value())
    make().apply_gradients([(grad, copy)])
    return float(np.linalg.norm((copy.numpy() - weight.numpy()).astype(np.float64)))


def test_gradient_norms_match_a_gradient_tape(result: probing.Probe, hand: dict[str, Any]) -> None:
    rows = {r.path: r for r in result.variables}
    assert list(rows) == ["hidden/kernel", "hidden/bias", "dead/kernel", "dead/bias", "out/kernel", "out/bias"]
    assert result.loss == pytest.approx(hand["loss"], rel=1e-6)
    for path, grad in hand["grads"].items():
        expected = float(np.linalg.norm(grad.numpy().astype(np.float64)))
        assert rows[path].grad_norm == pytest.approx(expected, rel=1e-6, abs=1e-12), path
        assert rows[path].weight_norm == pytest.approx(float(np.linalg.norm(hand["w"][path].numpy())), rel=1e-6)
    assert rows["dead/kernel"].grad_norm == rows["dead/bias"].grad_norm == 0.0  # relu(-1) never opens
    assert rows["hidden/kernel"].grad_norm > 1e-3 and rows["out/kernel"].grad_norm > 1e-3


def test_first_updates_match_keras_optimizers(result: probing.Probe, hand: dict[str, Any]) -> None:
    """SGD with momentum moves lr * g on its first step; Adam by Keras' own Adam (epsilon 1e-7, its default)."""
    rows = {r.path: r for r in result.variables}
    def sgd() -> Any:
        return keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)

    def adam() -> Any:
        return keras.optimizers.Adam(learning_rate=0.01)

    for path in ("hidden/kernel", "hidden/bias"):
        expected = _keras_update(sgd, hand["w"][path], hand["grads"][path])
        assert rows[path].update_norm == pytest.approx(expected, rel=1e-5), path
        assert rows[path].update_norm == pytest.approx(0.1 * rows[path].grad_norm, rel=1e-5)
    for path in ("out/kernel", "out/bias"):
        expected = _keras_update(adam, hand["w"][path], hand["grads"][path])
        assert rows[path].update_norm == pytest.approx(expected, rel=1e-5), path
        assert rows[path].ratio == pytest.approx(expected / np.linalg.norm(hand["w"][path].numpy()), rel=1e-5)
    assert rows["dead/bias"].update_norm == 0.0 and rows["hidden/bias"].ratio is None  # a zero bias: no ratio


def test_activation_statistics_match_numpy(result: probing.Probe, hand: dict[str, Any]) -> None:
    assert [(x.name, x.op, x.shape) for x in result.layers] == [
        ("hidden", "dense", (5,)), ("dead", "dense", (3,)), ("both", "concat", (8,)), ("out", "dense", (3,))]
    for layer in result.layers:
        value = hand["layers"][layer.name].numpy().astype(np.float64)
        assert layer.mean == pytest.approx(value.mean(), rel=1e-5, abs=1e-7), layer.name
        assert layer.std == pytest.approx(value.std(), rel=1e-5, abs=1e-7), layer.name
    assert result.layers[1].mean == result.layers[1].std == 0.0


def test_the_table_flags_zero_and_missing_gradients(result: probing.Probe) -> None:
    text = probing.format_probe(result)
    lines = text.splitlines()
    assert lines[0].startswith("probe: one batch of 32 examples, weights from the initializers; training-mode loss ")
    dead = [line for line in lines if line.startswith("dead/")]
    assert len(dead) == 2 and all(line.endswith("ZERO gradient") for line in dead)
    assert "2 of 6 trained variables flagged" in lines
    assert not any(line.endswith("gradient") for line in lines if line.startswith(("hidden/", "out/")))
    # A None gradient never reaches here from a valid spec (validate's reachability check refuses it), but the
    # table says so if one does: TensorFlow's None, as the probe receives it.
    row = probing.VariableRow("lost/kernel", (2, 2), 1.0, None, 0.0)
    assert row.flag(1.0) == "MISSING: no gradient (None), the loss does not depend on it"
    assert probing.VariableRow("tiny/bias", (2,), 1.0, 1e-7, 1e-9).flag(1.0) == "near zero (under 1e-05 of the largest)"
    # Issue 17: a saturated tanh's gradient of 1.1e-7 whose update rounds to exactly 0 says so.
    assert probing.VariableRow("sat/kernel", (5, 4), 2e3, 1.1e-7, 0.0).flag(1.0) == (
        "vanishing: update is exactly 0 (gradient under 1e-05 of the largest)")


def test_first_update_puts_every_value_back(folder: Path) -> None:
    ir = build_ir(load_spec(folder / "spec.yaml"))
    code = folder / "code"
    model = load_generated(code / "model.py").Probed(seed=3)
    trainer = load_generated(code / "train.py").ProbedTraining(model)
    everything = model.variables_by_path() | trainer.state_by_path()
    before = {k: v.numpy().copy() for k, v in everything.items()}
    _, grads = trainer.gradients({"x": tf.ones([4, 6])}, {"label": tf.constant([0, 1, 2, 0], tf.int64)})
    moved = probing.first_update(model, trainer, grads)
    assert moved["out/kernel"] > 0 and ir.optimizers["head"] == ("out/kernel", "out/bias")
    assert all(np.array_equal(before[k], v.numpy()) for k, v in everything.items())


def test_cli_prints_the_tables_and_writes_nothing(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listing = sorted(p.name for p in folder.iterdir())
    assert main(["train", str(folder / "spec.yaml"), "--probe"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].split() == ["variable", "shape", "|weight|", "|grad|", "|update|", "|update|/|weight|", "flag"]
    assert out[-5].split() == ["layer", "op", "shape", "mean", "std"]
    assert sorted(p.name for p in folder.iterdir()) == listing  # no run folder
    assert main(["train", str(folder / "spec.yaml"), "--probe", "--steps", "3"]) == 2
    assert "--probe runs one batch and trains nothing" in capsys.readouterr().err
    (folder / "nodata.yaml").write_text(SPEC.split("data:")[0].replace("name: probed", "name: nodata"))
    assert main(["train", str(folder / "nodata.yaml"), "--probe"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{folder / 'nodata.yaml'}: error: --probe needs the 'loss', 'optimizers', 'train' and 'data.train' sections",
        "1 error found"]
    (folder / "nodata.yaml").unlink()


def test_resume_probes_the_newest_checkpoint(folder: Path, hand: dict[str, Any],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """After one SGD step on the whole data set, hidden/kernel is w0 - 0.1 g (momentum's first step)."""
    spec = str(folder / "spec.yaml")
    assert main(["train", spec, "--steps", "1", "--quiet"]) == 0
    saved = sorted((folder / "runs" / "probed").rglob("*"))
    capsys.readouterr()
    assert main(["train", spec, "--probe", "--resume"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("probe: one batch of 32 examples, weights from the checkpoint ") and "ckpt-00000001;" in out[0]
    row = next(line.split("]", 1)[1].split() for line in out if line.startswith("hidden/kernel "))  # after the shape
    expected = np.linalg.norm(hand["w"]["hidden/kernel"].numpy() - 0.1 * hand["grads"]["hidden/kernel"].numpy())
    assert float(row[0]) == pytest.approx(expected, rel=1e-3)  # printed to 4 digits
    assert sorted((folder / "runs" / "probed").rglob("*")) == saved  # read, not written
    assert main(["train", spec, "--probe", "--resume-from", str(folder)]) == 1
    assert "--resume-from: not a checkpoint folder" in capsys.readouterr().err


PRUNED = SPEC.replace("name: probed", "name: probed_pruned").replace(
    "train: {batch_size: 32, seed: 3}",
    "train: {batch_size: 32, seed: 3}\nprune: {variables: [hidden/kernel], schedule: {kind: constant_sparsity, "
    "sparsity: 0.5, begin_step: 1}}")


def test_a_pruning_step_is_probed_with_the_masks_the_real_step_computes(tmp_path: Path) -> None:
    """begin_step 1: the first update recomputes the masks before its forward pass. The probe printed the unpruned
    model's loss (1.6% off), gradients (up to 27%) and an update that left pruned entries non-zero; it must see
    what the generated train_step sees: the same loss (one batch, the whole set: the same mean in any order), and
    an update after which half of hidden/kernel is exactly zero."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", x=rng.normal(size=(EXAMPLES, 6)).astype(np.float32),
             y=rng.integers(0, 3, size=EXAMPLES).astype(np.int64))
    (tmp_path / "spec.yaml").write_text(PRUNED)
    probed = probing.probe(build(load_spec(tmp_path / "spec.yaml")))
    ir = build_ir(load_spec(tmp_path / "spec.yaml"))
    for name, content in render_files(ir).items():
        if name.endswith(".py"):
            (tmp_path / name).write_bytes(content)
    model = load_generated(tmp_path / "model.py").ProbedPruned(seed=3)
    trainer = load_generated(tmp_path / "train.py").ProbedPrunedTraining(model)
    npz = np.load(tmp_path / "data.npz")
    loss = trainer.train_step({"x": tf.constant(npz["x"])}, {"label": tf.constant(npz["y"])},
                              tf.constant([0, 3], tf.int64))
    # The same float32 ops on the same values in another order of the batch: a few roundings of a loss near 1.
    assert probed.loss == pytest.approx(float(loss), rel=1e-6, abs=0)
    kernel = model.variables_by_path()["hidden/kernel"].numpy()
    assert int((kernel == 0).sum()) == kernel.size // 2
