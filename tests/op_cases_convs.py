"""TF-vs-onnxruntime parity cases of separable_conv2d, grouped conv2d, conv2d_transpose and upsample.

Odd image sizes (asymmetric SAME padding, odd transposed-conv outputs), both paddings, strides 2,
dilation where the op has it; picked up by tests/test_op_parity.py.
"""

from __future__ import annotations

from typing import Any

IMAGE = {"image": {"shape": [9, 7, 3]}}
IMAGE6 = {"image": {"shape": [7, 5, 6]}}  # channels that 2 and 3 divide, for groups


def sep(**params: Any) -> dict[str, Any]:
    return {"name": "s", "op": "separable_conv2d", "filters": 5, "kernel": 3, **params}


def grouped(**params: Any) -> dict[str, Any]:
    return {"name": "g", "op": "conv2d", "filters": 4, "kernel": 3, "groups": 2, **params}


def tconv(**params: Any) -> dict[str, Any]:
    return {"name": "t", "op": "conv2d_transpose", "filters": 4, "kernel": 3, **params}


def up(**params: Any) -> dict[str, Any]:
    return {"name": "u", "op": "upsample", **params}


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "separable_conv2d_same": (IMAGE, [sep(padding="same", depth_multiplier=2)]),
    "separable_conv2d_valid_stride2": (IMAGE, [sep(strides=2, activation="relu")]),
    "separable_conv2d_dilated": (IMAGE, [sep(padding="same", dilation=2, kernel=[3, 2])]),
    "separable_conv2d_no_bias": (IMAGE, [sep(use_bias=False, kernel=[2, 3], strides=2, padding="same")]),
    "conv2d_groups_same": (IMAGE6, [grouped(padding="same")]),
    "conv2d_groups3_valid_stride2": (IMAGE6, [grouped(groups=3, filters=6, strides=2, activation="relu")]),
    "conv2d_groups_dilated_no_bias": (IMAGE6, [grouped(dilation=2, padding="same", use_bias=False)]),
    "conv2d_transpose_same_stride2": (IMAGE, [tconv(padding="same", strides=2)]),
    "conv2d_transpose_valid_stride2": (IMAGE, [tconv(strides=2, activation="relu")]),
    "conv2d_transpose_valid": (IMAGE, [tconv(kernel=[2, 3])]),
    "conv2d_transpose_same_even_kernel": (IMAGE, [tconv(padding="same", kernel=4, strides=[2, 3])]),
    "conv2d_transpose_same_output_padding": (IMAGE, [tconv(padding="same", kernel=[4, 3], strides=[3, 2],
                                                           output_padding=[1, 0])]),
    "conv2d_transpose_valid_output_padding": (IMAGE, [tconv(strides=[2, 3], output_padding=[1, 2],
                                                            use_bias=False)]),
    "conv2d_transpose_small_kernel": (IMAGE, [tconv(kernel=1, strides=3, padding="same")]),
    "upsample_nearest": (IMAGE, [up(size=[2, 3])]),
    "upsample_bilinear": (IMAGE, [up(size=2, interpolation="bilinear")]),
    "upsample_bilinear_after_conv": (IMAGE, [{"name": "c", "op": "conv2d", "filters": 4, "kernel": 3},
                                             up(size=[3, 2], interpolation="bilinear")]),
}
