"""dense: a matmul over the last axis (Gemm for rank 2, MatMul + Add above), plus bias."""

from __future__ import annotations

from typing import Any, Literal

from specgen import text
from specgen.fields.base import Flag, PositiveInt
from specgen.fields.layers import Activation, LayerBase
from specgen.kinds.initializers import InitializerSpec
from specgen.kinds.ops.base import PASSES_MASK, OnnxContext, OpDef, OpError, OpResult, VarDecl, Weighted, resolve_init
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import fixed, prod, require_float


class Dense(LayerBase):
    op: Literal["dense"]
    units: PositiveInt
    activation: Activation | None = None
    use_bias: Flag = True
    kernel_init: InitializerSpec = "glorot_uniform"
    bias_init: InitializerSpec = "zeros"


def infer(layer: Dense, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, "dense")
    if len(shape) < 2:
        raise OpError(f"dense needs an input with a feature axis; received {text.shape(shape)}", "input")
    fan_in = fixed(shape[-1], "dense's last axis (its kernel's rows)")
    result = OpResult((*shape[:-1], layer.units), params={"rank": len(shape)})
    result.variables.append(VarDecl("kernel", (fan_in, layer.units), resolve_init(layer.kernel_init)))
    if layer.use_bias:
        result.variables.append(VarDecl("bias", (layer.units,), resolve_init(layer.bias_init)))
    rows = prod(shape[:-1])
    result.flops = rows * layer.units * (2 * fan_in + (1 if layer.use_bias else 0))
    return result


def tf_attrs(node: Node) -> dict[str, Any]:
    rank = node.params["rank"]
    return {"rank": rank, "last": rank - 1}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    if node.params["rank"] > 2:
        return {"matmul": f"{node.onnx_name}___matmul", "bias": "bias" in node.variables}
    return {}


def onnx_variant(node: Node) -> str:
    """ONNX Gemm takes rank-2 inputs only; above that, MatMul (+ Add)."""
    return "dense_nd" if node.params["rank"] > 2 else "dense"


OPS = (OpDef("dense", Dense, infer, tf_attrs, onnx_attrs, onnx_variant=onnx_variant, onnx_variants=("dense_nd",),
              symbolic=True, mask=PASSES_MASK, moments=Weighted(), flatten_order="kernel_rows", keras=("Dense",),
              training_only=("kernel_init", "bias_init")),)
