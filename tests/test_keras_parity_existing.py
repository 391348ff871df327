"""The harness itself, on ops Keras has had all along (and a check that it can fail)."""

from __future__ import annotations

from pathlib import Path

import pytest

keras = pytest.importorskip("keras")

from keras_parity import assert_close, compare  # noqa: E402


def test_conv2d_matches_keras(tmp_path: Path) -> None:
    diffs = compare(keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
                    [{"name": "c", "op": "conv2d", "filters": 4, "kernel": 3, "padding": "same", "activation": "relu"}],
                    [9, 7, 3], tmp_path)
    assert set(diffs) == {"forward", "grad c/kernel", "grad c/bias", "grad input"}
    assert_close(diffs)


def test_batch_norm_in_training_matches_keras(tmp_path: Path) -> None:
    diffs = compare(keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-3),
                    [{"name": "bn", "op": "batch_norm", "momentum": 0.9, "epsilon": 1e-3}], [5, 4], tmp_path,
                    training=True)
    assert_close(diffs)


def test_the_harness_fails_on_a_different_configuration(tmp_path: Path) -> None:
    diffs = compare(keras.layers.Dense(5, activation="tanh"), [{"name": "fc", "op": "dense", "units": 5}], [6],
                    tmp_path)
    assert diffs["forward"] > 1e-3
