"""Parity cases (TensorFlow vs onnxruntime) for gelu_approximate at the default opset (one Gelu node);
tests/test_op_parity.py picks up `CASES`. The opset-18 formula: tests/test_gelu_approximate.py."""

from __future__ import annotations

from typing import Any

CASES: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "gelu_approximate": ({"x": {"shape": [7, 6]}}, [{"name": "a", "op": "gelu_approximate"}]),
    "dense_gelu_approximate": ({"x": {"shape": [7, 6]}},
                               [{"name": "fc", "op": "dense", "units": 5, "activation": "gelu_approximate"}]),
}
