"""Element-wise activations: relu, gelu, sigmoid, tanh, leaky_relu, softmax.

Each is a layer op and may also be named in a layer's `activation:` key (AsActivation:
its FLOPs per element there and its attributes at default parameters). A new activation
gets its own module; list it in `Activation` (spec/layers.py) to allow it in `activation:`.
"""

from __future__ import annotations

from typing import Any, Literal

from specgen.ir.model import Node, Shape
from specgen.ir.ops.base import (
    AsActivation,
    OnnxContext,
    OpDef,
    OpResult,
    axis_in,
    held_axis,
    prod,
    require_float,
)
from specgen.spec.base import Int, NonNegativeFloat
from specgen.spec.layers import LayerBase


class ActivationLayer(LayerBase):
    op: Literal["relu", "gelu", "sigmoid", "tanh"]


class LeakyRelu(LayerBase):
    op: Literal["leaky_relu"]
    alpha: NonNegativeFloat = 0.2


class Softmax(LayerBase):
    op: Literal["softmax"]
    axis: Int = -1


def infer(layer: Any, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, layer.op)
    return OpResult(shape, flops=prod(shape))


def leaky_relu(layer: LeakyRelu, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    result = infer(layer, shapes, dtypes)
    result.params["alpha"] = layer.alpha
    return result


def softmax(layer: Softmax, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    result = infer(layer, shapes, dtypes)
    result.params["axis"] = axis_in(layer.axis, len(shapes[0]), "axis")
    return result


def alpha_tf_attrs(node: Node) -> dict[str, Any]:
    return {"alpha": node.params["alpha"]}


def alpha_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"alpha": node.params["alpha"]}


def axis_tf_attrs(node: Node) -> dict[str, Any]:
    return {"axis": node.params["axis"]}


def axis_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"axis": held_axis(node.params["axis"], len(node.shape), first)}


def gelu_formula(ctx: OnnxContext, out: str) -> dict[str, Any]:
    """Opsets before 20 have no Gelu: the template spells out x * (1 + erf(x / sqrt 2)) / 2."""
    if ctx.opset >= 20:
        return {}
    names = {k: f"{out}___{k}" for k in ("sqrt2", "one", "half")}
    for key, value in (("sqrt2", 1.4142135623730951), ("one", 1.0), ("half", 0.5)):
        ctx.float_constant(names[key], value)
    return {"formula": names}


def gelu_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return gelu_formula(ctx, node.onnx_name)


OPS = (
    OpDef("relu", ActivationLayer, infer, layout="any", as_activation=AsActivation(1)),
    OpDef("leaky_relu", LeakyRelu, leaky_relu, alpha_tf_attrs, alpha_onnx_attrs, layout="any",
          as_activation=AsActivation(2, {"alpha": 0.2}, lambda first, ctx, out: {"alpha": 0.2})),
    OpDef("gelu", ActivationLayer, infer, onnx_attrs=gelu_onnx_attrs, layout="any",
          as_activation=AsActivation(8, {}, lambda first, ctx, out: gelu_formula(ctx, out))),
    OpDef("sigmoid", ActivationLayer, infer, layout="any", as_activation=AsActivation(4)),
    OpDef("tanh", ActivationLayer, infer, layout="any", as_activation=AsActivation(4)),
    OpDef("softmax", Softmax, softmax, axis_tf_attrs, axis_onnx_attrs, layout="any",
          as_activation=AsActivation(5, {"axis": -1}, lambda first, ctx, out: {"axis": 1 if first else -1})),
)
