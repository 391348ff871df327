"""train.precision: mixed_float16's dynamic loss scaling, in the generated step: a forced overflow skips the whole
update (two optimizers, accumulation 2, clip, EMA), halves the scale and counts the skip; Keras' growth rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from precision_train_cases import build, snapshot, spec_text, train

tf = pytest.importorskip("tensorflow")

# A loss weight so large that the scaled loss's gradient overflows float16 (largest finite 65504) at the logits
# on every micro-batch, while the float32 loss itself stays finite (2.3 * 1e30 * 2**15 < 3.4e38).
HUGE = 1e30
# State that moves in the forward pass, as under Keras: batch-norm moving statistics (collection `update`).
FORWARD_STATE = ("bn1/moving_mean", "bn1/moving_variance")


@pytest.fixture(scope="module")
def overflowed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    model, trainer = build(tmp_path_factory.mktemp("overflow"), spec_text("mixed_float16", accumulate=2,
                                                                           loss_weight=HUGE))
    before = snapshot(model, trainer)
    losses = train(trainer, 4, accumulate=2)  # two updates of two micro-batches each
    return {"before": before, "after": snapshot(model, trainer), "losses": losses, "trainer": trainer}


def test_overflow_skips_the_update_and_halves_the_scale_each_time(overflowed: dict[str, Any]) -> None:
    after = overflowed["after"]
    assert np.isfinite(overflowed["losses"]).all()
    assert after["loss_scale/scale"] == 2.0**13  # 2**15 halved twice
    assert after["loss_scale/skipped_updates"] == 2
    assert after["loss_scale/good_steps"] == 0
    assert {k: float(v) for k, v in overflowed["trainer"].progress_values().items()} == {
        "loss_scale": 8192.0, "skipped_updates": 2.0}


def test_nothing_moves_on_a_skipped_update(overflowed: dict[str, Any]) -> None:
    before, after = overflowed["before"], overflowed["after"]
    moved = sorted(k for k in before if not np.array_equal(before[k], after[k]))
    # Only the loss scale state and the forward pass's batch-norm statistics; no weight, slot (SGD momentum,
    # Adam m and v), EMA shadow, learning rate, iteration count, step counter or accumulator.
    assert moved == sorted([*FORWARD_STATE, "loss_scale/scale", "loss_scale/skipped_updates"])
    assert after["global_step"] == 0 and after["accumulators/micro_batches"] == 0


def test_the_scale_doubles_after_the_growth_interval_of_finite_updates() -> None:
    from specgen.runtime.lib import precision

    scale = tf.Variable(precision.INITIAL_SCALE)
    good, skipped = tf.Variable(0, dtype=tf.int64), tf.Variable(0, dtype=tf.int64)
    seen = []
    for finite in (True, True, False, True, True, True, True):
        precision.adjust(tf.constant(finite), scale, good, skipped, growth_interval=3)
        seen.append((float(scale.numpy()), int(good.numpy())))
    assert seen == [(32768.0, 1), (32768.0, 2), (16384.0, 0), (16384.0, 1), (16384.0, 2), (32768.0, 0),
                    (32768.0, 1)]
    assert int(skipped.numpy()) == 1
    assert precision.GROWTH_INTERVAL == 2000  # Keras' LossScaleOptimizer default


def test_unscaling_checks_every_gradient_of_every_optimizer() -> None:
    from specgen.runtime.lib import precision

    scale = tf.Variable(4.0)
    sparse = tf.IndexedSlices(tf.constant([[8.0, 4.0]]), tf.constant([1]), tf.constant([3, 2]))
    unscaled, finite = precision.unscale([tf.constant([2.0, 6.0]), sparse], scale)
    assert bool(finite) and unscaled[0].numpy().tolist() == [0.5, 1.5] and unscaled[1].values.numpy().tolist() == [[2.0, 1.0]]
    _, finite = precision.unscale([tf.constant([2.0]), tf.constant([np.inf])], scale)
    assert not bool(finite)



FORWARD_OVERFLOW = """\
specgen: 1
name: big
inputs: {x: {shape: [4]}}
outputs: {logits: d2}
layers:
  - {name: d1, op: dense, units: 8, input: x, kernel_init: {kind: random_normal, stddev: 3000.0}}
  - {name: d2, op: dense, units: 3, kernel_init: {kind: random_normal, stddev: 0.001}}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers: {all: {variables: "*", kind: sgd, learning_rate: 0.0001}}
train: {batch_size: 4, precision: mixed_float16}
data:
  train: {npz: d.npz, features: {x: x}, labels: {label: y}}
checkpoint: {dir: run, every_steps: 1, keep: 1}
"""


def test_a_forward_overflow_in_float16_gets_advice_that_can_help(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Inputs of std 10 through a kernel of std 3000: activations of ~1e5 pass float16's 65504 in the forward pass,
    so the loss is NaN at step 0 whatever the learning rate (loss scaling covers gradients only). Old: 'Lower the
    learning rate, add train.clip, or check the data'."""
    from cli_helpers import run_cli

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=(rng.standard_normal((64, 4)) * 10).astype(np.float32), y=rng.integers(0, 3, 64))
    (tmp_path / "big.yaml").write_text(FORWARD_OVERFLOW)
    code, _, err = run_cli(["train", "big.yaml", "--steps", "3"], capsys, tmp_path)
    assert code == 1, err
    assert "The forward pass overflowed float16 (train.precision mixed_float16)" in err
    assert "Train with precision mixed_bfloat16 (float32's range) or float32" in err
    assert "Lower the learning rate" not in err
