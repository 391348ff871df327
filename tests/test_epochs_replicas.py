"""What an epoch is, and eval numbers under replicas (the trainnum checker's findings 1, 3 and 4).

- Metrics add nothing for an empty replica slice: every metric kind, and `specgen train` under `mirrored` on two
  logical CPUs against one device for eval sets of k*batch + r rows (every r below the replica count) and of one row.
- An epoch is one pass cut into whole updates (runtime/data.py): the rows each update of a real run reads (the data
  carries its row index), the per-epoch numbers against a reference loop of that stream, a resume mid-pass bitwise
  equal to the uninterrupted run, and the refusal of a pass that holds no whole update.
- `mean_loss` beside a loss that reads only computed targets (a DQN), and a `--set` error that names the override.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specgen.cli import main

tf = pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[1]
ROWS, BATCH, K = 203, 16, 5  # 12 micro-batches a pass; accumulate 5: 2 whole updates, 2 micro-batches left out
SPEC = """\
specgen: 1
name: epochs
inputs: {x: {shape: [4]}}
outputs: {logits: out}
layers:
  - {name: h, op: dense, units: 8, activation: relu}
  - {name: out, op: dense, units: 3}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {kind: sgd, learning_rate: 0.1, momentum: 0.9}}
train:
  batch_size: 16
  epochs: 3
  accumulate: 5
  shuffle_buffer: 1
  seed: 3
  metrics: [accuracy, mean_loss]
data:
  train: {npz: train.npz, features: {x: x}, labels: {label: y}}
  eval: {npz: eval.npz, features: {x: x}, labels: {label: y}}
checkpoint: {dir: run, every_steps: 3}
"""


def write_data(path: Path, rows: int, seed: int) -> None:
    """x[:, 0] is the row index / 256 (exact in float32), so a batch says which rows it holds."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 4)).astype(np.float32)
    x[:, 0] = np.arange(rows) / 256
    y = np.argmax(x @ np.random.default_rng(123).normal(size=(4, 3)) + 0.5 * rng.normal(size=(rows, 3)), axis=1)
    np.savez(path, x=x, y=y.astype(np.int64))


def write_spec(folder: Path, spec: str = SPEC) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_data(folder / "train.npz", ROWS, 1)
    write_data(folder / "eval.npz", 101, 2)
    (folder / "spec.yaml").write_text(spec)
    return folder / "spec.yaml"


def scalars(run: Path, stage: str) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} of a run's TensorBoard events, at full precision."""
    found: dict[str, dict[int, float]] = {}
    for events in sorted((run / "tensorboard" / stage).glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                found.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
    return found


def variables(run: Path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(run / (run / "latest").read_text().strip() / "variables"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def train(spec: Path, *args: str) -> int:
    old = Path.cwd()
    os.chdir(spec.parent)
    try:
        return main(["train", str(spec), "--quiet", *args])
    finally:
        os.chdir(old)


# --- metrics on an empty replica slice -------------------------------------------------------------------------


def _empty_batch(target: str) -> tuple[tf.Tensor, tf.Tensor]:
    """(labels, logits) of 0 rows in the form `target`'s loss reads."""
    if target == "sparse":
        return tf.zeros([0], tf.int64), tf.zeros([0, 3])
    if target == "binary":
        return tf.zeros([0, 1]), tf.zeros([0, 1])
    return tf.zeros([0, 3]), tf.zeros([0, 3])


def test_every_metric_adds_nothing_for_an_empty_slice() -> None:
    """A replica's share of an eval batch may be 0 rows, whose mean loss is NaN: no accumulator may move."""
    from specgen.kinds.losses import REGISTRY as LOSSES
    from specgen.kinds.metrics import REGISTRY
    from specgen.runtime.lib import metrics

    for name, metric_def in REGISTRY.items():
        kind, loss = next((k, d) for k, d in LOSSES.items() if d.target and metric_def.refuse(k, d.target) is None)
        metric = metrics.make(name, loss.target)
        labels, logits = _empty_batch(loss.target)
        metric.update(tf.constant(float("nan")), labels, logits)
        for var in metric.state:
            assert not np.any(var.numpy()), f"{name} ({kind}): {var.name} is {var.numpy()} after 0 rows"


DRIVER = """\
import json, sys
from pathlib import Path
import tensorflow as tf
from specgen.cli import main
spec, sizes = Path(sys.argv[1]), [int(n) for n in sys.argv[2:]]
found = {}
for strategy in ("mirrored", "default"):  # mirrored first: it splits the CPU before TensorFlow starts
    for rows in sizes:
        run = spec.parent / f"run-{strategy}-{rows}"
        code = main(["train", str(spec), "--quiet", "--steps", "2", "--strategy", strategy, "--set",
                     f"data.eval.npz=eval-{rows}.npz", "--set", f"checkpoint.dir={run}"])
        assert code == 0, (strategy, rows)
        values = {}
        for events in (run / "tensorboard" / "eval").glob("events.out.tfevents.*"):
            for event in tf.compat.v1.train.summary_iterator(str(events)):
                for value in event.summary.value:
                    values[value.tag] = float(tf.make_ndarray(value.tensor))
        found[f"{strategy} {rows}"] = values
print(json.dumps(found))
"""


def test_mirrored_eval_equals_one_device_for_every_last_batch(tmp_path: Path) -> None:
    """2 replicas, batch 16: eval sets of 32 (r 0), 33 (r 1: one replica's share of the last batch is empty) and
    1 row (fewer than the replicas); every eval number equals one device's up to float32 summation order."""
    spec = write_spec(tmp_path, SPEC.replace("  accumulate: 5\n", "  distribute: {strategy: mirrored, cpu_devices: 2}\n"))
    sizes = (32, 33, 1)
    for rows in sizes:
        write_data(tmp_path / f"eval-{rows}.npz", rows, 2)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(ROOT), "TF_NUM_INTEROP_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", DRIVER, str(spec), *map(str, sizes)], capture_output=True,
                            text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    for rows in sizes:
        mirrored, one = found[f"mirrored {rows}"], found[f"default {rows}"]
        assert set(mirrored) == {"accuracy", "mean_loss"}, mirrored
        assert np.isfinite(mirrored["mean_loss"]), (rows, mirrored)
        assert mirrored["accuracy"] == one["accuracy"], (rows, mirrored, one)
        assert abs(mirrored["mean_loss"] - one["mean_loss"]) <= 1e-6 * max(1.0, abs(one["mean_loss"])), (rows, mirrored, one)


# --- epochs under accumulation ---------------------------------------------------------------------------------


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each generated step of a run reads: the rows of each micro-batch, and "apply" at each update."""
    from specgen.runtime.placement.default import Distribution

    log: list[Any] = []
    run = Distribution.run

    def recording(self: Distribution, name: str, step: Any, *args: Any) -> Any:
        if name == "accumulate":
            log.append(tuple(int(r) for r in np.rint(args[0]["x"].numpy()[:, 0] * 256)))
        elif name == "apply":
            log.append("apply")
        return run(self, name, step, *args)

    monkeypatch.setattr(Distribution, "run", recording)
    return log


def documented_stream(updates: int, first: int = 0) -> list[Any]:
    """Updates `first`.. of the documented cut, without a shuffle: update u of a pass reads micro-batches
    u*K .. u*K+K-1 of the rows that pass keeps; the 43 rows past its last whole update are left out, at positions
    that rotate (runtime/data.py's _rotated): rows 160-202 in the first pass, 117-159 in the second, ..."""
    per_pass = ROWS // BATCH // K
    left = ROWS - per_pass * K * BATCH
    stream: list[Any] = []
    for update in range(first, first + updates):
        done, in_pass = divmod(update, per_pass)
        start = (ROWS - left * (done + 1)) % ROWS
        rows = [r for r in range(ROWS) if (r - start) % ROWS >= left]
        stream += [tuple(rows[m * BATCH:(m + 1) * BATCH]) for m in range(in_pass * K, in_pass * K + K)] + ["apply"]
    return stream


def reference(spec: Path, updates: int) -> tuple[list[float], dict[str, np.ndarray]]:
    """Keras' SGD over the documented stream from the run's step-0 weights: each epoch's mean train loss, weights."""
    keras = pytest.importorskip("keras")
    data = np.load(spec.parent / "train.npz")
    start = variables(spec.parent / "run0")
    weights = [tf.Variable(start[p]) for p in ("h/kernel", "h/bias", "out/kernel", "out/bias")]
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    loss_of = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    losses: list[float] = []
    for update in range(updates):
        grads = None
        for rows in [r for r in documented_stream(1, update) if r != "apply"]:
            x, y = data["x"][list(rows)], data["y"][list(rows)]
            with tf.GradientTape() as tape:
                loss = loss_of(y, tf.nn.relu(x @ weights[0] + weights[1]) @ weights[2] + weights[3])
            g = tape.gradient(loss, weights)
            grads = g if grads is None else [a + b for a, b in zip(grads, g, strict=True)]
            losses.append(float(loss))
        optimizer.apply([g / K for g in grads], weights)
    per_epoch = 2 * K  # micro-batches an epoch reads
    means = [float(np.mean(losses[i:i + per_epoch])) for i in range(0, len(losses), per_epoch)]
    return means, dict(zip(("h/kernel", "h/bias", "out/kernel", "out/bias"), (w.numpy() for w in weights), strict=True))


def test_an_epoch_is_one_pass_cut_into_whole_updates(tmp_path: Path, recorded: list[Any]) -> None:
    """203 rows, batch 16, accumulate 5: 3 epochs are 6 updates, each reading 5 micro-batches of one pass (rows
    160-202 left out of the first, other rows of the next); the per-epoch numbers and weights are a reference
    loop's; a resume mid-pass is bitwise."""
    spec = write_spec(tmp_path)
    assert train(spec, "--epochs", "0", "--set", "checkpoint.dir=run0") == 0
    recorded.clear()
    assert train(spec) == 0
    assert recorded == documented_stream(6)
    means, weights = reference(spec, 6)
    logged = scalars(tmp_path / "run", "train")["mean_loss"]
    assert [logged[step] for step in (2, 4, 6)] == pytest.approx(means, abs=1e-6)
    final = variables(tmp_path / "run")
    for path, value in weights.items():
        np.testing.assert_allclose(final[path], value, atol=1e-6, err_msg=path)
    # Stopped at step 3 (mid-pass: the second pass's first update), then resumed: the same stream, the same bits.
    assert train(spec, "--steps", "3", "--set", "checkpoint.dir=run2") == 0
    recorded.clear()
    assert train(spec, "--resume", "--steps", "3", "--set", "checkpoint.dir=run2") == 0
    assert recorded == documented_stream(3, first=3)
    resumed = variables(tmp_path / "run2")
    assert resumed.keys() == final.keys()
    for path, value in final.items():
        assert np.array_equal(resumed[path], value), path


def test_shuffled_updates_and_epochs_never_read_a_row_twice(tmp_path: Path, recorded: list[Any]) -> None:
    spec = write_spec(tmp_path, SPEC.replace("shuffle_buffer: 1", "shuffle_buffer: 64").replace(
        "  eval: {npz: eval.npz, features: {x: x}, labels: {label: y}}\n", ""))
    assert train(spec, "--epochs", "2") == 0
    updates = [[]]  # the rows of each update, in order
    for entry in recorded:
        if entry == "apply":
            updates.append([])
        else:
            updates[-1] += entry
    updates.pop()
    assert [len(u) for u in updates] == [K * BATCH] * 4
    for epoch in (updates[0:2], updates[2:4]):
        rows = [r for update in epoch for r in update]
        assert len(set(rows)) == len(rows), "a row read twice in one epoch"


def test_a_pass_without_a_whole_update_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """accumulate 13 x batch 16 = 208 > 203 rows: 0 updates a pass. By --set the line names the override."""
    spec = write_spec(tmp_path)
    assert train(spec, "--set", "train.accumulate=13") != 0
    err = [line for line in capsys.readouterr().err.splitlines() if ": error: " in line]
    assert err == ["--set train.accumulate=13: error: train.accumulate 13 x train.batch_size 16 = 208 examples per "
                   "update, more than the 203 training examples: an epoch (one pass) holds no whole update; lower "
                   "train.accumulate or train.batch_size"]
    spec.write_text(SPEC.replace("accumulate: 5", "accumulate: 13"))
    assert train(spec) != 0
    assert capsys.readouterr().err.count("spec.yaml:13:15: error: train.accumulate 13 x train.batch_size 16") == 1


# --- mean_loss without data labels ------------------------------------------------------------------------------

DQN = ROOT / "tests" / "golden" / "specs" / "targets_soft_dqn.yaml"


def test_mean_loss_beside_computed_targets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The DQN's TD loss reads no data labels: mean_loss is its loss; accuracy, which needs labels, is refused at
    the override that listed it."""
    assert main(["validate", str(DQN), "--set", "train.metrics=[mean_loss, accuracy]"]) != 0
    err = capsys.readouterr().err
    assert "--set train.metrics=[mean_loss, accuracy]: error: metric 'accuracy' reads the first loss term with " \
           "labels from the data section, and no term has them" in err
    run = tmp_path / "run"
    assert main(["train", str(DQN), "--quiet", "--steps", "1", "--set", "train.metrics=[mean_loss]", "--set",
                 f"checkpoint.dir={run}"]) == 0
    logged = scalars(run, "train")
    assert logged["mean_loss"][1] == pytest.approx(logged["loss"][1], rel=1e-6)  # one batch: its loss
