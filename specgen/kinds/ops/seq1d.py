"""conv1d, max_pool1d and avg_pool1d: windows over the time axis of [batch, steps, channels] tensors.

Keras' Conv1D / MaxPooling1D / AveragePooling1D: the kernel is [k, in/groups, filters] (ONNX Conv
wants [filters, in/groups, k], channels-first); `causal` pads (k-1)*dilation steps on the left only,
so step t sees steps <= t. ONNX runs them as Conv / MaxPool / AveragePool with 1-D attributes and
reuses the 2-D ops' templates (their attributes are lists of any length).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from specgen.fields.base import Flag, PositiveInt
from specgen.fields.layers import Activation, LayerBase
from specgen.kinds import dims
from specgen.kinds.initializers import InitializerSpec
from specgen.kinds.ops.base import FLOAT, MaskRule, OnnxContext, OpDef, OpError, OpResult, VarDecl, Weighted, resolve_init
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.pools import MAX_POOL_XLA
from specgen.kinds.ops.shapes import Pads, fixed, require_float, run_time_pads, same_pads_attrs, window
from specgen.text import shape as show


class Conv1D(LayerBase):
    op: Literal["conv1d"]
    filters: PositiveInt
    kernel: PositiveInt
    strides: PositiveInt = 1
    padding: Literal["same", "valid", "causal"] = "valid"
    dilation: PositiveInt = 1
    groups: PositiveInt = 1
    activation: Activation | None = None
    use_bias: Flag = True
    kernel_init: InitializerSpec = "glorot_uniform"
    bias_init: InitializerSpec = "zeros"


class Pool1D(LayerBase):
    op: Literal["max_pool1d", "avg_pool1d"]
    size: PositiveInt = 2
    strides: PositiveInt | None = Field(None, description="Defaults to `size`.")
    padding: Literal["same", "valid"] = "valid"


def _rank3(shape: Shape, dtype: str, op: str) -> None:
    if len(shape) != 3:
        raise OpError(f"{op} needs a rank-3 input (batch, steps, channels); received {show(shape)}", "input")
    require_float(dtype, op)


def _steps(size: int, stride: int, dilation: int, padding: str, steps: int | str, key: str) -> tuple[Any, Pads]:
    """Output steps and ONNX pads [begin, end] (or how they are found at run time: kinds/ops/shapes.py)."""
    if padding == "causal":  # left padding of the dilated window, then a valid window
        left = (size - 1) * dilation
        out, _ = window(size, stride, dilation, "valid", dims.offset(steps, left), key)
        return out, [left, 0]
    out, pads = window(size, stride, dilation, padding, steps, key)
    return out, run_time_pads([(size, stride, dilation, steps)]) if pads is None else list(pads)


def conv1d(layer: Conv1D, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    _rank3(shape, dtype, "conv1d")
    if layer.strides > 1 and layer.dilation > 1:
        raise OpError("TensorFlow cannot combine strides > 1 with dilation > 1; use one of them", "dilation")
    channels = fixed(shape[2], "conv1d's channel axis")
    if channels % layer.groups or layer.filters % layer.groups:
        raise OpError(f"groups: received {layer.groups}, expected a divisor of both the input channels "
                      f"({channels}) and filters ({layer.filters})", "groups")
    steps = shape[1] if isinstance(shape[1], str) else shape[1] or 0
    out, pads = _steps(layer.kernel, layer.strides, layer.dilation, layer.padding, steps, "kernel")
    group_in, k = channels // layer.groups, layer.kernel
    params = {"kernel": k, "strides": layer.strides, "dilation": layer.dilation, "padding": layer.padding,
              "pads": pads, "groups": layer.groups}
    positions = dims.nominal(out) * layer.filters  # per output step of a named dynamic dimension
    result = OpResult((None, out, layer.filters), FLOAT, params,
                      flops=2 * positions * k * group_in + (positions if layer.use_bias else 0))
    result.variables.append(VarDecl("kernel", (k, group_in, layer.filters), resolve_init(layer.kernel_init),
                                    onnx_perm=(2, 1, 0), onnx_shape=(layer.filters, group_in, k)))  # WIO -> OIW
    if layer.use_bias:
        result.variables.append(VarDecl("bias", (layer.filters,), resolve_init(layer.bias_init)))
    return result


def pool1d(layer: Pool1D, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    _rank3(shape, dtype, layer.op)
    strides = layer.strides or layer.size
    steps = shape[1] if isinstance(shape[1], str) else shape[1] or 0
    out, pads = _steps(layer.size, strides, 1, layer.padding, steps, "size")
    params = {"size": layer.size, "strides": strides, "padding": layer.padding, "pads": pads}
    return OpResult((None, out, shape[2]), params=params,
                    flops=dims.nominal(out) * dims.count(shape[2]) * layer.size)


def conv_tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    causal = p["padding"] == "causal"
    return {"strides": p["strides"], "dilations": p["dilation"], "groups": p["groups"],
            "padding": "VALID" if causal else p["padding"].upper(),
            "causal": (p["kernel"] - 1) * p["dilation"] if causal else 0}


def conv_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    p = node.params
    kernel, strides, dilation = [p["kernel"]], [p["strides"]], [p["dilation"]]
    return {"kernel_shape": kernel, "strides": strides, "dilations": dilation, "group": p["groups"],
            **same_pads_attrs(node, ctx, kernel, strides, dilation)}


def pool_tf_attrs(node: Node) -> dict[str, Any]:
    p = node.params
    call = "tf.nn.max_pool1d" if node.op == "max_pool1d" else "tf.nn.avg_pool1d"
    return {"call": call, "ksize": p["size"], "strides": p["strides"], "padding": p["padding"].upper()}


def pool_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    p = node.params
    kernel, strides, maximum = [p["size"]], [p["strides"]], node.op == "max_pool1d"
    return {"kernel_shape": kernel, "strides": strides, "guard": False,
            **same_pads_attrs(node, ctx, kernel, strides, [1], fill=-math.inf if maximum else 0.0, counts=not maximum)}


def _drops_mask(keras: str) -> MaskRule:
    """Keras' 1-D class does not support masking (it drops the mask, with a warning), and a window mixes steps."""
    return MaskRule(reason=f"Keras' {keras} drops the mask (with a warning) and its windows would mix padded steps "
                           "into real ones", keras_drops=keras)


OPS = (
    OpDef("conv1d", Conv1D, conv1d, conv_tf_attrs, conv_onnx_attrs, layout="first", onnx_template="conv2d",
          symbolic=True, mask=_drops_mask("Conv1D"), moments=Weighted(), keras=("Conv1D",),
          training_only=("kernel_init", "bias_init")),
    OpDef("max_pool1d", Pool1D, pool1d, pool_tf_attrs, pool_onnx_attrs, layout="first", tf_template="pool1d",
          onnx_template="max_pool", symbolic=True, mask=_drops_mask("MaxPooling1D"), moments="same", keras=("MaxPooling1D",),
          xla_refusal=MAX_POOL_XLA),
    OpDef("avg_pool1d", Pool1D, pool1d, pool_tf_attrs, pool_onnx_attrs, layout="first", tf_template="pool1d",
          onnx_template="avg_pool", symbolic=True, mask=_drops_mask("AveragePooling1D"), moments="same",
          keras=("AveragePooling1D",)),
)
