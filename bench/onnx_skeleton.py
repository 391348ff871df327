"""ONNX graphs without their large weights, and the weights filled back in, for timing on another machine.

The GPU machine this project is lent (bench/cuda_onnx.py) can be sent 64 MiB per call; a BERT-base graph alone is
440 MB. Timing does not depend on the exact weight values, but it can depend on their scale (denormals, fp16
overflow turning into inf arithmetic), so a skeleton keeps each large float initializer's mean and standard
deviation in its `doc_string` and drops its data; `fill` draws normal values with those statistics (seeded, so
every run times the same graph). With `per_channel`, a 4-D (convolution) weight keeps the statistics of each
output channel instead: a folded batch norm scales each channel differently, and keeping those scales keeps the
activations' ranges close to the real model's, which int8 calibration and float32 denormals depend on.
Small or integer initializers (shapes, axes, indices, biases under
`KEEP_ELEMENTS`) travel as they are: they change what the graph computes, not only how fast.

Needs numpy and onnx only (the GPU machine has no TensorFlow and no specgen dependencies).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import numpy_helper

MARK = "specgen-skeleton "
KEEP_ELEMENTS = 4096
FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)


def strip(model: onnx.ModelProto, per_channel: bool = False) -> onnx.ModelProto:
    """A copy of `model` whose large float initializers hold only their statistics."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for tensor in out.graph.initializer:
        if tensor.data_type not in FLOATS or int(np.prod(tensor.dims, dtype=np.int64)) < KEEP_ELEMENTS:
            continue
        values = numpy_helper.to_array(tensor).astype(np.float64)
        stats = {"mean": float(values.mean()), "std": float(values.std())}
        if per_channel and values.ndim == 4:
            rows = values.reshape(values.shape[0], -1)
            stats = {"mean": rows.mean(axis=1).tolist(), "std": rows.std(axis=1).tolist()}
        dims, dtype, name = list(tensor.dims), tensor.data_type, tensor.name
        tensor.Clear()
        tensor.name, tensor.data_type = name, dtype
        tensor.dims.extend(dims)
        tensor.doc_string = MARK + json.dumps(stats)
    return out


def fill(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """`model` with every stripped initializer drawn from N(mean, std) in its own dtype (in place)."""
    rng = np.random.default_rng(seed)
    for tensor in model.graph.initializer:
        if not tensor.doc_string.startswith(MARK):
            continue
        stats = json.loads(tensor.doc_string[len(MARK):])
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
        dims = tuple(tensor.dims)
        if isinstance(stats["mean"], list):  # per output channel: broadcast along axis 0
            spread = (len(dims) - 1) * (1,)
            mean, std = np.reshape(stats["mean"], (-1, *spread)), np.reshape(stats["std"], (-1, *spread))
        else:
            mean, std = stats["mean"], stats["std"]
        values = rng.normal(mean, std, size=dims).astype(dtype)
        tensor.CopyFrom(numpy_helper.from_array(values, tensor.name))
    return model
