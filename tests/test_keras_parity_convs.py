"""separable_conv2d, grouped conv2d, conv2d_transpose and upsample against Keras' own layers:
same configuration, same weights, forward and gradients within 1e-5 (tests/keras_parity.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

keras = pytest.importorskip("keras")

from keras_parity import assert_close, compare  # noqa: E402

IMAGE = [9, 7, 3]  # odd sizes: asymmetric SAME padding, odd transposed-conv outputs
IMAGE6 = [7, 5, 6]  # channels that 2 and 3 divide, for groups

# case -> (Keras layer factory, spec layer, input shape); the Keras layers are built lazily so
# that collecting the tests imports no TensorFlow.
CASES: dict[str, tuple[Callable[[], Any], dict[str, Any], list[int]]] = {
    "separable_same_multiplier2": (
        lambda: keras.layers.SeparableConv2D(5, 3, padding="same", depth_multiplier=2, activation="relu"),
        {"op": "separable_conv2d", "filters": 5, "kernel": 3, "padding": "same", "depth_multiplier": 2,
         "activation": "relu"}, IMAGE),
    "separable_valid_stride2": (
        lambda: keras.layers.SeparableConv2D(4, (2, 3), strides=2),
        {"op": "separable_conv2d", "filters": 4, "kernel": [2, 3], "strides": 2}, IMAGE),
    "separable_dilated_no_bias": (
        lambda: keras.layers.SeparableConv2D(4, 3, padding="same", dilation_rate=2, use_bias=False),
        {"op": "separable_conv2d", "filters": 4, "kernel": 3, "padding": "same", "dilation": 2, "use_bias": False},
        IMAGE),
    "conv2d_groups2_same": (
        lambda: keras.layers.Conv2D(4, 3, padding="same", groups=2),
        {"op": "conv2d", "filters": 4, "kernel": 3, "padding": "same", "groups": 2}, IMAGE6),
    "conv2d_groups3_valid_stride2": (
        lambda: keras.layers.Conv2D(6, 3, strides=2, groups=3, activation="relu"),
        {"op": "conv2d", "filters": 6, "kernel": 3, "strides": 2, "groups": 3, "activation": "relu"}, IMAGE6),
    "conv2d_groups2_dilated": (
        lambda: keras.layers.Conv2D(2, (3, 2), dilation_rate=2, groups=2, padding="same"),
        {"op": "conv2d", "filters": 2, "kernel": [3, 2], "dilation": 2, "groups": 2, "padding": "same"}, IMAGE6),
    "conv2d_dilated": (  # tf.nn.conv2d has no CPU gradient for dilation > 1: the template must avoid it
        lambda: keras.layers.Conv2D(3, 3, dilation_rate=2),
        {"op": "conv2d", "filters": 3, "kernel": 3, "dilation": 2}, IMAGE),
    "conv2d_transpose_same_stride2": (
        lambda: keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same"),
        {"op": "conv2d_transpose", "filters": 4, "kernel": 3, "strides": 2, "padding": "same"}, IMAGE),
    "conv2d_transpose_valid_stride2_relu": (
        lambda: keras.layers.Conv2DTranspose(4, 3, strides=2, activation="relu"),
        {"op": "conv2d_transpose", "filters": 4, "kernel": 3, "strides": 2, "activation": "relu"}, IMAGE),
    "conv2d_transpose_same_even_kernel": (
        lambda: keras.layers.Conv2DTranspose(3, 4, strides=(2, 3), padding="same"),
        {"op": "conv2d_transpose", "filters": 3, "kernel": 4, "strides": [2, 3], "padding": "same"}, IMAGE),
    "conv2d_transpose_same_output_padding": (
        lambda: keras.layers.Conv2DTranspose(4, (4, 3), strides=(3, 2), padding="same", output_padding=(1, 0)),
        {"op": "conv2d_transpose", "filters": 4, "kernel": [4, 3], "strides": [3, 2], "padding": "same",
         "output_padding": [1, 0]}, IMAGE),
    "conv2d_transpose_valid_output_padding": (
        lambda: keras.layers.Conv2DTranspose(2, 3, strides=(2, 3), output_padding=(1, 2), use_bias=False),
        {"op": "conv2d_transpose", "filters": 2, "kernel": 3, "strides": [2, 3], "output_padding": [1, 2],
         "use_bias": False}, IMAGE),
    "conv2d_transpose_stride_above_kernel": (
        lambda: keras.layers.Conv2DTranspose(2, 1, strides=3),
        {"op": "conv2d_transpose", "filters": 2, "kernel": 1, "strides": 3}, IMAGE),
    "upsample_nearest": (
        lambda: keras.layers.UpSampling2D((2, 3)),
        {"op": "upsample", "size": [2, 3]}, IMAGE),
    "upsample_bilinear": (
        lambda: keras.layers.UpSampling2D(2, interpolation="bilinear"),
        {"op": "upsample", "size": 2, "interpolation": "bilinear"}, IMAGE),
    "upsample_bilinear_rect": (
        lambda: keras.layers.UpSampling2D((3, 2), interpolation="bilinear"),
        {"op": "upsample", "size": [3, 2], "interpolation": "bilinear"}, IMAGE),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_keras(case: str, tmp_path: Path) -> None:
    make, layer, shape = CASES[case]
    diffs = compare(make(), [{"name": "l", **layer}], shape, tmp_path)
    print(case, diffs)  # the measured differences, shown with `pytest -s`
    assert "grad input" in diffs
    assert_close(diffs)
