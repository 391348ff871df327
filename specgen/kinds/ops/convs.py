"""conv2d (grouped too), depthwise_conv2d and separable_conv2d: TensorFlow kernels are HWIO,
ONNX Conv wants OIHW, channels-first."""

from __future__ import annotations

from typing import Any, Literal

from specgen.fields.base import Flag, PositiveInt
from specgen.fields.layers import Activation, LayerBase, Padding, Size2
from specgen.kinds.dims import nominal
from specgen.kinds.initializers import InitializerSpec
from specgen.kinds.ops.base import FLOAT, OnnxContext, OpDef, OpError, OpResult, VarDecl, Weighted, resolve_init
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import fixed, pair, require_float, require_rank, same_pads_attrs, spatial


class WindowBase(LayerBase):
    """What every convolution here shares: the window, the activation and the bias."""

    kernel: Size2
    strides: Size2 = 1
    padding: Padding = "valid"
    dilation: Size2 = 1
    activation: Activation | None = None
    use_bias: Flag = True


class ConvBase(WindowBase):
    """What conv2d and depthwise_conv2d share: one kernel."""

    kernel_init: InitializerSpec = "glorot_uniform"
    bias_init: InitializerSpec = "zeros"


class Conv2D(ConvBase):
    op: Literal["conv2d"]
    filters: PositiveInt
    groups: PositiveInt = 1


class DepthwiseConv2D(ConvBase):
    op: Literal["depthwise_conv2d"]
    depth_multiplier: PositiveInt = 1


class SeparableConv2D(WindowBase):
    """keras.layers.SeparableConv2D: a depthwise conv, then a 1x1 conv to `filters` channels."""

    op: Literal["separable_conv2d"]
    filters: PositiveInt
    depth_multiplier: PositiveInt = 1
    depthwise_init: InitializerSpec = "glorot_uniform"
    pointwise_init: InitializerSpec = "glorot_uniform"
    bias_init: InitializerSpec = "zeros"


def _window(layer: Any, shape: Shape, dtype: str) -> tuple[tuple[int | str, int | str], dict[str, Any]]:
    """Checks the input and the window; returns the output (height, width) and the render params."""
    require_rank(shape, 4, layer.op)
    require_float(dtype, layer.op)
    kernel, strides, dilation = pair(layer.kernel), pair(layer.strides), pair(layer.dilation)
    if max(strides) > 1 and max(dilation) > 1:
        raise OpError("TensorFlow cannot combine strides > 1 with dilation > 1; use one of them", "dilation")
    hw, pads = spatial(shape, kernel, strides, dilation, layer.padding, "kernel")
    return hw, {"kernel": kernel, "strides": strides, "dilation": dilation, "padding": layer.padding, "pads": pads}


def _conv_like(layer: Any, shape: Shape, dtype: str, out_channels: int, kernel_in: int) -> OpResult:
    hw, params = _window(layer, shape, dtype)
    kh, kw = params["kernel"]
    h, w = nominal(hw[0]), nominal(hw[1])  # FLOPs per output position of a named dynamic dimension
    macs = h * w * out_channels * kh * kw * kernel_in
    return OpResult((None, *hw, out_channels), FLOAT, params, flops=2 * macs + (h * w * out_channels if layer.use_bias else 0))


def _groups_divide(layer: Conv2D, in_channels: int) -> None:
    """Keras' Conv2D rule: each group sees in/groups channels and makes filters/groups."""
    if in_channels % layer.groups or layer.filters % layer.groups:
        raise OpError(f"groups: received {layer.groups}, expected a divisor of both the input channels "
                      f"({in_channels}) and filters ({layer.filters})", "groups")


def conv2d(layer: Conv2D, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    in_channels = fixed(shape[-1], f"{layer.op}'s channel axis")
    if len(shape) == 4:  # a wrong rank is reported by the window check, naming the input
        _groups_divide(layer, in_channels)
    group_in = in_channels // layer.groups
    result = _conv_like(layer, shape, dtype, layer.filters, group_in)
    if layer.groups > 1:  # kept out of ungrouped params, so that those nodes render as before
        result.params["group"] = layer.groups
    kh, kw = result.params["kernel"]
    result.variables.append(VarDecl("kernel", (kh, kw, group_in, layer.filters), resolve_init(layer.kernel_init),
                                    onnx_perm=(3, 2, 0, 1), onnx_shape=(layer.filters, group_in, kh, kw)))  # HWIO -> OIHW
    if layer.use_bias:
        result.variables.append(VarDecl("bias", (layer.filters,), resolve_init(layer.bias_init)))
    return result


def _equal_strides(layer: DepthwiseConv2D | SeparableConv2D) -> None:
    strides = pair(layer.strides)
    if strides[0] != strides[1]:
        raise OpError(f"strides: received {layer.strides}, expected one stride for height and width "
                      "(TensorFlow's depthwise kernel supports no other)", "strides")


def depthwise_conv2d(layer: DepthwiseConv2D, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    _equal_strides(layer)
    in_channels = fixed(shape[-1], f"{layer.op}'s channel axis")
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


def separable_conv2d(layer: SeparableConv2D, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    _equal_strides(layer)
    in_channels = fixed(shape[-1], f"{layer.op}'s channel axis")
    mid = in_channels * layer.depth_multiplier
    hw, params = _window(layer, shape, dtype)
    kh, kw = params["kernel"]
    params["group"] = in_channels  # the depthwise step is a Conv with one input channel per group
    h, w = nominal(hw[0]), nominal(hw[1])  # FLOPs per output position of a named dynamic dimension
    macs = h * w * mid * kh * kw + h * w * mid * layer.filters  # depthwise, then pointwise
    flops = 2 * macs + (h * w * layer.filters if layer.use_bias else 0)
    result = OpResult((None, *hw, layer.filters), FLOAT, params, flops=flops)
    # Keras' layouts; ONNX gets the depthwise kernel as depthwise_conv2d's and the pointwise one as OIHW.
    result.variables.append(VarDecl("depthwise_kernel", (kh, kw, in_channels, layer.depth_multiplier),
                                    resolve_init(layer.depthwise_init),
                                    onnx_perm=(2, 3, 0, 1), onnx_shape=(mid, 1, kh, kw)))
    result.variables.append(VarDecl("pointwise_kernel", (1, 1, mid, layer.filters), resolve_init(layer.pointwise_init),
                                    onnx_perm=(3, 2, 0, 1), onnx_shape=(layer.filters, mid, 1, 1)))
    if layer.use_bias:
        result.variables.append(VarDecl("bias", (layer.filters,), resolve_init(layer.bias_init)))
    return result


def tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    # tf.nn.conv2d has no CPU gradient for dilation > 1; tf.nn.convolution (what Keras calls) runs a
    # dilated conv through space-to-batch, which has one. Undilated convs keep the direct call.
    call = "tf.nn.convolution" if max(p["dilation"]) > 1 else "tf.nn.conv2d"
    return {"strides": [1, *p["strides"], 1], "padding": p["padding"].upper(), "dilations": list(p["dilation"]),
            "groups": p.get("group", 1), "call": call}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    p = node.params
    kernel, strides, dilation = list(p["kernel"]), list(p["strides"]), list(p["dilation"])
    return {"kernel_shape": kernel, "strides": strides, "dilations": dilation, "group": p.get("group", 1),
            "depthwise": f"{node.onnx_name}___depthwise",  # separable_conv2d's intermediate tensor
            **same_pads_attrs(node, ctx, kernel, strides, dilation)}


OPS = (
    OpDef("conv2d", Conv2D, conv2d, tf_attrs, onnx_attrs, layout="first", symbolic=True, moments=Weighted(),
          pad_folding="zeros", keras=("Conv2D",), training_only=("kernel_init", "bias_init")),
    OpDef("depthwise_conv2d", DepthwiseConv2D, depthwise_conv2d, tf_attrs, onnx_attrs, layout="first",
          symbolic=True, moments=Weighted(fan="window"), pad_folding="zeros", keras=("DepthwiseConv2D",),
          training_only=("kernel_init", "bias_init")),
    OpDef("separable_conv2d", SeparableConv2D, separable_conv2d, tf_attrs, onnx_attrs, layout="first",
          symbolic=True, moments=Weighted(("depthwise_kernel", "pointwise_kernel"), init_key="pointwise_init"),
          pad_folding="zeros", keras=("SeparableConv2D",),
          training_only=("depthwise_init", "pointwise_init", "bias_init")),
)
