"""Parity cases (TensorFlow vs onnxruntime) for the ops a TD target needs: gather, reduce, stop_gradient.

tests/test_op_parity.py picks up `CASES`; tests/test_td_ops.py checks the same ops against numpy.
"""

from __future__ import annotations

from typing import Any

IMAGE = {"image": {"shape": [9, 7, 3]}}
Q_AND_ACTION = {"x": {"shape": [12]}, "action": {"shape": [1], "dtype": "int32"}}


def conv(name: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "op": "conv2d", "filters": 4, "kernel": 3, "padding": "same", **params}


CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    # DQN's Q(s)[a]: [batch, 5] values, [batch, 1] actions
    "gather_q_of_action": (Q_AND_ACTION, [{"name": "q", "op": "dense", "units": 5, "input": "x"},
                                          {"name": "qa", "op": "gather", "inputs": ["q", "action"]}]),
    "gather_int64_several": ({"x": {"shape": [4, 3]}, "ids": {"shape": [2, 3], "dtype": "int64"}},
                             [{"name": "g", "op": "gather", "inputs": ["x", "ids"], "axis": 1}]),
    "gather_middle_axis_after_conv": ({**IMAGE, "ids": {"shape": [9, 2, 4], "dtype": "int32"}},
                                      [conv("c", input="image"),
                                       {"name": "g", "op": "gather", "inputs": ["c", "ids"], "axis": 2}]),
    "reduce_max_keepdims": ({"x": {"shape": [12]}}, [{"name": "q", "op": "dense", "units": 5},
                                                     {"name": "m", "op": "reduce", "kind": "max", "keepdims": True}]),
    "reduce_min_axes_after_conv": (IMAGE, [conv("c"), {"name": "m", "op": "reduce", "kind": "min", "axis": [1, 2]}]),
    "reduce_mean_channels_after_conv": (IMAGE, [conv("c"), {"name": "m", "op": "reduce", "kind": "mean", "axis": 3,
                                                            "keepdims": True}]),
    "reduce_sum_all": (IMAGE, [{"name": "m", "op": "reduce", "kind": "sum", "axis": [-1, 1, 2]}]),
    "stop_gradient": ({"x": {"shape": [12]}}, [{"name": "q", "op": "dense", "units": 5},
                                               {"name": "s", "op": "stop_gradient"},
                                               {"name": "m", "op": "reduce", "kind": "max"}]),
}
