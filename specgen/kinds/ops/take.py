"""take: one index along one axis, the axis removed (numpy's `x.take(index, axis)`, Keras' `x[:, i]`).

BERT's pooler reads the first token (KerasHub's `x[:, cls_token_index, :]`); a last-step readout is
`index: -1`. A negative index counts from the end, as numpy and Keras do. ONNX: one Gather with a
scalar index (it takes negative indices the same way). FLOPs 0: a copy, no arithmetic.

An index outside a fixed axis is a validate error. On a named dynamic axis the size is known only at
run time: index k needs k+1 steps (-k for a negative one), which the OpDef declares (`needs_sizes`), so
export records it with the minima of shrinking windows (runtime/lengths.py), its parity check starts
there, and infer/serve refuse a shorter sequence in one line before the graph's own error.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from specgen import text
from specgen.fields.base import Int
from specgen.fields.layers import LayerBase
from specgen.kinds.ops.base import OnnxContext, OpDef, OpError, OpResult
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import axis_in


class Take(LayerBase):
    op: Literal["take"]
    axis: Int = Field(1, description="The axis to select along, counted with the batch as axis 0 (not takeable); "
                                     "it is removed from the output.")
    index: Int = Field(description="The position along `axis`; negative counts from the end (-1: the last).")


def infer(layer: Take, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    rank = len(shape)
    if rank < 2:
        raise OpError(f"take needs an axis besides the batch; received {text.shape(shape)}", "input")
    axis = axis_in(layer.axis, rank, "axis")
    size = shape[axis]
    if isinstance(size, int) and not -size <= layer.index < size:
        raise OpError(f"index: received {layer.index} along axis {axis} of size {size} (input {text.shape(shape)}); "
                      f"expected {-size} to {size - 1}", "index")
    out = tuple(d for i, d in enumerate(shape) if i != axis)
    return OpResult(out, dtype, {"axis": axis, "index": layer.index}, flops=0)


def tf_attrs(node: Node) -> dict[str, Any]:
    # Python indexing (a strided slice): takes negative indices as numpy does, where tf.gather refuses them on CPU.
    axis = node.params["axis"]
    return {"key": ", ".join([":"] * axis + [str(node.params["index"])])}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"axis": node.params["axis"], "index": node.params["index"]}


def needs_sizes(node: Node) -> tuple[tuple[str, int], ...]:
    """A named axis needs the index's steps: index 4 reads the fifth, index -2 the second from the end."""
    size, index = node.input_shapes[0][node.params["axis"]], node.params["index"]
    return ((size, index + 1 if index >= 0 else -index),) if isinstance(size, str) else ()


OPS = (OpDef("take", Take, infer, tf_attrs, onnx_attrs, symbolic=True, moments="same", needs_sizes=needs_sizes),)
