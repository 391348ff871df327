"""Multi-input ops: add, multiply (same shapes) and concat (along one axis)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from specgen.ir.model import Node, Shape
from specgen.ir.ops.base import OnnxContext, OpDef, OpError, OpResult, axis_in, held_axis, prod, require_float, show
from specgen.spec.base import Int
from specgen.spec.layers import MultiInputBase


class Elementwise(MultiInputBase):
    op: Literal["add", "multiply"]


class Concat(MultiInputBase):
    op: Literal["concat"]
    axis: Int = Field(-1, description="Counted with the batch dimension as axis 0, which cannot be concatenated.")


def elementwise(layer: Elementwise, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    for shape, name in zip(shapes[1:], layer.inputs[1:], strict=True):
        if shape != shapes[0]:
            raise OpError(f"{layer.op} needs inputs of one shape; '{layer.inputs[0]}' is {show(shapes[0])} "
                          f"but '{name}' is {show(shape)}", "inputs")
    for dtype in dtypes:
        require_float(dtype, layer.op)
    return OpResult(shapes[0], flops=(len(shapes) - 1) * prod(shapes[0]))


def concat(layer: Concat, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    rank = len(shapes[0])
    axis = axis_in(layer.axis, rank, "axis")
    first = shapes[0]
    for shape, name in zip(shapes[1:], layer.inputs[1:], strict=True):
        if len(shape) != rank or any(a != b for i, (a, b) in enumerate(zip(shape, first, strict=True)) if i != axis):
            raise OpError(f"concat on axis {axis} needs the other axes equal; '{layer.inputs[0]}' is "
                          f"{show(first)} but '{name}' is {show(shape)}", "inputs")
    if len(set(dtypes)) > 1:
        raise OpError(f"concat needs inputs of one dtype; received {', '.join(dtypes)}", "inputs")
    out = list(first)
    out[axis] = sum(s[axis] or 0 for s in shapes)
    return OpResult(tuple(out), dtypes[0], {"axis": axis})


def concat_tf_attrs(node: Node) -> dict[str, Any]:
    return {"axis": node.params["axis"]}


def concat_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"axis": held_axis(node.params["axis"], len(node.shape), first)}


OPS = (
    OpDef("add", Elementwise, elementwise, layout="any"),
    OpDef("multiply", Elementwise, elementwise, layout="any"),
    OpDef("concat", Concat, concat, concat_tf_attrs, concat_onnx_attrs, layout="any"),
)
