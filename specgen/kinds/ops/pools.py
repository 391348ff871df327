"""max_pool, avg_pool, global_avg_pool and global_max_pool: window reductions, channels-first in ONNX.

The global pools take [batch, h, w, c] images and [batch, steps, c] sequences (Keras' 1-D ones).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from specgen.fields.base import Flag
from specgen.fields.layers import LayerBase, Padding, Size2
from specgen.kinds.dims import count, nominal
from specgen.kinds.ops.base import MaskRule, OnnxContext, OpDef, OpError, OpResult
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import pair, prod, require_float, require_rank, same_pads_attrs, spatial
from specgen.text import shape as show


class Pool(LayerBase):
    op: Literal["max_pool", "avg_pool"]
    size: Size2
    strides: Size2 | None = Field(None, description="Defaults to `size`.")
    padding: Padding = "valid"


class GlobalPool(LayerBase):
    op: Literal["global_avg_pool", "global_max_pool"]
    keepdims: Flag = Field(False, description="Keep the spatial axes as 1s: [batch, 1, 1, channels] "
                                              "(Keras' `keepdims`; squeeze-and-excite multiplies it back).")


def pool(layer: Pool, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_rank(shape, 4, layer.op)
    require_float(dtype, layer.op)
    size = pair(layer.size)
    strides = pair(layer.strides if layer.strides is not None else layer.size)
    (h, w), pads = spatial(shape, size, strides, (1, 1), layer.padding, "size")
    params = {"size": size, "strides": strides, "padding": layer.padding, "pads": pads}
    flops = nominal(h) * nominal(w) * count(shape[3]) * size[0] * size[1]  # per position of a named dimension
    return OpResult((None, h, w, shape[3]), params=params, flops=flops)


def global_pool(layer: GlobalPool, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    if len(shape) not in (3, 4):
        raise OpError(f"{layer.op} needs a rank-4 input (batch, height, width, channels) or a rank-3 one "
                      f"(batch, steps, channels); received {show(shape)}", "input")
    require_float(dtype, layer.op)
    out = (None, *[1] * (len(shape) - 2), shape[-1]) if layer.keepdims else (None, shape[-1])
    params: dict[str, Any] = {"keepdims": layer.keepdims}
    if len(shape) == 3:  # over time; images keep the params (and the rendered files) they had
        params["axes"] = (1,)
    return OpResult(out, params=params, flops=prod(shape))


def pool_tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    return {"ksize": list(p["size"]), "strides": list(p["strides"]), "padding": p["padding"].upper()}


def pool_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    p = node.params
    # onnxruntime's PadFusion folds a zero Pad into a following MaxPool's `pads`, which MaxPool fills with
    # -inf, not zeros: wrong wherever a window's real values are all negative (measured: ResNet50V2's
    # pool1_pad -> pool1_pool off by 17% with every optimization on, exact with them off). A Max(x, x)
    # between them is exact, cheap, and keeps the Pad from being fused; it is emitted only after a Pad.
    maximum = node.op == "max_pool"
    guard = maximum and ctx.zero_padded(node.inputs[0])
    kernel, strides = list(p["size"]), list(p["strides"])
    return {"kernel_shape": kernel, "strides": strides, "guard": guard,
            **same_pads_attrs(node, ctx, kernel, strides, [1] * len(kernel), fill=-math.inf if maximum else 0.0,
                              counts=not maximum)}


def global_tf_attrs(node: Node) -> dict[str, Any]:
    return {"keepdims": node.params["keepdims"], "axes": list(node.params.get("axes", (1, 2)))}


def global_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    spatial_axes = [a + 1 for a in node.params.get("axes", (1, 2))]  # channels-first: one further on
    axes = ctx.constant(f"{node.onnx_name}___axes", spatial_axes)
    return {"axes": axes, "keepdims": int(node.params["keepdims"])}


# Why train.jit_compile refuses max pools (TensorFlow 2.x: "GPU MaxPool gradient ops do not yet have a deterministic
# XLA implementation", raised on CPU too; ir/training/jit_compile.py).
MAX_POOL_XLA = "its gradient (MaxPoolGrad) has no deterministic XLA implementation in TensorFlow"

OPS = (
    OpDef("max_pool", Pool, pool, pool_tf_attrs, pool_onnx_attrs, layout="first", symbolic=True, moments="same",
          pad_folding="max", keras=("MaxPooling2D",), xla_refusal=MAX_POOL_XLA),
    OpDef("avg_pool", Pool, pool, pool_tf_attrs, pool_onnx_attrs, layout="first", symbolic=True, moments="same",
          keras=("AveragePooling2D",)),
    # With keepdims the output stays channels-first ([N, C, 1, 1]) for the ops that follow.
    # A masked [batch, time, features] tensor: the mean over time of the real steps (no mask after it).
    OpDef("global_avg_pool", GlobalPool, global_pool, global_tf_attrs, global_onnx_attrs, layout="first",
          symbolic=True, mask=MaskRule("none", consumes="masked_mean"), moments="same",
          keras=("GlobalAveragePooling2D", "GlobalAveragePooling1D")),
    OpDef("global_max_pool", GlobalPool, global_pool, global_tf_attrs, global_onnx_attrs, layout="first",
          symbolic=True, mask=MaskRule(reason="Keras' GlobalMaxPooling1D ignores the mask, so padded steps would enter "
                                              "the max", keras_drops="GlobalMaxPooling1D"),
          moments="same", keras=("GlobalMaxPooling2D", "GlobalMaxPooling1D")),
)
