"""multi_head_attention: Keras' MultiHeadAttention as self-attention over [batch, time, features].

Variables are Keras' (`query/kernel` [d, heads, key_dim], `query/bias` [heads, key_dim], `key/...`,
`value/...` with value_dim, `attention_output/kernel` [heads, value_dim, d], `attention_output/bias`
[d]), so Keras weights restore by identity. ONNX sees every kernel reshaped to a plain matrix
([d, heads*key_dim], [heads*value_dim, d]): one MatMul per projection, then Reshape/Transpose to
heads, MatMul, Softmax, MatMul (plain nodes at every opset specgen pins; the fused opset-23
Attention node is a later step). The causal mask is built from the runtime length (Trilu), so any
time length works. The time dimension is copied through as the input shape holds it.
"""

from __future__ import annotations

import math
import zlib
from typing import Any, Literal

from pydantic import Field

from specgen import text
from specgen.kinds.ops.base import OnnxContext, OpDef, OpError, OpResult, VarDecl, require_float, resolve_init
from specgen.kinds.ops.nodes import Node, Shape
from specgen.spec.base import PositiveInt, number
from specgen.spec.layers import InitializerSpec, LayerBase

MASKED = -1e9  # Keras' large negative number for float32 masked scores (keras Softmax layer)


class MultiHeadAttention(LayerBase):
    op: Literal["multi_head_attention"]
    num_heads: PositiveInt
    key_dim: PositiveInt = Field(description="Size of each head's query and key.")
    value_dim: PositiveInt | None = Field(None, description="Size of each head's value; defaults to key_dim.")
    use_bias: bool = True
    dropout: number(float, ge=0, lt=1) = Field(0.0, description="Dropout on the attention weights, in training only.")
    causal: bool = Field(False, description="Each step attends to itself and earlier steps only (Keras' "
                                            "use_causal_mask).")
    kernel_init: InitializerSpec = "glorot_uniform"
    bias_init: InitializerSpec = "zeros"


def _variables(layer: MultiHeadAttention, d: int) -> list[VarDecl]:
    heads, k = layer.num_heads, layer.key_dim
    v = layer.value_dim or k
    kernel, bias = resolve_init(layer.kernel_init), resolve_init(layer.bias_init)
    found: list[VarDecl] = []
    for part, size in (("query", k), ("key", k), ("value", v)):
        found.append(VarDecl(f"{part}/kernel", (d, heads, size), kernel, onnx_shape=(d, heads * size)))
        if layer.use_bias:
            found.append(VarDecl(f"{part}/bias", (heads, size), bias, onnx_shape=(heads * size,)))
    found.append(VarDecl("attention_output/kernel", (heads, v, d), kernel, onnx_shape=(heads * v, d)))
    if layer.use_bias:
        found.append(VarDecl("attention_output/bias", (d,), bias))
    return found


def infer(layer: MultiHeadAttention, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_float(dtype, layer.op)
    if len(shape) != 3:
        raise OpError(f"{layer.op} needs a rank-3 input (batch, time, features); received {text.shape(shape)}",
                      "input")
    d = shape[2] or 0
    params = {"num_heads": layer.num_heads, "key_dim": layer.key_dim, "value_dim": layer.value_dim or layer.key_dim,
              "use_bias": layer.use_bias, "dropout": layer.dropout, "causal": layer.causal}
    steps = shape[1] if isinstance(shape[1], int) else 1  # a named time dimension: FLOPs per position of it
    return OpResult(shape, params=params, variables=_variables(layer, d), flops=flops(layer, steps, d))


def flops(layer: MultiHeadAttention, steps: int, d: int) -> int:
    """One example: the four projections, scores and weighted sum (2 per multiply-add), the scale,
    the softmax (about 5 per score: max, subtract, exp, sum, divide) and the biases."""
    heads, k = layer.num_heads, layer.key_dim
    v = layer.value_dim or k
    projections = 2 * steps * d * heads * (2 * k + v) + 2 * steps * heads * v * d
    scores = heads * steps * steps * (2 * k + 5 + 2 * v)
    biases = steps * (heads * (2 * k + v) + d) if layer.use_bias else 0
    return projections + scores + steps * heads * k + biases


def tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    # The salt (layer name, 20 bits) gives the layer's dropout its own stream, as the dropout op does.
    return {"key_dim": p["key_dim"], "causal": p["causal"], "dropout": p["dropout"],
            "salt": zlib.crc32(node.name.encode()) & 0xFFFFF}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    p, name = node.params, node.onnx_name
    heads, k, v = p["num_heads"], p["key_dim"], p["value_dim"]
    roles = list(node.variables)  # the weights follow the input in s.ins, in VarDecl order
    found: dict[str, Any] = {
        "w": {role.replace("/", "_"): 1 + i for i, role in enumerate(roles)}, "bias": p["use_bias"],
        "split_k": ctx.constant(f"{name}___split_k", [0, 0, heads, k]),
        "split_v": ctx.constant(f"{name}___split_v", [0, 0, heads, v]),
        "merge": ctx.constant(f"{name}___merge", [0, 0, heads * v]),
        "scale": ctx.float_constant(f"{name}___scale", 1.0 / math.sqrt(k)),
        "causal": p["causal"],
    }
    if p["causal"]:
        found["one"] = ctx.float_constant(f"{name}___one", 1.0)
        found["masked"] = ctx.float_constant(f"{name}___masked_value", MASKED)
    return found


OPS = (OpDef("multi_head_attention", MultiHeadAttention, infer, tf_attrs, onnx_attrs, symbolic=True),)
