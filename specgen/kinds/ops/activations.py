"""Element-wise activations: relu (with max_value), relu6, gelu, sigmoid, tanh, leaky_relu, softmax.

Each is a layer op and may also be named in a layer's `activation:` key (AsActivation:
its FLOPs per element there and its attributes at default parameters). A new activation
gets its own module (exponential.py: elu, selu, softplus; gates.py: swish, hard_sigmoid,
hard_swish); list it in `Activation` (fields/layers.py) to allow it in `activation:`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from specgen.fields.base import Int, NonNegativeFloat
from specgen.fields.layers import LayerBase
from specgen.kinds.ops.base import (
    PASSES_MASK,
    AsActivation,
    MaskRule,
    Moments,
    OnnxContext,
    OpDef,
    OpResult,
    Pointwise,
    Unmodelled,
)
from specgen.kinds.ops.moments import TANH_EDGE, cdf, integrated, rectified, relu_max, sigmoid, simpson
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import axis_in, held_axis, prod, require_float


class ActivationLayer(LayerBase):
    op: Literal["gelu", "sigmoid", "tanh", "relu6"]


class Relu(LayerBase):
    op: Literal["relu"]
    max_value: NonNegativeFloat | None = Field(None, description="Saturation value (Keras ReLU max_value).")


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


def relu(layer: Relu, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    result = infer(layer, shapes, dtypes)
    if layer.max_value is not None:
        result.params["max_value"] = layer.max_value
        result.flops *= 2  # max and min
    return result


def relu6(layer: ActivationLayer, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    result = infer(layer, shapes, dtypes)
    result.flops *= 2  # max and min
    return result


def leaky_relu(layer: LeakyRelu, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    result = infer(layer, shapes, dtypes)
    result.params["alpha"] = layer.alpha
    return result


def softmax(layer: Softmax, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    result = infer(layer, shapes, dtypes)
    result.params["axis"] = axis_in(layer.axis, len(shapes[0]), "axis")
    return result


def relu_tf_attrs(node: Node) -> dict[str, Any]:
    # The template takes tf.nn.relu6 for a max_value of 6, as Keras' ReLU does (same gradients).
    return {"max_value": node.params["max_value"]} if "max_value" in node.params else {}


def clip_constants(ctx: OnnxContext, out: str, high: float) -> dict[str, Any]:
    """Clip takes its bounds as inputs (opset >= 11): two float scalars named after the node."""
    return {"min": ctx.float_constant(f"{out}___min", 0.0), "max": ctx.float_constant(f"{out}___max", high)}


def relu_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    if "max_value" not in node.params:
        return {}
    return clip_constants(ctx, node.onnx_name, float(node.params["max_value"]))


def relu_onnx_variant(node: Node) -> str:
    """Relu, or one Clip(x, 0, max_value) when the layer saturates."""
    return "clip" if "max_value" in node.params else "relu"


def relu6_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return clip_constants(ctx, node.onnx_name, 6.0)


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


def relu_moments(mean: float, std: float, params: Mapping[str, Any]) -> Moments:
    top = params.get("max_value")
    return rectified(mean, std) if top is None else integrated(relu_max, float(top), mean, std)


def leaky_relu_moments(mean: float, std: float, params: Mapping[str, Any]) -> Moments:
    """relu(x) - alpha * relu(-x), whose product is 0."""
    alpha = float(params.get("alpha", 0.2))
    (m1, q1), (m2, q2) = rectified(mean, std), rectified(-mean, std)
    return m1 - alpha * m2, q1 + alpha * alpha * q2


def _slope_words(name: str) -> str:
    return f"where {name}'s slope is under a tenth of its peak"


RELU = Pointwise(relu_moments, he=True)
RELU6 = Pointwise(lambda mean, std, params: integrated(relu_max, 6.0, mean, std), he=True)
LEAKY_RELU = Pointwise(leaky_relu_moments, he=True)
GELU = Pointwise(simpson(lambda x, p: x * cdf(x)), he=True)
# sigmoid's slope s(1 - s) < 0.025 is tanh's condition twice as far out (tanh(x) = 2 sigmoid(2x) - 1).
SIGMOID = Pointwise(simpson(lambda x, p: sigmoid(x)), saturates=(2 * TANH_EDGE, _slope_words("sigmoid")))
TANH = Pointwise(simpson(lambda x, p: math.tanh(x)), saturates=(TANH_EDGE, _slope_words("tanh")))
# A softmax's outputs are probabilities along its axis: their mean is 1 / size, and their spread is set by how unequal
# the logits are, through a normalizing sum of exponentials that the logits' mean and variance do not fix in closed
# form (from 0 for equal logits to about 1 / sqrt(size) for one-hot outputs).
SOFTMAX_MOMENTS = Unmodelled("a softmax's outputs are probabilities along its axis (mean 1/size), whose spread depends "
                             "on the logits through a normalizing sum of exponentials with no closed form in their "
                             "mean and variance (from 0 for equal logits to about 1/sqrt(size) when one-hot)")
SOFTMAX_MASK = MaskRule(reason="Keras' Softmax layer applies the [batch, time] mask to its own axis, not to the steps")

OPS = (
    OpDef("relu", Relu, relu, relu_tf_attrs, relu_onnx_attrs, layout="any", symbolic=True, onnx_variant=relu_onnx_variant,
          onnx_variants=("clip",), as_activation=AsActivation(1), mask=PASSES_MASK, moments="pointwise", pointwise=RELU,
          non_negative=True, keras=("ReLU",)),
    OpDef("relu6", ActivationLayer, relu6, onnx_attrs=relu6_onnx_attrs, layout="any", symbolic=True, onnx_template="clip",
          as_activation=AsActivation(2, {}, lambda first, ctx, out: clip_constants(ctx, out, 6.0)), mask=PASSES_MASK,
          moments="pointwise", pointwise=RELU6, non_negative=True),
    OpDef("leaky_relu", LeakyRelu, leaky_relu, alpha_tf_attrs, alpha_onnx_attrs, layout="any", symbolic=True,
          as_activation=AsActivation(2, {"alpha": 0.2}, lambda first, ctx, out: {"alpha": 0.2}), mask=PASSES_MASK,
          moments="pointwise", pointwise=LEAKY_RELU, keras=("LeakyReLU",)),
    OpDef("gelu", ActivationLayer, infer, onnx_attrs=gelu_onnx_attrs, layout="any", symbolic=True,
          as_activation=AsActivation(8, {}, lambda first, ctx, out: gelu_formula(ctx, out)), mask=PASSES_MASK,
          moments="pointwise", pointwise=GELU),
    OpDef("sigmoid", ActivationLayer, infer, layout="any", symbolic=True, as_activation=AsActivation(4),
          mask=PASSES_MASK, moments="pointwise", pointwise=SIGMOID, probabilities=True),
    OpDef("tanh", ActivationLayer, infer, layout="any", symbolic=True, as_activation=AsActivation(4), mask=PASSES_MASK,
          moments="pointwise", pointwise=TANH),
    OpDef("softmax", Softmax, softmax, axis_tf_attrs, axis_onnx_attrs, layout="any", symbolic=True,
          as_activation=AsActivation(5, {"axis": -1}, lambda first, ctx, out: {"axis": 1 if first else -1}),
          mask=SOFTMAX_MASK, moments=SOFTMAX_MOMENTS, keras=("Softmax",), probabilities=True),
)
