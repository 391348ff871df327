"""`kind: focal` against keras.losses.CategoricalFocalCrossentropy(from_logits=True), alone and in a train step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_training_numerics import BATCH, CLASSES, build, data, spec_doc

from specgen.runtime.lib import losses

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

TOLERANCE = 1e-6  # float32 means over 16 x 4 terms of size ~1; same operations as Keras


def _values(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=3.0, size=(16, 4)).astype(np.float32)
    labels = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 16)]
    return labels, logits


@pytest.mark.parametrize(("alpha", "gamma"), [(0.25, 2.0), (1.0, 0.0), (0.6, 4.5)])
def test_focal_matches_keras(alpha: float, gamma: float) -> None:
    labels, logits = _values(seed=int(gamma * 10))
    logits[0] = [40.0, -40.0, 0.0, 0.0]  # a saturated softmax: Keras' clipping at 1e-7 decides this row
    expected = float(keras.losses.CategoricalFocalCrossentropy(alpha=alpha, gamma=gamma, from_logits=True)(
        labels, logits))
    actual = float(losses.focal(tf.constant(labels), tf.constant(logits), alpha=alpha, gamma=gamma))
    assert abs(actual - expected) <= TOLERANCE * max(1.0, expected), f"focal {actual!r} vs Keras {expected!r}"
    assert expected > 0


def test_focal_term_in_the_generated_train_step(tmp_path: Path) -> None:
    loss = {"kind": "focal", "logits": "logits", "labels": "label", "alpha": 0.5, "gamma": 1.5}
    doc = spec_doc("focal", {"all": {"kind": "sgd", "learning_rate": 0.1}}, loss=loss,
                   train={"metrics": ["accuracy"]})
    built = build(tmp_path, doc)
    train_py = (tmp_path / "code" / "train.py").read_text()
    assert "losses.focal(labels[LABEL], output, alpha=0.5, gamma=1.5)" in train_py
    x, indices = data(BATCH, seed=3)
    onehot = np.eye(CLASSES, dtype=np.float32)[indices]
    logits = built.model({"x": tf.constant(x)}, training=True)["logits"]
    expected = float(keras.losses.CategoricalFocalCrossentropy(alpha=0.5, gamma=1.5, from_logits=True)(onehot, logits))
    loss_value = float(built.trainer.train_step({"x": tf.constant(x)}, {"label": tf.constant(onehot)},
                                                tf.constant([0, 0], tf.int64)))
    assert abs(loss_value - expected) <= TOLERANCE * max(1.0, expected), f"{loss_value!r} vs Keras {expected!r}"
