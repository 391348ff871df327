"""gelu_approximate: GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).

Keras' `gelu(x, approximate=True)`, and KerasHub's `gelu_approximate` (the feedforward activation of
its GPT-2 and BERT backbones). An op of its own rather than a key on `gelu`: a layer's `activation:`
takes a name, and the name here is KerasHub's. ONNX: one `Gelu <approximate = "tanh">` node from
opset 20, the formula spelled out in plain nodes below it.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from specgen.fields.layers import LayerBase
from specgen.kinds.ops.base import PASSES_MASK, AsActivation, OnnxContext, OpDef, OpResult, Pointwise
from specgen.kinds.ops.moments import simpson
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import prod, require_float

CUBIC = 0.044715
FLOPS = 9  # per element in the formula: cube (2), scale and add (2), scale, tanh, add, two multiplies


class GeluApproximate(LayerBase):
    op: Literal["gelu_approximate"]


def infer(layer: GeluApproximate, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, layer.op)
    return OpResult(shape, flops=FLOPS * prod(shape))


def formula(ctx: OnnxContext, out: str) -> dict[str, Any]:
    """Opsets before 20 have no Gelu: the template spells out the tanh form with these constants."""
    if ctx.opset >= 20:
        return {}
    values = {"cubic": CUBIC, "root": math.sqrt(2.0 / math.pi), "one": 1.0, "half": 0.5}
    return {"formula": {k: ctx.float_constant(f"{out}___const_{k}", v) for k, v in values.items()}}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return formula(ctx, node.onnx_name)


def gelu_approximate(x: float) -> float:
    return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + CUBIC * x * x * x)))


POINTWISE = Pointwise(simpson(lambda x, p: gelu_approximate(x)), he=True)  # relu-like, as gelu
OPS = (OpDef("gelu_approximate", GeluApproximate, infer, onnx_attrs=onnx_attrs, layout="any", symbolic=True,
             as_activation=AsActivation(FLOPS, {}, lambda first, ctx, out: formula(ctx, out), keras=False),
             mask=PASSES_MASK, moments="pointwise", pointwise=POINTWISE),)  # no Keras activation of this name (KerasHub's)
