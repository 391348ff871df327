"""conv2d and depthwise_conv2d: TensorFlow kernels are HWIO, ONNX Conv wants OIHW, channels-first."""

from __future__ import annotations

from typing import Any, Literal

from specgen.ir.model import Node, Shape
from specgen.ir.ops.base import (
    FLOAT,
    OnnxContext,
    OpDef,
    OpError,
    OpResult,
    VarDecl,
    pair,
    require_float,
    require_rank,
    resolve_init,
    spatial,
)
from specgen.spec.base import PositiveInt
from specgen.spec.layers import Activation, InitializerSpec, LayerBase, Padding, Size2


class ConvBase(LayerBase):
    """What conv2d and depthwise_conv2d share."""

    kernel: Size2
    strides: Size2 = 1
    padding: Padding = "valid"
    dilation: Size2 = 1
    activation: Activation | None = None
    use_bias: bool = True
    kernel_init: InitializerSpec = "glorot_uniform"
    bias_init: InitializerSpec = "zeros"


class Conv2D(ConvBase):
    op: Literal["conv2d"]
    filters: PositiveInt


class DepthwiseConv2D(ConvBase):
    op: Literal["depthwise_conv2d"]
    depth_multiplier: PositiveInt = 1


def _conv_like(layer: Any, shape: Shape, dtype: str, out_channels: int, kernel_in: int) -> OpResult:
    require_rank(shape, 4, layer.op)
    require_float(dtype, layer.op)
    kernel, strides, dilation = pair(layer.kernel), pair(layer.strides), pair(layer.dilation)
    if max(strides) > 1 and max(dilation) > 1:
        raise OpError("TensorFlow cannot combine strides > 1 with dilation > 1; use one of them", "dilation")
    (h, w), pads = spatial(shape, kernel, strides, dilation, layer.padding, "kernel")
    params = {"kernel": kernel, "strides": strides, "dilation": dilation, "padding": layer.padding, "pads": pads}
    macs = h * w * out_channels * kernel[0] * kernel[1] * kernel_in
    return OpResult((None, h, w, out_channels), FLOAT, params, flops=2 * macs + (h * w * out_channels if layer.use_bias else 0))


def conv2d(layer: Conv2D, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    in_channels = shape[-1] or 0
    result = _conv_like(layer, shape, dtype, layer.filters, in_channels)
    kh, kw = result.params["kernel"]
    result.variables.append(VarDecl("kernel", (kh, kw, in_channels, layer.filters), resolve_init(layer.kernel_init),
                                    onnx_perm=(3, 2, 0, 1), onnx_shape=(layer.filters, in_channels, kh, kw)))  # HWIO -> OIHW
    if layer.use_bias:
        result.variables.append(VarDecl("bias", (layer.filters,), resolve_init(layer.bias_init)))
    return result


def depthwise_conv2d(layer: DepthwiseConv2D, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    in_channels = shape[-1] or 0
    out_channels = in_channels * layer.depth_multiplier
    result = _conv_like(layer, shape, dtype, out_channels, 1)
    kh, kw = result.params["kernel"]
    result.params["group"] = in_channels
    # [kh, kw, in, mult] -> [in*mult, 1, kh, kw]: a grouped Conv with one input channel per group
    result.variables.append(VarDecl("kernel", (kh, kw, in_channels, layer.depth_multiplier),
                                    resolve_init(layer.kernel_init),
                                    onnx_perm=(2, 3, 0, 1), onnx_shape=(out_channels, 1, kh, kw)))
    if layer.use_bias:
        result.variables.append(VarDecl("bias", (out_channels,), resolve_init(layer.bias_init)))
    return result


def tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    return {"strides": [1, *p["strides"], 1], "padding": p["padding"].upper(), "dilations": list(p["dilation"])}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    p = node.params
    return {"kernel_shape": list(p["kernel"]), "strides": list(p["strides"]), "pads": p["pads"],
            "dilations": list(p["dilation"]), "group": p.get("group", 1)}


OPS = (
    OpDef("conv2d", Conv2D, conv2d, tf_attrs, onnx_attrs, layout="first"),
    OpDef("depthwise_conv2d", DepthwiseConv2D, depthwise_conv2d, tf_attrs, onnx_attrs, layout="first"),
)
