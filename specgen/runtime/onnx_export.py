"""Turn the built ONNX graph (weights as graph inputs) into a servable model with weights.

No TensorFlow here: values arrive as numpy arrays in TensorFlow's layout, keyed by
spec path. Batch norm after a layer with a kernel (Conv of any rank, grouped and depthwise
included; ConvTranspose; Gemm; a dense layer's MatMul on a rank > 2 input, read through its
layout Transpose) whose output nothing else reads, and whose weights no other node reads (a
shared layer's are read by each call), is folded into that layer's weights (W' = W * s per
output channel, b' = (b - mean) * s + beta, with s = gamma / sqrt(var + eps)); the rest stay
BatchNormalization in inference form. A fold whose scale or weights would overflow float32 (a moving_variance
just above -epsilon) is not made: the batch norm stays, computing what TensorFlow computes.
A batch norm without gamma or beta (`scale: false` / `center: false`) reads a
ConstantOfShape filler (ones / zeros) there; folding reads its value and drops it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from specgen.errors import SpecgenError
from specgen.ir.model import ModelIR
from specgen.kinds.ops import op_def
from specgen.render.errors import RenderError
from specgen.runtime import lengths
from specgen.runtime.lib.onnx_layout import onnx_feeds


class WeightError(SpecgenError, ValueError):
    """A weight no layer can compute with (a negative variance): one line naming the variable."""


def variance_problem(ir: ModelIR, values: Mapping[str, np.ndarray], names: Mapping[str, str] | None = None) -> str | None:
    """"'bn1/moving_variance' is -5 at [7] (...); expected ..." for the first variance (OpDef.variance) below what
    its layer can take the square root of, named by `names` (spec path -> checkpoint key) where given; None when all
    fit. Computed in float32 as the model computes it; NaN is left to the finite-weights check. A variance is never
    negative (training's moving average of batch variances cannot make one): a checkpoint holding one is damaged
    or was edited, and the model would compute NaN from it (numpy's sqrt in the fold, TensorFlow's, onnxruntime's)."""
    for node in ir.nodes:
        role, epsilon_key = op_def(node.op).variance or ("", "")
        variable = node.variables.get(role) if node.shares is None else None  # a shared layer's: at its owner
        if variable is None or variable.path not in values:
            continue
        epsilon = float(node.params[epsilon_key]) if epsilon_key else 0.0
        value = np.asarray(values[variable.path], np.float32)
        bad = (value + np.float32(epsilon) <= 0) if epsilon else (value < 0)
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            more = f" (and {int(bad.sum()) - 1} more)" if bad.sum() > 1 else ""
            expected = (f"{role} + epsilon ({epsilon:g}) > 0, as {node.op} '{node.name}' takes its square root"
                        if epsilon else f"{role} >= 0, as {node.op} '{node.name}' takes its square root")
            name = (names or {}).get(variable.path, variable.path)
            return f"'{name}' is {float(value[index]):g} at {list(index)}{more}; expected {expected}"
    return None


def _attribute(node: onnx.NodeProto, name: str, default: Any) -> Any:
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


# Where a producer's kernel keeps its output channels, so that the scale multiplies each channel's weights.
# Conv: [out, in/group, *window] at any rank (conv1d's 3-D kernel, conv2d's 4-D), grouped or depthwise alike.
# ConvTranspose: [in, out/group, *window]: group g's output channels are columns of group g's rows.
# Gemm / MatMul (dense): [in, out] (Gemm with transB: [out, in]).
DIRECT = ("Conv", "ConvTranspose", "Gemm")  # their output is channels-first already: batch norm reads it as is
DENSE_ND = ("MatMul", "Add")  # dense on a rank > 2 input; its output reaches batch norm through a Transpose


@dataclass
class _Chain:
    """What one batch norm folds into: `op` reads the kernel (and `bias`, when it has one); `last` writes what the
    batch norm read and writes the batch norm's output once it is folded; `transpose` is the layout Transpose
    between a dense layer on a rank > 2 input and the batch norm (channels-last to channels-first)."""

    op: onnx.NodeProto
    kernel: str
    bias: str | None
    last: onnx.NodeProto
    transpose: onnx.NodeProto | None = None


def _channels_to_axis_1(node: onnx.NodeProto) -> bool:
    """A Transpose that moves the last axis to axis 1 and keeps the others in order (the layout pass's NHWC->NCHW)."""
    perm = list(_attribute(node, "perm", []))
    return len(perm) > 2 and perm == [0, len(perm) - 1, *range(1, len(perm) - 1)]


def _dense_chain(add_or_matmul: onnx.NodeProto | None, producers: dict[str, onnx.NodeProto],
                 weights: dict[str, np.ndarray]) -> tuple[onnx.NodeProto, str | None] | None:
    """The MatMul of a dense layer on a rank > 2 input (MatMul, or MatMul then Add of the bias) and its bias."""
    if add_or_matmul is None or add_or_matmul.op_type not in DENSE_ND:
        return None
    if add_or_matmul.op_type == "MatMul":
        return add_or_matmul, None
    first, second = add_or_matmul.input
    matmul = producers.get(first)
    if matmul is None or matmul.op_type != "MatMul" or second not in weights:
        return None
    return matmul, second


def _chain(node: onnx.NodeProto, producers: dict[str, onnx.NodeProto], consumers: dict[str, int],
           weights: dict[str, np.ndarray]) -> _Chain | None:
    """The layer a batch norm folds into, or None: nothing but the batch norm may read what lies between them."""
    producer = producers.get(node.input[0])
    if producer is None or consumers[node.input[0]] != 1:
        return None
    if producer.op_type in DIRECT:
        chain = _Chain(producer, producer.input[1], producer.input[2] if len(producer.input) > 2 else None, producer)
    elif producer.op_type == "Transpose" and _channels_to_axis_1(producer) and consumers[producer.input[0]] == 1:
        found = _dense_chain(producers.get(producer.input[0]), producers, weights)
        if found is None or (found[1] is not None and consumers[found[0].output[0]] != 1):
            return None
        chain = _Chain(found[0], found[0].input[1], found[1], producer, producer)
    else:
        return None
    if chain.kernel not in weights or weights[chain.kernel].ndim < 2:  # a MatMul of two activations (attention)
        return None
    # A shared layer's kernel or bias, read by another node too: scaling it would apply this batch norm to
    # the other call as well (and two folds would scale it twice).
    if any(consumers.get(w, 0) > 1 for w in (chain.kernel, chain.bias) if w is not None):
        return None
    return chain


def _bn_operands(node: onnx.NodeProto, producers: dict[str, onnx.NodeProto],
                 weights: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(scale, mean, beta) of a batch norm in inference form; None for a form specgen does not write."""
    mean, var = weights.get(node.input[3]), weights.get(node.input[4])
    if mean is None or var is None:
        return None
    gamma, beta = (_operand(n, producers, weights, mean) for n in node.input[1:3])
    if gamma is None or beta is None:
        return None
    with np.errstate(all="ignore"):  # checked below: a negative variance or an overflow is not folded, never warned
        scale = (gamma / np.sqrt(var + _attribute(node, "epsilon", 1e-5))).astype(np.float32)
    return (scale, mean, beta) if np.isfinite(scale).all() else None


def _scaled_kernel(chain: _Chain, kernel: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The kernel with each output channel's weights times that channel's scale, on the kernel's own rank."""
    op = chain.op.op_type
    if op == "Conv":  # [out, in/group, *window]
        return np.asarray(kernel * scale.reshape(-1, *[1] * (kernel.ndim - 1)))
    if op == "ConvTranspose":  # [in, out/group, *window]: group g's rows hold its outputs g*out/group.. on axis 1
        group = int(_attribute(chain.op, "group", 1))
        grouped = kernel.reshape(group, kernel.shape[0] // group, *kernel.shape[1:])
        return np.asarray(grouped * scale.reshape(group, 1, -1, *[1] * (kernel.ndim - 2))).reshape(kernel.shape)
    if op == "Gemm" and _attribute(chain.op, "transB", 0):  # [out, in]
        return np.asarray(kernel * scale.reshape(-1, 1))
    return np.asarray(kernel * scale)  # Gemm, MatMul: [in, out], one column per output channel


def _fold(node: onnx.NodeProto, chain: _Chain, operands: tuple[np.ndarray, np.ndarray, np.ndarray],
          weights: dict[str, np.ndarray], keep: list[onnx.NodeProto]) -> bool:
    """Scale the kernel, fold the statistics into the bias (adding one where there is none), rewire the outputs.
    False, changing nothing, where a folded weight would overflow float32: the batch norm then stays."""
    scale, mean, beta = operands
    kept = {name: weights[name].shape for name in (chain.kernel, chain.bias) if name is not None}
    bias_name = chain.bias or f"{chain.op.output[0]}___folded_bias"
    bias = weights.get(bias_name, np.zeros_like(mean))
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is checked below, never warned
            # + 0.0 turns -0.0 into +0.0 and leaves every other value as it is: a pruned entry (+0.0,
            # docs/pruning.md) times a negative scale would otherwise be written as -0.0.
            kernel = _scaled_kernel(chain, weights[chain.kernel], scale).astype(np.float32) + np.float32(0)
            folded_bias = ((bias - mean) * scale + beta).astype(np.float32)
    except ValueError as exc:  # a scale that does not fit the kernel's channels: refuse, never export it
        raise _fold_error(node, chain, f"{chain.kernel} {list(weights[chain.kernel].shape)}: {exc}") from None
    if not (np.isfinite(kernel).all() and np.isfinite(folded_bias).all()):
        return False
    weights[chain.kernel], weights[bias_name] = kernel, folded_bias
    if chain.bias is None:
        _add_bias(chain, bias_name, keep)
    for name, shape in ({bias_name: mean.shape} | kept).items():
        if weights[name].shape != shape:
            raise _fold_error(node, chain, f"'{name}' became {list(weights[name].shape)}, expected {list(shape)}")
    chain.last.output[0] = node.output[0]  # the layer (or its Transpose) now writes what batch norm wrote
    return True


def _add_bias(chain: _Chain, bias_name: str, keep: list[onnx.NodeProto]) -> None:
    """A layer without bias gets the folded one: a Conv/Gemm input, or an Add after a MatMul (before its Transpose)."""
    if chain.transpose is None:
        chain.op.input.append(bias_name)
        return
    biased = f"{chain.op.output[0]}___folded"
    add = onnx.helper.make_node("Add", [chain.op.output[0], bias_name], [biased], name=biased)
    chain.transpose.input[0] = biased
    keep.insert(keep.index(chain.transpose), add)


def _fold_error(node: onnx.NodeProto, chain: _Chain, what: str) -> RenderError:
    return RenderError(f"folding BatchNormalization '{node.output[0]}' into {chain.op.op_type} '{chain.op.output[0]}' "
                       f"would change the weights' shapes ({what})")


def fold_batch_norms(graph: onnx.GraphProto, weights: dict[str, np.ndarray]) -> int:
    """Fold each foldable BatchNormalization into its producer; returns how many were folded.

    Every kernel and bias it rewrites keeps its shape, or a RenderError names the node: a scale broadcast to
    the wrong rank gives a graph that onnx.checker (even with full_check) accepts and onnxruntime refuses.
    """
    producers = {out: node for node in graph.node for out in node.output}
    consumers, folded, keep = _consumers(graph), 0, list[onnx.NodeProto]()
    for node in graph.node:
        chain = _chain(node, producers, consumers, weights) if node.op_type == "BatchNormalization" else None
        operands = _bn_operands(node, producers, weights) if chain is not None else None
        if chain is None or operands is None or not _fold(node, chain, operands, weights, keep):
            keep.append(node)
            continue
        folded += 1
    del graph.node[:]
    graph.node.extend(keep)
    _drop_unread_fillers(graph)
    return folded


def with_weights(built: onnx.ModelProto, ir: ModelIR, values: dict[str, np.ndarray], fold: bool = True) -> onnx.ModelProto:
    """A copy of the built model whose weight inputs became initializers holding `values`; WeightError naming the
    variable for a value the model cannot compute with (variance_problem, a finite value past float32)."""
    if (problem := _past_float32(values) or variance_problem(ir, values)) is not None:
        raise WeightError(f"variable {problem}; nothing was written")
    model = onnx.ModelProto()
    model.CopyFrom(built)
    graph = model.graph
    with np.errstate(over="ignore"):  # values past float32's range were refused above
        weights = {k: v.astype(np.float32) for k, v in onnx_feeds(ir.model_variables, values).items()}
    if fold:
        fold_batch_norms(graph, weights)
    for node in graph.node:  # onnxruntime's errors and profiles (and Netron) name a node by its name: the tensor it writes
        node.name = node.name or node.output[0]
    used = {name for node in graph.node for name in node.input}
    data_inputs = [i for i in graph.input if i.name not in weights]
    del graph.input[:]
    graph.input.extend(data_inputs)
    graph.initializer.extend(numpy_helper.from_array(weights[name], name) for name in sorted(weights) if name in used)
    onnx.checker.check_model(model, full_check=True)
    lengths.stamp(model, ir)  # bounds of named dimensions, read back by Predictor
    return model


def _past_float32(values: Mapping[str, np.ndarray]) -> str | None:
    """"'x' is 1e+300 at [0, 2] (...); expected ..." for the first finite value float32 would make infinite."""
    largest = float(np.finfo(np.float32).max)
    for name, value in values.items():
        if value.dtype.kind != "f" or value.dtype.itemsize <= 4:
            continue
        with np.errstate(over="ignore"):  # the overflow is what is looked for
            bad = np.isfinite(value) & np.isinf(value.astype(np.float32))
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            more = f" (and {int(bad.sum()) - 1} more)" if bad.sum() > 1 else ""
            return (f"'{name}' is {float(value[index]):g} at {list(index)}{more}; expected a value float32 holds "
                    f"(|x| <= {largest:.4g}): the model computes in float32")
    return None


def node_counts(model: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
