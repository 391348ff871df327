"""Every loss kind's runtime function against Keras' loss (or TensorFlow's regularizer) on the same values.

CASES is keyed by loss kind; tests/test_loss_registry.py fails for a registered kind without a case.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from specgen.kinds.losses import REGISTRY
from specgen.kinds.pointers import resolve

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

BATCH, CLASSES = 16, 4
TOLERANCE = 1e-6  # float32 sums over 16 x 4 values: a few ulps of values near 1


def _logits(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(scale=2.0, size=(BATCH, CLASSES)).astype(np.float32)


def _indices() -> np.ndarray:
    return np.random.default_rng(1).integers(0, CLASSES, BATCH).astype(np.int64)


def _probabilities() -> np.ndarray:
    raw = np.random.default_rng(2).uniform(size=(BATCH, CLASSES)).astype(np.float32)
    return raw / raw.sum(axis=-1, keepdims=True)


def _binary() -> np.ndarray:
    return (np.random.default_rng(3).uniform(size=(BATCH, CLASSES)) > 0.5).astype(np.float32)


def _weights() -> list[Any]:
    rng = np.random.default_rng(4)
    return [tf.Variable(rng.normal(size=shape).astype(np.float32)) for shape in ((3, 4), (4,))]


# kind -> (the runtime call's arguments, the spec's keyword arguments, the reference value)
Case = tuple[Callable[[], tuple[Any, ...]], dict[str, float], Callable[[tuple[Any, ...]], float]]


def _data(labels: Callable[[], np.ndarray]) -> Callable[[], tuple[Any, ...]]:
    return lambda: (tf.constant(labels()), tf.constant(_logits()))


CASES: dict[str, Case] = {
    "sparse_softmax_cross_entropy": (_data(_indices), {}, lambda a: keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)(*a)),
    "softmax_cross_entropy": (_data(_probabilities), {}, lambda a: keras.losses.CategoricalCrossentropy(
        from_logits=True)(*a)),
    "sigmoid_cross_entropy": (_data(_binary), {}, lambda a: keras.losses.BinaryCrossentropy(from_logits=True)(*a)),
    "mean_squared_error": (_data(_probabilities), {}, lambda a: keras.losses.MeanSquaredError()(*a)),
    "mean_absolute_error": (_data(_probabilities), {}, lambda a: keras.losses.MeanAbsoluteError()(*a)),
    "huber": (_data(_probabilities), {"delta": 0.7}, lambda a: keras.losses.Huber(delta=0.7)(*a)),
    "l2": (lambda: (_weights(),), {}, lambda a: sum(float(tf.nn.l2_loss(w)) for w in a[0])),
    "l1": (lambda: (_weights(),), {}, lambda a: sum(float(tf.reduce_sum(tf.abs(w))) for w in a[0])),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_loss_matches_its_reference(kind: str) -> None:
    arguments, keywords, reference = CASES[kind]
    values = arguments()
    actual = float(resolve(REGISTRY[kind].runtime)(*values, **keywords))
    expected = float(reference(values))
    assert abs(actual - expected) <= TOLERANCE * max(1.0, abs(expected)), f"{kind}: {actual!r} vs {expected!r}"
    assert expected != 0.0, f"{kind}: a zero reference would not tell a wrong formula from a right one"


def test_every_case_names_a_registered_loss() -> None:
    assert set(CASES) <= set(REGISTRY), f"CASES name unregistered loss kind(s) {sorted(set(CASES) - set(REGISTRY))}"
