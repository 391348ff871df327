"""swish (silu), hard_sigmoid and hard_swish (hard_silu): x times a gate, and the hard gate.

Keras 3 definitions: swish(x) = x * sigmoid(x); hard_sigmoid(x) = relu6(x + 3) / 6 (not the
Keras 2 slope of 0.2); hard_swish(x) = x * hard_sigmoid(x). `silu` and `hard_silu` are the
same ops under Keras' other names, accepted wherever the first names are.
ONNX: Sigmoid then Mul for swish (the opsets specgen writes have no Swish operator),
HardSigmoid with alpha 1/6 and beta 0.5, HardSwish (opset 14).
"""

from __future__ import annotations

from typing import Literal

from specgen.fields.layers import LayerBase
from specgen.kinds.ops.activations import infer
from specgen.kinds.ops.base import PASSES_MASK, AsActivation, OpDef, OpResult, Pointwise
from specgen.kinds.ops.moments import sigmoid, simpson
from specgen.kinds.ops.nodes import Shape

CANONICAL = {"silu": "swish", "hard_silu": "hard_swish"}  # Keras' other names -> the op whose templates they use
# Per element: sigmoid (4) and a multiply; add, two clamps and a divide; that and a multiply.
FLOPS = {"swish": 5, "hard_sigmoid": 4, "hard_swish": 5}


class Gate(LayerBase):
    op: Literal["swish", "silu", "hard_sigmoid", "hard_swish", "hard_silu"]


def gate(layer: Gate, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    result = infer(layer, shapes, dtypes)
    result.flops *= FLOPS[CANONICAL.get(layer.op, layer.op)]
    return result


def _hard(x: float) -> float:
    return min(max(x / 6 + 0.5, 0.0), 1.0)


POINTWISE = {  # by template: silu and hard_silu are swish and hard_swish
    "swish": Pointwise(simpson(lambda x, p: x * sigmoid(x)), he=True),
    "hard_sigmoid": Pointwise(simpson(lambda x, p: _hard(x)), saturates=(3.0, "where hard_sigmoid is flat")),
    "hard_swish": Pointwise(simpson(lambda x, p: x * _hard(x)), he=True),
}


def _op(name: str) -> OpDef:
    template = CANONICAL.get(name, name)
    # Keras 2's hard_sigmoid is 0.2 * x + 0.5, clipped; specgen's is Keras 3's relu6(x + 3) / 6.
    return OpDef(name, Gate, gate, layout="any", symbolic=True, tf_template=template, onnx_template=template,
                 as_activation=AsActivation(FLOPS[template], keras2=name != "hard_sigmoid"), mask=PASSES_MASK,
                 moments="pointwise", pointwise=POINTWISE[template], probabilities=name == "hard_sigmoid")


OPS = tuple(_op(name) for name in ("swish", "silu", "hard_sigmoid", "hard_swish", "hard_silu"))
