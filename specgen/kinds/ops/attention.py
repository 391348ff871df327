"""multi_head_attention: Keras' MultiHeadAttention over [batch, time, features], self or cross.

Inputs: `input` (self-attention: query = value = key) or `inputs: [query, value]` / `[query, value, key]`
(Keras' call(query, value, key)), and an optional `attention_mask` layer or input ([batch, T, S], nonzero
= attend, Keras' attention_mask). Variables are Keras' (`query/kernel` [dq, heads, key_dim], `key/kernel`
[dk, heads, key_dim], `value/kernel` [dv, heads, value_dim], biases [heads, size], `attention_output/kernel`
[heads, value_dim, dq], `attention_output/bias` [dq]), so Keras weights restore by identity. `rotary`
applies KerasHub's RotaryEmbedding (rope_type linear) to the projected query and key, per head.

ONNX: every kernel is a plain matrix ([d, heads*size], [heads*value_dim, dq]), one MatMul (+Add) per
projection. At opset 23 the attention itself is one `Attention` node (3-D inputs, q/kv_num_heads, scale;
a mask goes in as a boolean [batch, 1, T, S] attn_mask, true = attend, so a masked key gets no weight whatever
its score, as with Keras' dot_product_attention's replaced scores; a query step whose mask allows no key is set
after the node as Keras gives it: `empty_rows` below). Below 23 it is plain nodes: Reshape/Transpose to heads,
MatMul, Where (masked scores replaced by Keras' value, `masked_value` below), Softmax, MatMul. Why
(bench/RESULTS.md, "attention node", onnxruntime 1.31 CPU, one thread): the three candidates (plain, opset-23
Attention, com.microsoft MultiHeadAttention) are within this machine's noise of each other at a BERT-base layer
(31.6 / 33.5 / 32.1 ms at batch 1, 245 / 241 / 229 ms at batch 8), and the
opset-23 node is fastest at a small one (0.54 / 0.42 / 0.52 ms); the standard node runs wherever opset 23
does (onnxruntime CPU and CUDA, Triton's onnxruntime backend, other runtimes) while a contrib op ties the
graph to onnxruntime, so the standard node is exported. Older opsets keep the plain nodes rather than
being refused: specs pinned at 18-22 keep exporting, and the default opset (21) leaves generated files
as they were. Causal masks come from the runtime lengths (Trilu; the
fused node's is_causal), so any time length runs through one graph.
"""

from __future__ import annotations

import math
import struct
import zlib
from typing import Annotated, Any, Literal

from pydantic import Field

from specgen import text
from specgen.fields.base import MAX_INT, Flag, LayerName, PositiveFloat, PositiveInt, SpecModel, bounds
from specgen.fields.layers import LayerBase
from specgen.kinds.dims import nominal
from specgen.kinds.initializers import InitializerSpec
from specgen.kinds.ops.base import (
    ActivationMoments,
    Derived,
    MaskRule,
    Moments,
    OnnxContext,
    OpDef,
    OpError,
    OpResult,
    Outputs,
    VarDecl,
    WeightMoments,
    resolve_init,
)
from specgen.kinds.ops.moments import plus, weighted
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import fixed

# Keras 3's masked-score values (specgen/runtime/lib/attention.py says where each comes from): its fused
# ops.dot_product_attention's (dropout 0), as the float32 it is, and its Softmax layer's (dropout > 0).
FUSED_MASKED: float = struct.unpack("<f", struct.pack("<f", -0.7 * 3.38953e38))[0]  # rounded to float32
SOFTMAX_MASKED = -1e9
FUSED_OPSET = 23  # the first opset with the Attention node (specgen/ir/training/build.py pins its IR version)
MASK_DTYPES = ("float32", "int32", "int64")  # nonzero = attend (Keras casts attention_mask to bool)


class Rotary(SpecModel):
    """KerasHub's RotaryEmbedding (rope_type linear) on the projected query and key of every head."""

    max_wavelength: PositiveFloat = 10000.0
    scaling_factor: Annotated[float, *bounds(float, ge=1)] = Field(1.0, description="Divides the frequencies (linear scaling).")


class MultiHeadAttention(LayerBase):
    op: Literal["multi_head_attention"]
    inputs: Annotated[list[LayerName], Field(min_length=2, max_length=3)] | None = Field(
        None, description="Cross-attention: [query, value] or [query, value, key] (Keras' call(query, value, key)); "
                          "without it the layer attends over `input` (self-attention).")
    attention_mask: LayerName | None = Field(
        None, description="A layer or input [batch, query time, key time]: nonzero where a query step may attend "
                          "to a key step (Keras' attention_mask).")
    num_heads: PositiveInt
    key_dim: PositiveInt = Field(description="Size of each head's query and key.")
    value_dim: PositiveInt | None = Field(None, description="Size of each head's value; defaults to key_dim.")
    use_bias: Flag = True
    dropout: Annotated[float, *bounds(float, ge=0, lt=1)] = Field(
        0.0, description="Dropout on the attention weights, in training only.")
    causal: Flag = Field(False, description="Each step attends to itself and earlier steps only (Keras' "
                                            "use_causal_mask).")
    query_mask: Flag = Field(True, description="Whether the query's padding mask (mask_zero) masks its rows, as "
                                               "Keras' MultiHeadAttention fills in query_mask. false: a padded query "
                                               "step attends to the allowed keys as a real one does (KerasHub's "
                                               "TransformerDecoder, whose attention takes no query_mask).")
    rotary: Rotary | None = Field(None, description="Rotary position embedding of query and key (needs an even "
                                                    "key_dim).")
    kernel_init: InitializerSpec = "glorot_uniform"
    bias_init: InitializerSpec = "zeros"


def _variables(layer: MultiHeadAttention, dims: dict[str, int]) -> list[VarDecl]:
    heads, k = layer.num_heads, layer.key_dim
    v = layer.value_dim or k
    kernel, bias = resolve_init(layer.kernel_init), resolve_init(layer.bias_init)
    found: list[VarDecl] = []
    for part, size in (("query", k), ("key", k), ("value", v)):
        d = dims[part]
        found.append(VarDecl(f"{part}/kernel", (d, heads, size), kernel, onnx_shape=(d, heads * size)))
        if layer.use_bias:
            found.append(VarDecl(f"{part}/bias", (heads, size), bias, onnx_shape=(heads * size,)))
    found.append(VarDecl("attention_output/kernel", (heads, v, dims["query"]), kernel,
                         onnx_shape=(heads * v, dims["query"])))
    if layer.use_bias:
        found.append(VarDecl("attention_output/bias", (dims["query"],), bias))
    return found


def roles(layer: MultiHeadAttention) -> dict[str, int]:
    """Input position of each role: query, value and key (self-attention: all 0), attention_mask if given."""
    count = len(layer.inputs) if layer.inputs else 1
    found = {"query": 0, "value": 1 if count > 1 else 0, "key": 2 if count > 2 else (1 if count > 1 else 0)}
    return found | ({"attention_mask": count} if layer.attention_mask else {})


def _sequence(layer: MultiHeadAttention, role: str, shape: Shape, dtype: str) -> int:
    """The fixed feature size of a rank-3 float input; a positioned error otherwise."""
    key = "inputs" if layer.inputs else "input"
    name = f"its {role} " if layer.inputs else "a "
    if len(shape) != 3 or dtype != "float32":
        raise OpError(f"{layer.op} needs {name}rank-3 float32 input (batch, time, features); received "
                      f"{text.shape(shape)} {dtype}", key)
    return fixed(shape[2], f"{layer.op}'s {role} features (its kernel's rows)", key)


def _differ(a: int | str | None, b: int | str | None) -> bool:
    """Two step counts that cannot be equal: two fixed sizes that differ. A named dimension may agree with any
    size at run time, another name included (the Keras importer names open sizes by axis: dim1, dim2, ...)."""
    return isinstance(a, int) and isinstance(b, int) and a != b


def _check_mask(layer: MultiHeadAttention, shape: Shape, dtype: str, query: Shape, key: Shape) -> None:
    want = (None, query[1], key[1])
    if dtype not in MASK_DTYPES or len(shape) != 3 or _differ(shape[1], query[1]) or _differ(shape[2], key[1]):
        raise OpError(f"attention_mask: received '{layer.attention_mask}' {text.shape(shape)} {dtype}; expected "
                      f"{text.shape(want)} (batch, query steps, key steps) of {', '.join(MASK_DTYPES)}",
                      "attention_mask")


def _check_fits(layer: MultiHeadAttention, d: int) -> None:
    """A kernel [d, heads, size] must hold at most MAX_INT values, as any tensor specgen sizes (its ONNX
    [d, heads * size] shape is read into int64 dims, and TensorFlow's index arithmetic is int32 here)."""
    size = max(layer.key_dim, layer.value_dim or layer.key_dim)
    if d * layer.num_heads * size > MAX_INT:
        raise OpError(f"num_heads: received {layer.num_heads} heads of {size} values over {d} features, a kernel of "
                      f"{d * layer.num_heads * size} values; expected at most {MAX_INT} (fewer heads or a smaller "
                      "key_dim / value_dim)", "num_heads")


def infer(layer: MultiHeadAttention, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    if layer.inputs and layer.input:
        raise OpError("received both input and inputs; expected input (self-attention) or inputs ([query, value] "
                      "or [query, value, key]: cross-attention)", "inputs")
    at = roles(layer)
    dims = {role: _sequence(layer, role, shapes[at[role]], dtypes[at[role]]) for role in ("query", "value", "key")}
    query, value, key = (shapes[at[r]] for r in ("query", "value", "key"))
    if _differ(key[1], value[1]):
        assert layer.inputs is not None  # a separate key is one of `inputs` (self-attention: key = value = query)
        raise OpError(f"inputs: received key '{layer.inputs[2]}' {text.shape(key)} and value '{layer.inputs[1]}' "
                      f"{text.shape(value)}; expected the same number of steps (each key step goes with a value step)",
                      "inputs")
    if "attention_mask" in at:
        _check_mask(layer, shapes[at["attention_mask"]], dtypes[at["attention_mask"]], query, key)
    _check_fits(layer, max(dims.values()))
    if layer.rotary and layer.key_dim % 2:
        raise OpError(f"rotary: received key_dim {layer.key_dim}; expected an even key_dim (rotary embedding "
                      "turns pairs of a head's features)", "rotary")
    params = {"num_heads": layer.num_heads, "key_dim": layer.key_dim, "value_dim": layer.value_dim or layer.key_dim,
              "use_bias": layer.use_bias, "dropout": layer.dropout, "causal": layer.causal, "roles": at,
              "query_mask": layer.query_mask,
              "rotary": layer.rotary.model_dump() if layer.rotary else None}
    steps = (nominal(query[1]), nominal(key[1]))  # a named step counts 1 (kinds/dims.py)
    return OpResult(query, params=params, variables=_variables(layer, dims), flops=flops(layer, steps, dims))


def flops(layer: MultiHeadAttention, steps: tuple[int, int], dims: dict[str, int]) -> int:
    """One example (a named step counts 1): the four projections, scores and weighted sum (2 per
    multiply-add), the scale, the softmax (about 5 per score: max, subtract, exp, sum, divide), the biases
    and the rotary embedding (3 per rotated value: two multiplies and an add)."""
    heads, k = layer.num_heads, layer.key_dim
    v = layer.value_dim or k
    t, s = steps
    dq, dk, dv = dims["query"], dims["key"], dims["value"]
    projections = 2 * heads * (t * dq * k + s * dk * k + s * dv * v) + 2 * t * heads * v * dq
    scores = heads * t * s * (2 * k + 5 + 2 * v)
    biases = (heads * (t * k + s * k + s * v) + t * dq) if layer.use_bias else 0
    rotary = 3 * heads * k * (t + s) if layer.rotary else 0
    return projections + scores + t * heads * k + biases + rotary


def tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    # The salt (layer name, 20 bits) gives the layer's dropout its own stream, as the dropout op does.
    return {"key_dim": p["key_dim"], "causal": p["causal"], "dropout": p["dropout"],
            "salt": zlib.crc32(node.name.encode()) & 0xFFFFF, "roles": p["roles"],
            "rotary": inverse_frequencies(p["key_dim"], p["rotary"]) if p["rotary"] else None,
            "inference_mode": node.inference_mode}  # a target network's: no dropout in training (ir/resolve.py)


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    p, name = node.params, node.onnx_name
    heads, k, v, at = p["num_heads"], p["key_dim"], p["value_dim"], p["roles"]
    count = max(at.values()) + 1  # the weights follow the inputs in s.ins, in VarDecl order
    fused, mask = ctx.opset >= FUSED_OPSET, "attention_mask" in at
    found: dict[str, Any] = {
        "w": {role.replace("/", "_"): count + i for i, role in enumerate(node.variables)}, "bias": p["use_bias"],
        "roles": at, "heads": heads, "fused": fused, "scale": 1.0 / math.sqrt(k), "rot_freq": None,
        # The fused node takes a causal mask alone as is_causal; with an explicit mask, the two are and-ed first.
        "causal": p["causal"] and not (fused and not mask), "is_causal": p["causal"] and fused and not mask,
        "empty_rows": None,
    }
    # Only the constants the chosen nodes read: onnxruntime warns about (and drops) unused initializers.
    if not fused or p["rotary"]:  # per-head [batch, time, heads, key_dim] for the plain nodes or the rotation
        found["split_k"] = ctx.constant(f"{name}___split_k", [0, 0, heads, k])
    if fused and p["rotary"]:
        found["merge_k"] = ctx.constant(f"{name}___merge_k", [0, 0, heads * k])
    if not fused:
        found["split_v"] = ctx.constant(f"{name}___split_v", [0, 0, heads, v])
        found["scale_t"] = ctx.float_constant(f"{name}___scale", found["scale"])
        found["merge"] = ctx.constant(f"{name}___merge", [0, 0, heads * v])
    if not fused and (found["causal"] or mask):
        found["masked"] = ctx.float_constant(f"{name}___masked_value", masked_value(p["dropout"]))
    if found["causal"]:
        found["one"] = ctx.float_constant(f"{name}___one", 1.0)
    if mask:
        found["mask_axis"] = ctx.constant(f"{name}___mask_axis", [1])
    # A row of the mask may allow no key; and the plain nodes zero every masked weight under dropout > 0 as Keras'
    # Softmax layer does, which counts at a causal mask too once the allowed scores are below -1e9.
    if mask or (found["causal"] and p["dropout"] and not fused):
        found |= empty_rows(name, fused, p["dropout"], ctx)
    if p["rotary"]:
        found |= {"rot_zero": ctx.float_constant(f"{name}___rot_zero", 0.0),
                  "rot_step": ctx.float_constant(f"{name}___rot_step", 1.0),
                  "rot_axes": ctx.constant(f"{name}___rot_axes", [1, 2]),
                  "rot_half": ctx.constant(f"{name}___rot_half", [k // 2, k // 2]),
                  "rot_freq": inverse_frequencies(k, p["rotary"])}
    return found


def masked_value(dropout: float) -> float:
    """The value the plain nodes give a masked score: Keras' on the path MultiHeadAttention takes (Softmax layer when
    dropout > 0, else ops.dot_product_attention); float32 in ONNX, so the Softmax layer's float16 -3e4 never applies
    (the fp16 precision converts the graph after it is built)."""
    return SOFTMAX_MASKED if dropout > 0 else FUSED_MASKED


def empty_rows(name: str, fused: bool, dropout: float, ctx: OnnxContext) -> dict[str, Any]:
    """How a query step with no allowed key is exported, as Keras computes it (in inference too): with
    `dropout > 0` Keras' Softmax-layer path zeroes masked weights, so the row is zeros ("zero"); with
    `dropout: 0` its ops.dot_product_attention gives a softmax of equal masked scores, the mean of the values
    ("uniform"). The plain nodes replace masked scores as Keras does (Where: `masked_value`), so only "zero"
    needs a node there: a Where that zeroes every masked weight, as the Softmax layer does (not only those of
    empty rows: where a row's allowed scores are all below -1e9 its masked keys take the weight, which Keras then
    zeroes). The fused node's boolean mask leaves an empty row to the runtime (onnxruntime 1.31 and the ONNX
    reference give zeros; a naive -inf softmax gives NaN), so its output there is replaced with a Where (a Mul
    would keep a NaN) by zeros or by the mean of the values. Called for an explicit mask and a plain causal one
    here, and for a padding mask by specgen/render/mask_plan.py."""
    if not fused:
        return {"empty_rows": "zero", "rows_zero": ctx.float_constant(f"{name}___rows_zero", 0.0)} if dropout else {}
    found = {"empty_rows": "zero" if dropout else "uniform", "rows_last": ctx.constant(f"{name}___rows_last", [-1]),
             "rows_axis": ctx.constant(f"{name}___rows_axis", [1])}
    return found | ({"rows_zero": ctx.float_constant(f"{name}___rows_zero", 0.0)} if dropout else {})


def inverse_frequencies(k: int, rotary: dict[str, float]) -> list[float]:
    """KerasHub's linear rope: max_wavelength ** -(2i / k) / scaling_factor, computed in float32 as it does."""
    import numpy as np  # numpy only: no TensorFlow at build time

    idx = np.arange(0, k, 2, dtype=np.float32) / np.float32(k)
    inv = np.power(np.float32(rotary["max_wavelength"]), -idx).astype(np.float32)
    return [float(f) for f in (inv / np.float32(rotary["scaling_factor"])).astype(np.float32)]


def padding_roles(params: dict[str, Any]) -> tuple[str, ...]:
    """The roles whose padding mask goes into the attention mask: the query's as rows (unless `query_mask: false`),
    the value's and a distinct key's as columns."""
    distinct = params["roles"]["key"] != params["roles"]["value"]
    return tuple(r for r in ("query", "value", "key")
                 if (r != "query" or params["query_mask"]) and (r != "key" or distinct))


def mask_check(layer: MultiHeadAttention, masked: tuple[bool, ...], rank: int) -> str:
    if "attention_mask" in (at := roles(layer)) and masked[at["attention_mask"]]:
        return "its attention_mask input is a mask itself, not a sequence a padding mask marks"
    return ""


def moments(node: Node, ins: list[Moments | None], weight: WeightMoments, activation: ActivationMoments) -> Outputs:
    """The value projection (a weighted sum over the value's features, plus its bias), then the attention's
    weighted average over the keys, taken to keep those moments: its weights are non-negative and sum to 1, which
    keeps the mean exactly, and the second moment too where the values are equal along the keys (the positions
    assumption of the pools, docs/spec.md#lints) or the weights one-hot (uniform weights over S independent values
    would leave 1/S of the variance); then the output projection over heads * value_dim, plus its bias. The query
    and key set only the weights, so their scale does not enter."""
    value = ins[node.params["roles"]["value"]]
    assert value is not None  # reads()
    out = value
    for part in ("value", "attention_output"):
        kernel = node.variables[f"{part}/kernel"].shape
        fan = kernel[0] if part == "value" else kernel[0] * kernel[1]  # [d, heads, v]; [heads, v, d]
        out = weighted(out, fan, weight(f"{part}/kernel"))
        if f"{part}/bias" in node.variables:
            out = plus(out, weight(f"{part}/bias"))
    return {"": out}


# The query's mask as rows (unless query_mask: false), the value's and a distinct key's as columns of the attention
# mask; the output keeps the query's mask, as Keras sets it (KerasHub's TransformerDecoder too: supports_masking).
OPS = (OpDef("multi_head_attention", MultiHeadAttention, infer, tf_attrs, onnx_attrs, symbolic=True,
             mask=MaskRule("first", check=mask_check, consumes="attention"),
             moments=Derived(moments, lambda node: (node.params["roles"]["value"],)), keras=("MultiHeadAttention",),
             training_only=("dropout", "kernel_init", "bias_init")),)  # dropout: on the scores, in training only
