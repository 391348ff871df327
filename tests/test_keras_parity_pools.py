"""max_pool, avg_pool and depthwise_conv2d against Keras' own layers: same configuration, same weights, forward
and gradients within 1e-5 (tests/keras_parity.py). SAME padding on odd sizes pads asymmetrically, and Keras'
average leaves the padded cells out of its count: both are compared here. The ONNX side is tests/test_op_parity.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

keras = pytest.importorskip("keras")

from keras_parity import assert_close, compare  # noqa: E402

IMAGE = [9, 7, 3]  # odd height and width: strided SAME windows pad one side more than the other

# case -> (Keras layer factory, spec layer); Keras layers are built lazily (no TensorFlow at collection).
CASES: dict[str, tuple[Callable[[], Any], dict[str, Any]]] = {
    "max_pool_valid": (lambda: keras.layers.MaxPooling2D(2), {"op": "max_pool", "size": 2}),
    "max_pool_same_stride2": (lambda: keras.layers.MaxPooling2D(3, strides=2, padding="same"),
                              {"op": "max_pool", "size": 3, "strides": 2, "padding": "same"}),
    "max_pool_rect": (lambda: keras.layers.MaxPooling2D((2, 3), strides=(2, 1)),
                      {"op": "max_pool", "size": [2, 3], "strides": [2, 1]}),
    "avg_pool_valid": (lambda: keras.layers.AveragePooling2D(2), {"op": "avg_pool", "size": 2}),
    "avg_pool_same_stride2": (lambda: keras.layers.AveragePooling2D(3, strides=2, padding="same"),
                              {"op": "avg_pool", "size": 3, "strides": 2, "padding": "same"}),
    "avg_pool_same_rect_stride1": (lambda: keras.layers.AveragePooling2D((2, 3), strides=1, padding="same"),
                                   {"op": "avg_pool", "size": [2, 3], "strides": 1, "padding": "same"}),
    "depthwise_same_multiplier2_stride2": (
        lambda: keras.layers.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2, activation="relu"),
        {"op": "depthwise_conv2d", "kernel": 3, "strides": 2, "padding": "same", "depth_multiplier": 2,
         "activation": "relu"}),
    "depthwise_valid_rect_no_bias": (
        lambda: keras.layers.DepthwiseConv2D((2, 3), use_bias=False),
        {"op": "depthwise_conv2d", "kernel": [2, 3], "use_bias": False}),
    "depthwise_same_dilated": (
        lambda: keras.layers.DepthwiseConv2D(3, padding="same", dilation_rate=2),
        {"op": "depthwise_conv2d", "kernel": 3, "padding": "same", "dilation": 2}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_keras(case: str, tmp_path: Path) -> None:
    make, layer = CASES[case]
    diffs = compare(make(), [{"name": "l", **layer}], IMAGE, tmp_path)
    print(case, diffs)  # the measured differences, shown with `pytest -s`
    assert "grad input" in diffs
    if layer["op"] == "depthwise_conv2d":
        assert "grad l/kernel" in diffs
    assert_close(diffs)
