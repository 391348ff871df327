"""Flatten a channels-first ONNX tensor as it is, when only dense layers read the result.

The ONNX graph holds a conv stack's tensors channels-first (render/onnx_plan.py); a `flatten` of one
must produce Keras' channels-last order, which costs a Transpose back to NHWC before the Flatten.
When every reader of the flattened vector is a dense layer that owns its kernel, the same outputs come
from flattening in NCHW order and permuting that kernel's rows from (h, w, c) to (c, h, w) order at
export: a reordering of weights, exact in float32, and one node fewer (VGG16: 39 nodes, as tf2onnx).
Which op flattens and which reads flattened features into kernel rows: OpDef.flatten_order.
"""

from __future__ import annotations

from dataclasses import replace

from specgen.ir.model import Node, Variable
from specgen.kinds.ops import op_def

__all__ = ["channels_first_layers", "reorder_flattened_kernels"]


def channels_first_layers(nodes: list[Node]) -> set[str]:
    """Layers whose ONNX tensor is channels-first: the rule render/onnx_plan.py's Lowering follows.

    An op of layout "first" runs channels-first; "any" runs in its first input's layout; "last" in
    channels-last. Only tensors of rank 3 and more have a layout. A node-less op (dropout) is its input,
    converted as its layout asks, so the same rule holds for it.
    """
    first: set[str] = set()
    for node in nodes:
        layout = op_def(node.op).layout
        want_first = layout == "first" or (layout == "any" and bool(node.inputs) and node.inputs[0] in first)
        if want_first and len(node.shape) > 2:
            first.add(node.name)
    return first


def _dense_readers(flatten: str, nodes: list[Node], outputs: set[str]) -> list[Node] | None:
    """The dense layers that read `flatten` (through node-less layers), or None if anything else reads it."""
    readers, todo = [], [flatten]
    while todo:
        name = todo.pop()
        if name in outputs:
            return None  # a graph output keeps Keras' order
        for node in (n for n in nodes if name in n.inputs):
            if op_def(node.op).onnx_template_for(node) is None and len(node.inputs) == 1:
                todo.append(node.name)
            elif op_def(node.op).flatten_order == "kernel_rows" and node.shares is None and "kernel" in node.variables:
                readers.append(node)
            else:
                return None
    return readers


def reorder_flattened_kernels(nodes: list[Node], variables: list[Variable],
                              outputs: set[str]) -> tuple[list[Node], list[Variable], frozenset[str]]:
    """Nodes and variables with the kernels of dense layers behind an NCHW flatten reordered for ONNX;
    and the names of those flattens (the Lowering flattens them without a Transpose)."""
    first, shared = channels_first_layers(nodes), {n.shares for n in nodes if n.shares}
    changed: dict[str, Variable] = {}
    flattens = set()
    for node in nodes:
        shape = node.input_shapes[0] if op_def(node.op).flatten_order == "flattens" else ()
        if len(shape) != 4 or node.inputs[0] not in first:
            continue
        readers = _dense_readers(node.name, nodes, outputs)
        if not readers or any(r.name in shared for r in readers):
            continue  # a shared kernel is also read by a call that may not sit behind this flatten
        h, w, c = shape[1:]
        assert isinstance(h, int) and isinstance(w, int) and isinstance(c, int)  # flatten refuses named dimensions
        flattens.add(node.name)
        for reader in readers:
            kernel = reader.variables["kernel"]
            units = kernel.shape[1]
            # TF row h*W*C + w*C + ch becomes ONNX row ch*H*W + h*W + w: split, move c first, merge.
            changed[kernel.path] = replace(kernel, onnx_split=(h, w, c, units), onnx_perm=(2, 0, 1, 3))
    if not changed:
        return nodes, variables, frozenset()
    nodes = [replace(n, variables={r: changed.get(v.path, v) for r, v in n.variables.items()}) for n in nodes]
    return nodes, [changed.get(v.path, v) for v in variables], frozenset(flattens)
