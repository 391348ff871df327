"""Turn the built ONNX graph (weights as graph inputs) into a servable model with weights.

No TensorFlow here: values arrive as numpy arrays in TensorFlow's layout, keyed by
spec path. Batch norm after a Conv or Gemm whose output nothing else reads, and whose
weights no other node reads (a shared layer's are read by each call), is
folded into that layer's weights (W' = W * s, b' = (b - mean) * s + beta, with
s = gamma / sqrt(var + eps)); the rest stay BatchNormalization in inference form.
A batch norm without gamma or beta (`scale: false` / `center: false`) reads a
ConstantOfShape filler (ones / zeros) there; folding reads its value and drops it.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from specgen.ir.model import ModelIR
from specgen.runtime import lengths
from specgen.runtime.lib.onnx_layout import onnx_feeds


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


def _operand(name: str, producers: dict[str, onnx.NodeProto], weights: dict[str, np.ndarray],
             like: np.ndarray) -> np.ndarray | None:
    """A batch-norm parameter: a weight, or the value of a ConstantOfShape filler (None: neither)."""
    if name in weights:
        return weights[name]
    filler = producers.get(name)
    if filler is None or filler.op_type != "ConstantOfShape":
        return None
    value = next((numpy_helper.to_array(a.t) for a in filler.attribute if a.name == "value"), np.zeros(1, np.float32))
    return np.full_like(like, value.reshape(-1)[0])


def _drop_unread_fillers(graph: onnx.GraphProto) -> None:
    """Remove ConstantOfShape fillers (and the shape constants they read) that nothing reads any more."""
    read = _consumers(graph)
    kept = [n for n in graph.node if n.op_type != "ConstantOfShape" or any(read.get(o) for o in n.output)]
    del graph.node[:]
    graph.node.extend(kept)
    used = {name for node in graph.node for name in node.input}
    initializers = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(initializers)


def fold_batch_norms(graph: onnx.GraphProto, weights: dict[str, np.ndarray]) -> int:
    """Fold each foldable BatchNormalization into its producer; returns how many were folded."""
    producers = {out: node for node in graph.node for out in node.output}
    consumers, folded, keep = _consumers(graph), 0, []
    for node in graph.node:
        producer = producers.get(node.input[0]) if node.op_type == "BatchNormalization" else None
        if producer is None or producer.op_type not in ("Conv", "Gemm") or consumers[node.input[0]] != 1:
            keep.append(node)
            continue
        if any(consumers.get(w, 0) > 1 for w in producer.input[1:]):
            # A shared layer's kernel or bias, read by another node too: scaling it would apply this
            # batch norm to the other call as well (and two folds would scale it twice).
            keep.append(node)
            continue
        mean, var = weights[node.input[3]], weights[node.input[4]]
        gamma, beta = (_operand(n, producers, weights, mean) for n in node.input[1:3])
        if gamma is None or beta is None:  # not a form specgen writes: leave it unfolded
            keep.append(node)
            continue
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
    _drop_unread_fillers(graph)
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
    lengths.stamp(model, ir)  # bounds of named dimensions, read back by Predictor
    return model


def node_counts(model: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
