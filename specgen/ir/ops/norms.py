"""batch_norm and layer_norm: the epsilon is always written out (Keras 1e-3, ONNX 1e-5 by default)."""

from __future__ import annotations

from typing import Any, Literal

from specgen.ir.model import Init, Node, Shape
from specgen.ir.ops.base import OnnxContext, OpDef, OpError, OpResult, VarDecl, prod, require_float, show
from specgen.spec.base import PositiveFloat, number
from specgen.spec.layers import LayerBase


class BatchNorm(LayerBase):
    op: Literal["batch_norm"]
    momentum: number(float, gt=0, lt=1) = 0.99
    epsilon: PositiveFloat = 1e-3


class LayerNorm(LayerBase):
    op: Literal["layer_norm"]
    epsilon: PositiveFloat = 1e-3


def batch_norm(layer: BatchNorm, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, "batch_norm")
    if len(shape) < 2:
        raise OpError(f"batch_norm needs a channel axis; received {show(shape)}", "input")
    channels = shape[-1] or 0
    params = {"momentum": layer.momentum, "epsilon": layer.epsilon, "axes": tuple(range(len(shape) - 1))}
    result = OpResult(shape, params=params, flops=2 * prod(shape))
    result.variables += [
        VarDecl("gamma", (channels,), Init("ones")),
        VarDecl("beta", (channels,), Init("zeros")),
        VarDecl("moving_mean", (channels,), Init("zeros"), "update"),
        VarDecl("moving_variance", (channels,), Init("ones"), "update"),
    ]
    return result


def layer_norm(layer: LayerNorm, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, "layer_norm")
    if len(shape) < 2:
        raise OpError(f"layer_norm needs a feature axis; received {show(shape)}", "input")
    channels = shape[-1] or 0
    result = OpResult(shape, params={"epsilon": layer.epsilon}, flops=8 * prod(shape))
    result.variables += [VarDecl("gamma", (channels,), Init("ones")), VarDecl("beta", (channels,), Init("zeros"))]
    return result


def batch_norm_tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    return {"axes": list(p["axes"]), "momentum": p["momentum"], "epsilon": p["epsilon"]}


def layer_norm_tf_attrs(node: Node) -> dict[str, Any]:
    return {"epsilon": node.params["epsilon"]}


def epsilon_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"epsilon": node.params["epsilon"]}


OPS = (
    # ONNX BatchNormalization normalizes axis 1: channels-first.
    OpDef("batch_norm", BatchNorm, batch_norm, batch_norm_tf_attrs, epsilon_onnx_attrs, layout="first"),
    # LayerNormalization is written with axis -1: channels-last.
    OpDef("layer_norm", LayerNorm, layer_norm, layer_norm_tf_attrs, epsilon_onnx_attrs),
)
