"""TF-vs-onnxruntime parity cases of conv1d, max_pool1d, avg_pool1d, the global pools over time and
named dynamic dimensions (`shape: [seq, 6]`, `[height, width, 3]`: sized by runtime/parity.py's
SYMBOL_SIZE, 11, odd so that strided SAME windows pad asymmetrically). Picked up by tests/test_op_parity.py.
"""

from __future__ import annotations

from typing import Any

SEQ = {"x": {"shape": [9, 6]}}  # 9 steps: odd, asymmetric SAME padding; 6 channels: groups 2 and 3
DYN = {"x": {"shape": ["seq", 6]}}
IMAGE = {"image": {"shape": ["height", "width", 3]}}


def c1(**params: Any) -> dict[str, Any]:
    return {"name": "c", "op": "conv1d", "filters": 4, "kernel": 3, **params}


def pool(op: str, **params: Any) -> dict[str, Any]:
    return {"name": "p", "op": op, **params}


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "conv1d_valid": (SEQ, [c1()]),
    "conv1d_same_stride2": (SEQ, [c1(padding="same", strides=2, activation="relu")]),
    "conv1d_causal_dilated": (SEQ, [c1(padding="causal", dilation=2)]),
    "conv1d_groups3_no_bias": (SEQ, [c1(filters=6, groups=3, padding="same", use_bias=False)]),
    "max_pool1d_valid": (SEQ, [pool("max_pool1d")]),
    "max_pool1d_same_stride2": (SEQ, [pool("max_pool1d", size=3, strides=2, padding="same")]),
    "avg_pool1d_same": (SEQ, [pool("avg_pool1d", size=3, strides=2, padding="same")]),
    "avg_pool1d_valid_stride1": (SEQ, [pool("avg_pool1d", size=3, strides=1)]),
    "global_avg_pool_time": (SEQ, [c1(), {"name": "g", "op": "global_avg_pool"}]),
    "global_max_pool_time_keepdims": (SEQ, [c1(), {"name": "g", "op": "global_max_pool", "keepdims": True}]),
    "dyn_conv1d_causal_residual": (DYN, [c1(filters=6, padding="causal", input="x"),
                                         {"name": "sum", "op": "add", "inputs": ["x", "c"]},
                                         {"name": "ln", "op": "layer_norm"}, {"name": "fc", "op": "dense", "units": 3}]),
    "dyn_conv1d_same_stride2_pools": (DYN, [c1(padding="same", strides=2), pool("max_pool1d", size=3, padding="same"),
                                            pool("avg_pool1d", padding="valid", name="q"),
                                            {"name": "g", "op": "global_max_pool"}]),
    "dyn_conv2d_same_stride2": (IMAGE, [{"name": "c", "op": "conv2d", "filters": 4, "kernel": 3, "strides": 2,
                                         "padding": "same"}, {"name": "bn", "op": "batch_norm"}]),
    "dyn_conv2d_valid_pools_upsample": (IMAGE, [{"name": "c", "op": "conv2d", "filters": 4, "kernel": 3},
                                                {"name": "p", "op": "max_pool", "size": 2, "padding": "same"},
                                                {"name": "a", "op": "avg_pool", "size": 3, "strides": 2},
                                                {"name": "u", "op": "upsample", "size": 2,
                                                 "interpolation": "bilinear"},
                                                {"name": "g", "op": "global_avg_pool"}]),
    "dyn_depthwise_separable": (IMAGE, [{"name": "d", "op": "depthwise_conv2d", "kernel": 3, "strides": 2,
                                         "padding": "same"},
                                        {"name": "s", "op": "separable_conv2d", "filters": 5, "kernel": 3},
                                        {"name": "u", "op": "upsample", "size": [2, 3]}]),
}
