"""flatten and reshape: per-example shape changes, in channels-last order like Keras."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field

from specgen import text
from specgen.fields.base import bounds
from specgen.fields.layers import LayerBase
from specgen.kinds.ops.base import MaskRule, OnnxContext, OpDef, OpError, OpResult
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import prod


class Flatten(LayerBase):
    op: Literal["flatten"]


class Reshape(LayerBase):
    op: Literal["reshape"]
    shape: Annotated[list[Annotated[int, *bounds(int, ge=-1)]],
                     Field(min_length=1, description="Without the batch dimension; one -1 allowed.")]


def flatten(layer: Flatten, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    return OpResult((None, prod(shape[1:])), dtype, {"size": prod(shape[1:])})


def reshape(layer: Reshape, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    total, target = prod(shape[1:]), list(layer.shape)
    unknown = [i for i, d in enumerate(target) if d == -1]
    if len(unknown) > 1 or 0 in target:
        raise OpError(f"reshape takes positive sizes and at most one -1; received {target}", "shape")
    known = math.prod(d for d in target if d != -1)
    if unknown and total % known == 0:
        target[unknown[0]] = total // known
    if math.prod(target) != total:
        raise OpError(f"cannot reshape {text.shape(shape)} ({total} values per example) to "
                      f"{text.shape((None, *layer.shape))}", "shape")
    return OpResult((None, *target), dtype, {"shape": tuple(target)})


def flatten_tf_attrs(node: Node) -> dict[str, Any]:
    return {"shape": [-1, node.params["size"]]}


def reshape_tf_attrs(node: Node) -> dict[str, Any]:
    return {"shape": [-1, *node.params["shape"]]}


def reshape_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"shape": ctx.constant(f"{node.onnx_name}___shape", [-1, *node.params["shape"]])}


OPS = (
    OpDef("flatten", Flatten, flatten, flatten_tf_attrs, moments="same", flatten_order="flattens", keras=("Flatten",),
          mask=MaskRule(reason="it removes the time axis the mask marks (Keras drops the mask there)",
                        keras_drops="Flatten")),
    OpDef("reshape", Reshape, reshape, reshape_tf_attrs, reshape_onnx_attrs, moments="same", keras=("Reshape",),
          mask=MaskRule(reason="it reshapes the time axis the mask marks (Keras drops the mask there)",
                        keras_drops="Reshape")),
)
