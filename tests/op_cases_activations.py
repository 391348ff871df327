"""TF-vs-onnxruntime parity cases of pad, crop and the activations of issue 10 (tests/test_op_parity.py).

Layout-sensitive ops (pad, crop, softmax as a conv's activation) run after a conv, where the
ONNX tensor is held channels-first: the axes they touch must be the held ones. Image sizes are odd
so that swapped height and width, or top and bottom, show up as a shape or value mismatch.
"""

from __future__ import annotations

from typing import Any

IMAGE = {"image": {"shape": [9, 7, 3]}}
VECTOR = {"x": {"shape": [12]}}
NEW_ACTIVATIONS = ("relu6", "elu", "selu", "softplus", "swish", "silu", "hard_sigmoid", "hard_swish", "hard_silu")


def conv(name: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "op": "conv2d", "filters": 4, "kernel": 3, "padding": "same", **params}


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    # pad / crop on the channels-last input, after a conv (held channels-first), and between convs
    "pad_int": (IMAGE, [{"name": "p", "op": "pad", "padding": 1}]),
    # ResNetV2's stem: zero padding then a max pool over values that may all be negative (no relu between).
    # onnxruntime's PadFusion would turn the zeros into MaxPool's -inf pads; max_pool guards against it.
    # Biased negative so that border windows are all negative (the case the fusion gets wrong).
    "pad_then_max_pool_after_conv": (IMAGE, [conv("c", bias_init={"kind": "constant", "value": -4.0}),
                                             {"name": "p", "op": "pad", "padding": 1},
                                             {"name": "m", "op": "max_pool", "size": 3, "strides": 2}]),
    "pad_dropout_max_pool": (IMAGE, [{"name": "p", "op": "pad", "padding": 2}, {"name": "r", "op": "dropout", "rate": 0.1},
                                     {"name": "m", "op": "max_pool", "size": 3, "strides": 2}]),
    "pad_pairs_after_conv": (IMAGE, [conv("c"), {"name": "p", "op": "pad", "padding": [[1, 2], [0, 3]]}]),
    "pad_hw_between_convs": (IMAGE, [conv("c"), {"name": "p", "op": "pad", "padding": [2, 1]},
                                     conv("d", padding="valid")]),
    "crop_int": (IMAGE, [{"name": "k", "op": "crop", "cropping": 1}]),
    "crop_pairs_after_conv": (IMAGE, [conv("c"), {"name": "k", "op": "crop", "cropping": [[2, 1], [0, 3]]}]),
    "crop_hw_between_convs": (IMAGE, [conv("c"), {"name": "k", "op": "crop", "cropping": [1, 2]},
                                      conv("d", kernel=1)]),
    "pad_then_crop_after_conv": (IMAGE, [conv("c"), {"name": "p", "op": "pad", "padding": [[3, 0], [1, 2]]},
                                         {"name": "k", "op": "crop", "cropping": [[0, 2], [3, 1]]}]),
    # activations as layers (element-wise: on vectors and on a held channels-first tensor)
    **{act: (VECTOR, [{"name": "a", "op": act}]) for act in NEW_ACTIVATIONS},
    **{f"{act}_after_conv": (IMAGE, [conv("c"), {"name": "a", "op": act}]) for act in NEW_ACTIVATIONS},
    "relu_max_value": (VECTOR, [{"name": "fc", "op": "dense", "units": 8},
                                {"name": "a", "op": "relu", "max_value": 0.5}]),
    "relu_max_value_6_after_conv": (IMAGE, [conv("c"), {"name": "a", "op": "relu", "max_value": 6}]),
    "elu_alpha": (VECTOR, [{"name": "a", "op": "elu", "alpha": 0.3}]),
    # the activation-value form on a conv (held channels-first): softmax must take the channel axis
    **{f"conv2d_{act}": (IMAGE, [conv("c", activation=act)]) for act in (*NEW_ACTIVATIONS, "softmax")},
    "depthwise_conv2d_softmax": (IMAGE, [{"name": "d", "op": "depthwise_conv2d", "kernel": 3,
                                          "activation": "softmax"}]),
}
