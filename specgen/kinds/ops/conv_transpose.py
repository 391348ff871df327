"""conv2d_transpose: keras.layers.Conv2DTranspose; kernel [kh, kw, filters, in] in TensorFlow,
[in, filters, kh, kw] for ONNX ConvTranspose, channels-first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import Field

from specgen.fields.base import Flag, NonNegativeInt, PositiveInt
from specgen.fields.layers import Activation, LayerBase, Padding, Size2
from specgen.fields.unions import by_shape, scalar_or_list
from specgen.kinds.dims import fixed
from specgen.kinds.initializers import InitializerSpec
from specgen.kinds.ops.base import FLOAT, OnnxContext, OpDef, OpError, OpResult, VarDecl, Weighted, resolve_init
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import pair, require_float, require_rank

AXES = ("height", "width")  # how messages name the two spatial axes

# output_padding may be 0 (Keras' None, leaving it out, is a different rule: see _output_extent)
if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Padding2: TypeAlias = int | list[int]
else:
    Padding2 = by_shape(scalar_or_list, "an integer or a list of 2 integers",
                        scalar=NonNegativeInt, list=Annotated[list[NonNegativeInt], Field(min_length=2, max_length=2)])


class Conv2DTranspose(LayerBase):
    op: Literal["conv2d_transpose"]
    filters: PositiveInt
    kernel: Size2
    strides: Size2 = 1
    padding: Padding = "valid"
    output_padding: Padding2 | None = None
    activation: Activation | None = None
    use_bias: Flag = True
    kernel_init: InitializerSpec = "glorot_uniform"
    bias_init: InitializerSpec = "zeros"


def _output_extent(extent: int, kernel: int, stride: int, padding: str, output_padding: int | None) -> int:
    """Keras' rule (backend_utils._get_output_shape_given_tf_padding, without dilation)."""
    if padding == "valid":
        extra = max(kernel, stride) - kernel if output_padding is None else output_padding
        return (extent - 1) * stride + kernel + extra
    if output_padding is None:
        return extent * stride
    return (extent - 1) * stride + kernel % 2 + output_padding


def _unmapped(layer: Conv2DTranspose, axis: int, kernel: int, stride: int, size: int, extent: int) -> str:
    """Why an output_padding of 'same' padding fails on one axis, and what works there.

    TensorFlow's conv_transpose needs the forward SAME conv of the output to give the input back: ceil(size /
    stride) == extent. With output_padding p given, Keras sizes the axis (extent - 1) * stride + kernel % 2 + p and
    requires 0 <= p < stride (base_conv_transpose.py; operation_utils' _get_output_shape_given_tf_padding), so only
    an even kernel with p = 0 fails, and p = 1 .. stride - 1 fixes it. At stride 1 no p does (it must be 0):
    leaving output_padding out (Keras then sizes the axis extent * stride) or an odd kernel or a stride of 2 does.
    """
    name = AXES[axis]
    found = (f"output_padding: received {layer.output_padding}: with an even kernel ({kernel}) and padding 'same', "
             f"Keras makes the {name} axis (n - 1) * stride + kernel % 2 + output_padding long, and {size} does not "
             f"map back to the input's {extent}")
    if stride == 1:
        return f"{found}; no output_padding works there, since it must be below the stride (1): {_WAYS.format(name)}"
    allowed = "1" if stride == 2 else f"1 to {stride - 1}"
    return f"{found}; expected {allowed} on the {name} axis (at least 1, below its stride {stride})"


_WAYS = ("leave output_padding out (the output is then input * strides), or use an odd kernel or a stride of 2 or "
         "more on the {} axis")


def _only_zero(layer: Conv2DTranspose, axis: int, kernel: int) -> str:
    """What a stride-1 axis takes: 0, unless 'same' padding and an even kernel leave it no value (_unmapped)."""
    if layer.padding == "same" and kernel % 2 == 0:
        return f"; with its even kernel ({kernel}) and padding 'same' not even 0 works there: {_WAYS.format(AXES[axis])}"
    return " (give 0 there, or leave output_padding out)"


def _onnx_pads(extent: int, out: int, kernel: int, stride: int, padding: str) -> tuple[int, int, int]:
    """(begin, end, output_padding) that make ONNX ConvTranspose produce TensorFlow's `out` values.

    TensorFlow crops the full result ((extent - 1) * stride + kernel long) at the begin padding the
    forward conv of an `out`-long input would use; whatever the full result lacks at the end is zeros
    (plus bias), which is what ONNX's output_padding adds.
    """
    full = (extent - 1) * stride + kernel
    begin = max((extent - 1) * stride + kernel - out, 0) // 2 if padding == "same" else 0
    end = full - begin - out
    return (begin, end, 0) if end >= 0 else (begin, 0, -end)


def conv2d_transpose(layer: Conv2DTranspose, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_rank(shape, 4, layer.op)
    require_float(dtype, layer.op)
    kernel, strides = pair(layer.kernel), pair(layer.strides)
    extra = None if layer.output_padding is None else pair(layer.output_padding)
    for axis, (e, s) in enumerate(zip(extra or (0, 0), strides, strict=True)):  # Keras refuses e >= s at construction
        if e >= s:
            raise OpError(f"output_padding: received {layer.output_padding}, expected values below strides "
                          f"({layer.strides}), as Keras requires: {e} on the {AXES[axis]} axis is not below its "
                          f"stride {s}" + (_only_zero(layer, axis, kernel[axis]) if s == 1 else ""), "output_padding")
    in_channels = fixed(shape[-1])
    out, pads, out_pad = [], [0, 0, 0, 0], [0, 0]
    for axis in range(2):
        extent = fixed(shape[1 + axis])
        size = _output_extent(extent, kernel[axis], strides[axis], layer.padding, None if extra is None else extra[axis])
        if layer.padding == "same" and -(-size // strides[axis]) != extent:
            raise OpError(_unmapped(layer, axis, kernel[axis], strides[axis], size, extent), "output_padding")
        out.append(size)
        pads[axis], pads[2 + axis], out_pad[axis] = _onnx_pads(extent, size, kernel[axis], strides[axis],
                                                              layer.padding)
    (h, w), (kh, kw) = out, kernel
    params = {"kernel": kernel, "strides": strides, "padding": layer.padding, "pads": pads,
              "output_padding": out_pad, "out_hwc": [h, w, layer.filters]}
    # every input value meets every kernel tap once: in_h * in_w * in * kh * kw * filters multiply-adds
    macs = fixed(shape[1]) * fixed(shape[2]) * in_channels * kh * kw * layer.filters
    result = OpResult((None, h, w, layer.filters), FLOAT, params,
                      flops=2 * macs + (h * w * layer.filters if layer.use_bias else 0))
    result.variables.append(VarDecl("kernel", (kh, kw, layer.filters, in_channels), resolve_init(layer.kernel_init),
                                    onnx_perm=(3, 2, 0, 1), onnx_shape=(in_channels, layer.filters, kh, kw)))
    if layer.use_bias:
        result.variables.append(VarDecl("bias", (layer.filters,), resolve_init(layer.bias_init)))
    return result


def tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    return {"strides": [1, *p["strides"], 1], "padding": p["padding"].upper(), "out_hwc": p["out_hwc"]}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    p = node.params
    return {"kernel_shape": list(p["kernel"]), "strides": list(p["strides"]), "pads": p["pads"],
            "output_padding": p["output_padding"]}


OPS = (OpDef("conv2d_transpose", Conv2DTranspose, conv2d_transpose, tf_attrs, onnx_attrs, layout="first",
              moments=Weighted(fan="strided"), keras=("Conv2DTranspose",), training_only=("kernel_init", "bias_init")),)
