"""elu, selu and softplus: element-wise activations built on exp, as Keras defines them.

ONNX has one operator for each (Elu, Selu, Softplus); ONNX Selu's default alpha and gamma are
the float32 values of the constants TensorFlow's selu uses, so no attributes are written.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from specgen.fields.base import NonNegativeFloat
from specgen.fields.layers import LayerBase
from specgen.kinds.ops.activations import infer
from specgen.kinds.ops.base import PASSES_MASK, AsActivation, OnnxContext, OpDef, OpResult, Pointwise, Rule
from specgen.kinds.ops.moments import SELU_ALPHA, SELU_SCALE, simpson, softplus
from specgen.kinds.ops.nodes import Node, Shape


class Elu(LayerBase):
    op: Literal["elu"]
    alpha: NonNegativeFloat = 1.0


class ExpActivation(LayerBase):
    op: Literal["selu", "softplus"]


def elu(layer: Elu, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    result = infer(layer, shapes, dtypes)
    result.params["alpha"] = layer.alpha
    result.flops *= 4  # compare, exp, subtract, scale
    return result


def per_element(flops: int) -> Rule:
    """A rule for a parameterless activation costing `flops` per element."""

    def rule(layer: ExpActivation, shapes: list[Shape], dtypes: list[str]) -> OpResult:
        result = infer(layer, shapes, dtypes)
        result.flops *= flops
        return result

    return rule


def elu_tf_attrs(node: Node) -> dict[str, Any]:
    return {"alpha": node.params["alpha"]}


def elu_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"alpha": node.params["alpha"]}


ELU = Pointwise(simpson(lambda x, p: x if x > 0 else p * math.expm1(x)), he=True)
SELU = Pointwise(simpson(lambda x, p: SELU_SCALE * (x if x > 0 else SELU_ALPHA * math.expm1(x))))
SOFTPLUS = Pointwise(simpson(lambda x, p: softplus(x)), he=True)

OPS = (
    OpDef("elu", Elu, elu, elu_tf_attrs, elu_onnx_attrs, layout="any", symbolic=True,
          as_activation=AsActivation(4, {"alpha": 1.0}, lambda first, ctx, out: {"alpha": 1.0}), mask=PASSES_MASK,
          moments="pointwise", pointwise=ELU, keras=("ELU",)),
    OpDef("selu", ExpActivation, per_element(5), layout="any", symbolic=True, as_activation=AsActivation(5),
          mask=PASSES_MASK, moments="pointwise", pointwise=SELU),
    OpDef("softplus", ExpActivation, per_element(3), layout="any", symbolic=True, as_activation=AsActivation(3),
          mask=PASSES_MASK, moments="pointwise", pointwise=SOFTPLUS),
)
