"""Turn the built ONNX graph (weights as graph inputs) into a servable model with weights.

No TensorFlow here: values arrive as numpy arrays in TensorFlow's layout, keyed by
spec path. Batch norm after a Conv or Gemm whose output nothing else reads is
folded into that layer's weights (W' = W * s, b' = (b - mean) * s + beta, with
s = gamma / sqrt(var + eps)); the rest stay BatchNormalization in inference form.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from specgen.ir.model import ModelIR
from specgen.runtime.onnx_layout import onnx_feeds


def _attribute(node: onnx.NodeProto, name: str, default: float) -> float:
    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _consumers(graph: onnx.GraphProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            counts[name] = counts.get(name, 0) + 1
    for output in graph.output:
        counts[output.name] = counts.get(output.name, 0) + 1
    return counts


def fold_batch_norms(graph: onnx.GraphProto, weights: dict[str, np.ndarray]) -> int:
    """Fold each foldable BatchNormalization into its producer; returns how many were folded."""
    producers = {out: node for node in graph.node for out in node.output}
    consumers, folded, keep = _consumers(graph), 0, []
    for node in graph.node:
        producer = producers.get(node.input[0]) if node.op_type == "BatchNormalization" else None
        if producer is None or producer.op_type not in ("Conv", "Gemm") or consumers[node.input[0]] != 1:
            keep.append(node)
            continue
        gamma, beta, mean, var = (weights[n] for n in node.input[1:5])
        scale = gamma / np.sqrt(var + _attribute(node, "epsilon", 1e-5))
        kernel_name = producer.input[1]
        kernel = weights[kernel_name]
        weights[kernel_name] = (kernel * scale.reshape(-1, 1, 1, 1) if producer.op_type == "Conv" else kernel * scale)
        bias_name = producer.input[2] if len(producer.input) > 2 else f"{producer.output[0]}___folded_bias"
        bias = weights.get(bias_name, np.zeros_like(mean))
        weights[bias_name] = ((bias - mean) * scale + beta).astype(np.float32)
        if len(producer.input) < 3:
            producer.input.append(bias_name)
        producer.output[0] = node.output[0]  # the producer now writes what batch norm wrote
        folded += 1
    del graph.node[:]
    graph.node.extend(keep)
    return folded


def with_weights(built: onnx.ModelProto, ir: ModelIR, values: dict[str, np.ndarray], fold: bool = True) -> onnx.ModelProto:
    """A copy of the built model whose weight inputs became initializers holding `values`."""
    model = onnx.ModelProto()
    model.CopyFrom(built)
    graph = model.graph
    weights = {k: v.astype(np.float32) for k, v in onnx_feeds(ir.model_variables, values).items()}
    if fold:
        fold_batch_norms(graph, weights)
    used = {name for node in graph.node for name in node.input}
    data_inputs = [i for i in graph.input if i.name not in weights]
    del graph.input[:]
    graph.input.extend(data_inputs)
    graph.initializer.extend(numpy_helper.from_array(weights[name], name) for name in sorted(weights) if name in used)
    onnx.checker.check_model(model, full_check=True)
    return model


def node_counts(model: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
