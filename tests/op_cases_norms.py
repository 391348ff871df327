"""Parity cases (TensorFlow vs onnxruntime) for the batch-norm options, scale/rescale/normalize,
broadcasting merges and keepdims pools; tests/test_op_parity.py picks up `CASES`.

Layout-sensitive ops run after a conv too, where ONNX holds the tensor channels-first.
"""

from __future__ import annotations

from typing import Any

IMAGE = {"image": {"shape": [9, 7, 3]}}  # odd sizes, as in test_op_parity
VECTOR = {"x": {"shape": [12]}}


def conv(name: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "op": "conv2d", "filters": 4, "kernel": 3, "padding": "same", **params}


def squeeze_excite(*, gate_op: str = "dense", pool: str = "global_avg_pool") -> list[dict[str, Any]]:
    """conv -> global pool (keepdims) -> 1x1 projection -> sigmoid -> multiply with the conv output."""
    gate = ({"name": "fc", "op": "dense", "units": 4} if gate_op == "dense"
            else {"name": "fc", "op": "conv2d", "filters": 4, "kernel": 1})
    return [conv("c"), {"name": "p", "op": pool, "keepdims": True}, {**gate, "input": "p"},
            {"name": "gate", "op": "sigmoid"}, {"name": "se", "op": "multiply", "inputs": ["c", "gate"]}]


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    # batch_norm's center/scale/activation; after a conv (channels-first, folded on export) and alone
    "batch_norm_no_scale": (IMAGE, [conv("c"), {"name": "bn", "op": "batch_norm", "scale": False}]),
    "batch_norm_no_center": (IMAGE, [conv("c"), {"name": "bn", "op": "batch_norm", "center": False}]),
    "batch_norm_neither_relu": (IMAGE, [conv("c"), {"name": "bn", "op": "batch_norm", "center": False,
                                                    "scale": False, "activation": "relu"}]),
    "batch_norm_2d_no_scale": (VECTOR, [{"name": "bn", "op": "batch_norm", "scale": False, "activation": "tanh"}]),
    # scale (LayerScale), rescale, normalize: channels-last and after a conv
    "scale_2d": (VECTOR, [{"name": "ls", "op": "scale", "init_values": 0.1}]),
    "scale_after_conv": (IMAGE, [conv("c"), {"name": "ls", "op": "scale"}]),
    "rescale_scalar": (IMAGE, [{"name": "r", "op": "rescale", "scale": 0.00392156862745098, "offset": -0.5}]),
    "rescale_per_channel_after_conv": (IMAGE, [conv("c"), {"name": "r", "op": "rescale", "scale": [0.5, 2.0, -1.0, 3.0],
                                                           "offset": [0.1, 0.0, -0.2, 1.5]}]),
    "rescale_no_offset_after_conv": (IMAGE, [conv("c"), {"name": "r", "op": "rescale", "scale": [0.5, 2.0, -1.0, 3.0]}]),
    "normalize_fixed": (IMAGE, [{"name": "n", "op": "normalize", "mean": [0.485, 0.456, 0.406],
                                 "variance": [0.052, 0.05, 0.049]}]),
    "normalize_fixed_scalar_after_conv": (IMAGE, [conv("c"), {"name": "n", "op": "normalize", "mean": 0.5,
                                                              "variance": 2.0}]),
    "normalize_variables_after_conv": (IMAGE, [conv("c"), {"name": "n", "op": "normalize"}]),
    "normalize_variables_2d": (VECTOR, [{"name": "n", "op": "normalize"}]),
    # broadcasting merges: squeeze-and-excite against a channels-first conv output, both gate kinds
    "multiply_squeeze_excite_dense": (IMAGE, squeeze_excite()),
    "multiply_squeeze_excite_conv": (IMAGE, squeeze_excite(gate_op="conv")),
    "multiply_squeeze_excite_gate_first": (IMAGE, [*squeeze_excite()[:-1],
                                                   {"name": "se", "op": "multiply", "inputs": ["gate", "c"]}]),
    "add_broadcast_rows": (IMAGE, [conv("c"), {"name": "p", "op": "avg_pool", "size": [1, 7], "input": "c"},
                                   {"name": "sum", "op": "add", "inputs": ["p", "c", "c"]}]),
    "subtract_broadcast": (IMAGE, [conv("c"), {"name": "p", "op": "global_max_pool", "keepdims": True},
                                   {"name": "d", "op": "subtract", "inputs": ["c", "p"]}]),
    "subtract_2d": (VECTOR, [{"name": "a", "op": "tanh", "input": "x"}, {"name": "d", "op": "subtract", "inputs": ["x", "a"]}]),
    # global pools with and without keepdims
    "global_max_pool": (IMAGE, [conv("c"), {"name": "g", "op": "global_max_pool"}]),
    "global_avg_pool_keepdims": (IMAGE, [conv("c"), {"name": "g", "op": "global_avg_pool", "keepdims": True}]),
    "global_max_pool_keepdims_input": (IMAGE, [{"name": "g", "op": "global_max_pool", "keepdims": True}]),
}
