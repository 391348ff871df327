"""Move variable values between TensorFlow's layout and the ONNX graph's (no TF import)."""

from __future__ import annotations

import numpy as np

from specgen.ir.model import Variable


def to_onnx(var: Variable, value: np.ndarray) -> np.ndarray:
    """A TF-layout value (e.g. a conv kernel in HWIO) in the layout the ONNX graph takes (OIHW)."""
    if tuple(value.shape) != var.shape:
        raise ValueError(f"{var.path}: expected shape {list(var.shape)}, received {list(value.shape)}")
    if var.onnx_split is not None:
        value = value.reshape(var.onnx_split)
    if var.onnx_perm is not None:
        value = np.transpose(value, var.onnx_perm)
    if var.onnx_order is not None:  # recurrent gates: Keras' order to ONNX's
        blocks = np.split(value, len(var.onnx_order), axis=0)
        value = np.concatenate([blocks[i] for i in var.onnx_order], axis=0)
    return np.ascontiguousarray(value.reshape(var.onnx_shape), dtype=np.dtype(var.dtype))


def onnx_feeds(variables: tuple[Variable, ...], values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """ONNX graph inputs for every model variable, from TF-layout values by spec path."""
    return {v.onnx_name: to_onnx(v, values[v.path]) for v in variables}
