"""gather: per-example selection along one axis by an integer input (ONNX GatherElements).

`inputs: [values, indices]`: the output has the indices' shape and
`out[b, ..., i, ...] = values[b, ..., indices[b, ..., i, ...], ...]` along `axis`, numpy's
`take_along_axis`. DQN's Q(s)[a] is `gather` of a [batch, actions] tensor by a [batch, 1] action.
TensorFlow runs it as `tf.gather(..., batch_dims=rank - 1)` with `axis` moved last (a transpose
when it is not already), which keeps it differentiable with respect to `values`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from specgen import text
from specgen.fields.base import Int, LayerName
from specgen.fields.layers import MultiInputBase
from specgen.kinds.ops.base import INTEGER, OnnxContext, OpDef, OpError, OpResult
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import axis_in, prod


class Gather(MultiInputBase):
    op: Literal["gather"]
    inputs: Annotated[list[LayerName], Field(min_length=2, max_length=2, description=(
        "[values, indices]: integer indices of values' rank, equal to values on every axis but `axis`."))]
    axis: Int = Field(-1, description="The axis indices select along; counted with the batch as axis 0.")


def infer(layer: Gather, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (values, indices), (dtype, index_dtype) = shapes, dtypes
    if index_dtype not in INTEGER:
        raise OpError(f"gather's second input '{layer.inputs[1]}' holds the indices and must be int32 or int64; "
                      f"received {index_dtype}", "inputs")
    rank = len(values)
    axis = axis_in(layer.axis, rank, "axis")
    fits = len(indices) == rank and all(a == b for i, (a, b) in enumerate(zip(values, indices, strict=True))
                                        if i not in (0, axis))
    if not fits:
        expected = text.shape(tuple("k" if i == axis else d for i, d in enumerate(values)))
        raise OpError(f"gather along axis {axis} needs indices shaped like the values except on that axis; "
                      f"received values '{layer.inputs[0]}' {text.shape(values)} and indices '{layer.inputs[1]}' "
                      f"{text.shape(indices)}; expected {expected} (any k)", "inputs")
    # Where an index may point: random parity inputs and data checks draw from [0, limit).
    return OpResult(indices, dtype, {"axis": axis, "rank": rank, "index_limit": values[axis]}, flops=prod(indices))


def tf_attrs(node: Node) -> dict[str, Any]:
    axis, rank = node.params["axis"], node.params["rank"]
    # tf.gather with batch_dims=rank-1 is take_along_axis on the last axis; other axes are moved there and back.
    perm = None if axis == rank - 1 else [*(i for i in range(rank) if i != axis), axis]
    back = None if perm is None else [perm.index(i) for i in range(rank)]
    return {"batch_dims": rank - 1, "perm": perm, "back": back}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"axis": node.params["axis"]}


OPS = (OpDef("gather", Gather, infer, tf_attrs, onnx_attrs, gradient=(True, False),  # no gradient to indices
              id_limit="index_limit", moments="same"),)  # values picked from its first input
