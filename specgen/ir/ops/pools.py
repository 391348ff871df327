"""max_pool, avg_pool and global_avg_pool: window reductions, channels-first in ONNX."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from specgen.ir.model import Node, Shape
from specgen.ir.ops.base import OnnxContext, OpDef, OpResult, pair, prod, require_float, require_rank, spatial
from specgen.spec.layers import LayerBase, Padding, Size2


class Pool(LayerBase):
    op: Literal["max_pool", "avg_pool"]
    size: Size2
    strides: Size2 | None = Field(None, description="Defaults to `size`.")
    padding: Padding = "valid"


class GlobalAvgPool(LayerBase):
    op: Literal["global_avg_pool"]


def pool(layer: Pool, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_rank(shape, 4, layer.op)
    require_float(dtype, layer.op)
    size = pair(layer.size)
    strides = pair(layer.strides if layer.strides is not None else layer.size)
    (h, w), pads = spatial(shape, size, strides, (1, 1), layer.padding, "size")
    params = {"size": size, "strides": strides, "padding": layer.padding, "pads": pads}
    return OpResult((None, h, w, shape[3]), params=params, flops=h * w * (shape[3] or 0) * size[0] * size[1])


def global_avg_pool(layer: GlobalAvgPool, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_rank(shape, 4, "global_avg_pool")
    require_float(dtype, "global_avg_pool")
    return OpResult((None, shape[3]), flops=prod(shape))


def pool_tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    return {"ksize": list(p["size"]), "strides": list(p["strides"]), "padding": p["padding"].upper()}


def pool_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    p = node.params
    return {"kernel_shape": list(p["size"]), "strides": list(p["strides"]), "pads": p["pads"]}


def global_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"axes": ctx.constant(f"{node.onnx_name}___axes", [2, 3])}  # spatial axes, channels-first


OPS = (
    OpDef("max_pool", Pool, pool, pool_tf_attrs, pool_onnx_attrs, layout="first"),
    OpDef("avg_pool", Pool, pool, pool_tf_attrs, pool_onnx_attrs, layout="first"),
    OpDef("global_avg_pool", GlobalAvgPool, global_avg_pool, onnx_attrs=global_onnx_attrs, layout="first"),
)
