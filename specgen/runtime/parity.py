"""Compare the generated TensorFlow module with onnxruntime on the generated ONNX graph."""

from __future__ import annotations

from typing import Any

import numpy as np

from specgen.ir.model import ModelIR
from specgen.runtime.generated import load_generated
from specgen.runtime.onnx_layout import onnx_feeds

__all__ = ["load_generated"]


def random_weights(ir: ModelIR, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random values for every model variable, scaled like trained weights.

    Kernels get a 1/sqrt(fan-in) scale so activations stay near 1, as in a trained
    model (outputs in the tens would put float32 rounding above the 1e-5 budget);
    batch-norm variances stay positive.
    """
    values = {}
    for var in ir.model_variables:
        scale = 1.0 / np.sqrt(np.prod(var.shape[:-1])) if len(var.shape) > 1 else 0.5
        value = (rng.standard_normal(var.shape) * scale).astype(np.float32)
        if var.path.endswith("/moving_variance"):
            value = rng.uniform(0.5, 1.5, var.shape).astype(np.float32)
        values[var.path] = value
    return values


def random_inputs(ir: ModelIR, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    inputs = {}
    for node_input in ir.inputs:
        shape = (batch, *node_input.shape[1:])
        if node_input.dtype.startswith("int"):
            vocab = min(n.params["vocab_size"] for n in ir.nodes if n.op == "embedding" and node_input.name in n.inputs)
            inputs[node_input.name] = rng.integers(0, vocab, shape).astype(node_input.dtype)
        else:
            inputs[node_input.name] = rng.standard_normal(shape).astype(np.float32)
    return inputs


def assign(model: Any, values: dict[str, np.ndarray]) -> None:
    for path, variable in model.variables_by_path().items():
        variable.assign(values[path])


def run_tf(model: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import tensorflow as tf

    outputs = model({k: tf.constant(v) for k, v in inputs.items()}, training=False)
    return {k: v.numpy() for k, v in outputs.items()}


def run_onnx(model_bytes: bytes, ir: ModelIR, values: dict[str, np.ndarray],
             inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    feeds = {i.onnx_name: inputs[i.name] for i in ir.inputs} | onnx_feeds(ir.model_variables, values)
    names = list(ir.outputs)
    return dict(zip(names, session.run(names, feeds), strict=True))


def max_abs_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)))) for k in a)
