"""reduce: max, min, mean or sum over one or more non-batch axes (ONNX ReduceMax/Min/Mean/Sum).

DQN's max_a' Q_target(s', a') is `reduce` with `kind: max` over the action axis. At the opsets
specgen writes (18-21) every ONNX Reduce* operator takes its axes as an int64 input, not an attribute.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import Field

from specgen.fields.base import Flag, Int
from specgen.fields.layers import LayerBase
from specgen.fields.unions import ONE_ITEM, by_shape, scalar_or_list
from specgen.kinds.ops.base import (
    ActivationMoments,
    Derived,
    Moments,
    OnnxContext,
    OpDef,
    OpError,
    OpResult,
    Outputs,
    WeightMoments,
)
from specgen.kinds.ops.moments import largest, variance
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import axis_in, prod, require_float

if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Axes: TypeAlias = int | list[int]
else:
    Axes = by_shape(scalar_or_list, "an axis or a list of axes", ONE_ITEM, scalar=Int,
                    list=Annotated[list[Int], Field(min_length=1)])
TF_CALLS = {"max": "tf.reduce_max", "min": "tf.reduce_min", "mean": "tf.reduce_mean", "sum": "tf.reduce_sum"}
ONNX_OPS = {"max": "ReduceMax", "min": "ReduceMin", "mean": "ReduceMean", "sum": "ReduceSum"}


class Reduce(LayerBase):
    op: Literal["reduce"]
    kind: Literal["max", "min", "mean", "sum"]
    axis: Axes = Field(-1, description="An axis or a list of them, counted with the batch as axis 0 (not reducible).")
    keepdims: Flag = Field(False, description="Keep the reduced axes as 1s.")


def infer(layer: Reduce, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, "reduce")
    rank = len(shape)
    if rank < 2:
        raise OpError("reduce needs an input with an axis besides the batch; received a rank-1 [batch] input", "input")
    given = [layer.axis] if isinstance(layer.axis, int) else list(layer.axis)
    normal = [axis_in(a, rank, "axis") for a in given]
    twice = [a for i, a in enumerate(normal) if a in normal[:i]]
    if twice:
        raise OpError(f"reduce's axes must be distinct; received {given}, which names axis {twice[0]} twice", "axis")
    axes = sorted(normal)
    out = tuple(1 if i in axes else d for i, d in enumerate(shape)) if layer.keepdims else \
        tuple(d for i, d in enumerate(shape) if i not in axes)
    return OpResult(out, dtype, {"kind": layer.kind, "axes": tuple(axes), "keepdims": layer.keepdims},
                    flops=prod(shape))


def tf_attrs(node: Node) -> dict[str, Any]:
    axes = node.params["axes"]
    return {"call": TF_CALLS[node.params["kind"]], "axis": axes[0] if len(axes) == 1 else list(axes),
            "keepdims": node.params["keepdims"]}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"operator": ONNX_OPS[node.params["kind"]], "keepdims": int(node.params["keepdims"]),
            "axes": ctx.constant(f"{node.onnx_name}___axes", list(node.params["axes"]))}


def moments(node: Node, ins: list[Moments | None], weight: WeightMoments, activation: ActivationMoments) -> Outputs | str:
    """Over the last axis (a layer's units, features or channels) the values are independent Gaussians (the max or
    min of n of them by their order statistics; the mean keeps the mean and has 1/n of the variance; the sum n times
    the mean and n times the variance); over the other axes (positions) they are equal, as the pools take them (the
    mean, max and min keep the moments; the sum multiplies the values by the count)."""
    x, shape, p = ins[0], node.input_shapes[0], node.params
    assert x is not None  # reads()
    last = len(shape) - 1
    units = shape[last] if last in p["axes"] else 1
    positions = [shape[a] for a in p["axes"] if a != last]
    if not isinstance(units, int) or (p["kind"] == "sum" and not all(isinstance(n, int) for n in positions)):
        named = next(n for n in (units, *positions) if not isinstance(n, int))
        return (f"its {p['kind']} runs over the named dimension '{named}', whose size (known only at run time) sets "
                "its scale")
    kind, count = p["kind"], int(units)
    if kind in ("max", "min"):
        out = largest(x, count, 1.0 if kind == "max" else -1.0)
    elif kind == "mean":
        out = x[0], x[0] * x[0] + variance(x) / count
    else:
        out = count * x[0], count * variance(x) + count * count * x[0] * x[0]
    if kind == "sum":
        times = math.prod(int(n) for n in positions if isinstance(n, int))
        out = times * out[0], times * times * out[1]
    return {"": out}


OPS = (OpDef("reduce", Reduce, infer, tf_attrs, onnx_attrs, moments=Derived(moments, lambda node: (0,))),)
