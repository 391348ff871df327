"""rms_norm: Keras 3's RMSNormalization over the last axis (keras.layers.RMSNormalization, the reference).

y = x * rsqrt(mean(x^2 over the last axis) + epsilon) * scale, with one learned `scale` per feature
(initialized to ones) and Keras' epsilon default 1e-6. There is no centring and no offset: that is
what distinguishes it from layer_norm. KerasHub's Gemma/Llama norms are the same formula with
`(1 + scale)` or a different epsilon; a spec writes that epsilon, and an importer maps the weight.
ONNX: at opset 23 one RMSNormalization node (axis -1, float32 throughout); below it the formula in plain
nodes (Mul, ReduceMean, Add, Sqrt, Div, Mul).
"""

from __future__ import annotations

from typing import Any, Literal

from specgen import text
from specgen.fields.base import PositiveFloat
from specgen.fields.layers import LayerBase
from specgen.kinds.ops.base import OnnxContext, OpDef, OpError, OpResult, VarDecl
from specgen.kinds.ops.nodes import Init, Node, Shape
from specgen.kinds.ops.shapes import fixed, prod, require_float

KERAS_EPSILON = 1e-6  # keras.layers.RMSNormalization's default


class RmsNorm(LayerBase):
    op: Literal["rms_norm"]
    epsilon: PositiveFloat = KERAS_EPSILON


def infer(layer: RmsNorm, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, "rms_norm")
    if len(shape) < 2:
        raise OpError(f"rms_norm needs a feature axis; received {text.shape(shape)}", "input")
    features = fixed(shape[-1], "rms_norm's feature axis")
    # Per value: square, sum (mean), multiply by the reciprocal and by scale; per row the add and sqrt.
    result = OpResult(shape, params={"epsilon": layer.epsilon}, flops=4 * prod(shape))
    result.variables.append(VarDecl("scale", (features,), Init("ones")))
    return result


def tf_attrs(node: Node) -> dict[str, Any]:
    return {"epsilon": node.params["epsilon"]}


FUSED_OPSET = 23  # ONNX RMSNormalization


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    name, epsilon = node.onnx_name, node.params["epsilon"]
    if ctx.opset >= FUSED_OPSET:
        return {"fused": True, "epsilon": epsilon}
    return {"fused": False, "epsilon": ctx.float_constant(f"{name}___epsilon", epsilon),
            "axes": ctx.constant(f"{name}___axes", [-1])}


OPS = (OpDef("rms_norm", RmsNorm, infer, tf_attrs, onnx_attrs, symbolic=True, compute_dtype="float32",
             moments="rms_normalized"),)
