"""Per-op rules: shape inference, parameters, variables and FLOPs, without TensorFlow.

Each rule takes the layer model and its input shapes and returns an `OpResult`.
Problems raise `OpError` naming the spec key they concern, so the diagnostic
points at the right line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specgen.ir.model import Init, Shape
from specgen.spec import layers as L

FLOAT = "float32"
INTEGER = ("int32", "int64")


class OpError(Exception):
    def __init__(self, message: str, key: str | None = None):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class VarDecl:
    role: str
    shape: tuple[int, ...]
    init: Init
    kind: str = "weight"  # "weight" (trained unless frozen) or "update" (batch-norm statistics)


@dataclass
class OpResult:
    shape: Shape
    dtype: str = FLOAT
    params: dict[str, Any] = field(default_factory=dict)
    variables: list[VarDecl] = field(default_factory=list)
    flops: int = 0


def _pair(value: int | list[int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


def _prod(dims: Shape) -> int:
    return math.prod(d for d in dims if d is not None)


def _show(shape: Shape) -> str:
    return "[" + ", ".join("batch" if d is None else str(d) for d in shape) + "]"


def resolve_init(spec: Any) -> Init:
    if isinstance(spec, str):
        return Init(spec)
    args = tuple((k, float(v)) for k, v in spec.model_dump(exclude={"kind"}).items())
    return Init(spec.kind, args)


def _require_rank(shape: Shape, rank: int, what: str) -> None:
    if len(shape) != rank:
        raise OpError(f"{what} needs a rank-{rank} input (batch, height, width, channels); "
                      f"received {_show(shape)}", "input")


def _require_float(dtype: str, op: str) -> None:
    if dtype != FLOAT:
        raise OpError(f"{op} needs a float32 input; received {dtype} (integer inputs feed embedding layers)",
                      "input")


def _window(size: int, stride: int, dilation: int, padding: str, extent: int, key: str) -> tuple[int, int, int]:
    """Output extent and (begin, end) padding, the way TensorFlow's SAME/VALID compute them."""
    effective = (size - 1) * dilation + 1
    if padding == "same":
        out = -(-extent // stride)
    else:
        out = -(-(extent - effective + 1) // stride)
    if out <= 0:
        raise OpError(f"a window of {effective} does not fit an input extent of {extent} "
                      "with padding 'valid'", key)
    total = max((out - 1) * stride + effective - extent, 0)
    return out, total // 2, total - total // 2


def _spatial(shape: Shape, kernel: tuple[int, int], strides: tuple[int, int], dilation: tuple[int, int],
             padding: str, key: str) -> tuple[tuple[int, int], list[int]]:
    h_out, top, bottom = _window(kernel[0], strides[0], dilation[0], padding, shape[1] or 0, key)
    w_out, left, right = _window(kernel[1], strides[1], dilation[1], padding, shape[2] or 0, key)
    return (h_out, w_out), [top, left, bottom, right]  # ONNX order: begins, then ends


def _conv_like(layer: Any, shape: Shape, dtype: str, out_channels: int, kernel_in: int) -> OpResult:
    _require_rank(shape, 4, layer.op)
    _require_float(dtype, layer.op)
    kernel, strides, dilation = _pair(layer.kernel), _pair(layer.strides), _pair(layer.dilation)
    if max(strides) > 1 and max(dilation) > 1:
        raise OpError("TensorFlow cannot combine strides > 1 with dilation > 1; use one of them", "dilation")
    (h, w), pads = _spatial(shape, kernel, strides, dilation, layer.padding, "kernel")
    params = {"kernel": kernel, "strides": strides, "dilation": dilation, "padding": layer.padding, "pads": pads}
    macs = h * w * out_channels * kernel[0] * kernel[1] * kernel_in
    return OpResult((None, h, w, out_channels), FLOAT, params, flops=2 * macs + (h * w * out_channels if layer.use_bias else 0))


def dense(layer: L.Dense, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    _require_float(dtype, "dense")
    if len(shape) < 2:
        raise OpError(f"dense needs an input with a feature axis; received {_show(shape)}", "input")
    fan_in = shape[-1] or 0
    result = OpResult((*shape[:-1], layer.units), params={"rank": len(shape)})
    result.variables.append(VarDecl("kernel", (fan_in, layer.units), resolve_init(layer.kernel_init)))
    if layer.use_bias:
        result.variables.append(VarDecl("bias", (layer.units,), resolve_init(layer.bias_init)))
    rows = _prod(shape[:-1])
    result.flops = rows * layer.units * (2 * fan_in + (1 if layer.use_bias else 0))
    return result


def conv2d(layer: L.Conv2D, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    in_channels = shape[-1] or 0
    result = _conv_like(layer, shape, dtype, layer.filters, in_channels)
    kh, kw = result.params["kernel"]
    result.variables.append(VarDecl("kernel", (kh, kw, in_channels, layer.filters), resolve_init(layer.kernel_init)))
    if layer.use_bias:
        result.variables.append(VarDecl("bias", (layer.filters,), resolve_init(layer.bias_init)))
    return result


def depthwise_conv2d(layer: L.DepthwiseConv2D, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    in_channels = shape[-1] or 0
    out_channels = in_channels * layer.depth_multiplier
    result = _conv_like(layer, shape, dtype, out_channels, 1)
    kh, kw = result.params["kernel"]
    result.params["group"] = in_channels
    result.variables.append(VarDecl("kernel", (kh, kw, in_channels, layer.depth_multiplier),
                                    resolve_init(layer.kernel_init)))
    if layer.use_bias:
        result.variables.append(VarDecl("bias", (out_channels,), resolve_init(layer.bias_init)))
    return result


def pool(layer: L.Pool, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    _require_rank(shape, 4, layer.op)
    _require_float(dtype, layer.op)
    size = _pair(layer.size)
    strides = _pair(layer.strides if layer.strides is not None else layer.size)
    (h, w), pads = _spatial(shape, size, strides, (1, 1), layer.padding, "size")
    params = {"size": size, "strides": strides, "padding": layer.padding, "pads": pads}
    return OpResult((None, h, w, shape[3]), params=params, flops=h * w * (shape[3] or 0) * size[0] * size[1])


def global_avg_pool(layer: L.GlobalAvgPool, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    _require_rank(shape, 4, "global_avg_pool")
    _require_float(dtype, "global_avg_pool")
    return OpResult((None, shape[3]), flops=_prod(shape))


def flatten(layer: L.Flatten, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    return OpResult((None, _prod(shape[1:])), dtype, {"size": _prod(shape[1:])})


def reshape(layer: L.Reshape, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    total, target = _prod(shape[1:]), list(layer.shape)
    unknown = [i for i, d in enumerate(target) if d == -1]
    if len(unknown) > 1 or 0 in target:
        raise OpError(f"reshape takes positive sizes and at most one -1; received {target}", "shape")
    known = math.prod(d for d in target if d != -1)
    if unknown and total % known == 0:
        target[unknown[0]] = total // known
    if math.prod(target) != total:
        raise OpError(f"cannot reshape {_show(shape)} ({total} values per example) to "
                      f"{_show((None, *layer.shape))}", "shape")
    return OpResult((None, *target), dtype, {"shape": tuple(target)})


def batch_norm(layer: L.BatchNorm, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    _require_float(dtype, "batch_norm")
    if len(shape) < 2:
        raise OpError(f"batch_norm needs a channel axis; received {_show(shape)}", "input")
    channels = shape[-1] or 0
    params = {"momentum": layer.momentum, "epsilon": layer.epsilon, "axes": tuple(range(len(shape) - 1))}
    result = OpResult(shape, params=params, flops=2 * _prod(shape))
    result.variables += [
        VarDecl("gamma", (channels,), Init("ones")),
        VarDecl("beta", (channels,), Init("zeros")),
        VarDecl("moving_mean", (channels,), Init("zeros"), "update"),
        VarDecl("moving_variance", (channels,), Init("ones"), "update"),
    ]
    return result


def layer_norm(layer: L.LayerNorm, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    _require_float(dtype, "layer_norm")
    if len(shape) < 2:
        raise OpError(f"layer_norm needs a feature axis; received {_show(shape)}", "input")
    channels = shape[-1] or 0
    result = OpResult(shape, params={"epsilon": layer.epsilon}, flops=8 * _prod(shape))
    result.variables += [VarDecl("gamma", (channels,), Init("ones")), VarDecl("beta", (channels,), Init("zeros"))]
    return result


def dropout(layer: L.Dropout, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    _require_float(dtype, "dropout")
    return OpResult(shape, params={"rate": layer.rate})


def embedding(layer: L.Embedding, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    if dtype not in INTEGER:
        raise OpError(f"embedding needs integer ids (int32 or int64); received {dtype}", "input")
    result = OpResult((*shape, layer.dim), FLOAT, {"vocab_size": layer.vocab_size})
    result.variables.append(VarDecl("embeddings", (layer.vocab_size, layer.dim), resolve_init(layer.embeddings_init)))
    return result


def activation(layer: Any, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    _require_float(dtype, layer.op)
    params: dict[str, Any] = {}
    if layer.op == "leaky_relu":
        params["alpha"] = layer.alpha
    if layer.op == "softmax":
        params["axis"] = _axis(layer.axis, len(shape), "axis")
    return OpResult(shape, params=params, flops=_prod(shape))


def _axis(axis: int, rank: int, key: str) -> int:
    if not -rank <= axis < rank or axis % rank == 0:
        raise OpError(f"axis {axis} is out of range for a rank-{rank} tensor (axis 0 is the batch)", key)
    return axis % rank


def elementwise(layer: L.Elementwise, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    for shape, name in zip(shapes[1:], layer.inputs[1:], strict=True):
        if shape != shapes[0]:
            raise OpError(f"{layer.op} needs inputs of one shape; '{layer.inputs[0]}' is {_show(shapes[0])} "
                          f"but '{name}' is {_show(shape)}", "inputs")
    for dtype in dtypes:
        _require_float(dtype, layer.op)
    return OpResult(shapes[0], flops=(len(shapes) - 1) * _prod(shapes[0]))


def concat(layer: L.Concat, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    rank = len(shapes[0])
    axis = _axis(layer.axis, rank, "axis")
    first = shapes[0]
    for shape, name in zip(shapes[1:], layer.inputs[1:], strict=True):
        if len(shape) != rank or any(a != b for i, (a, b) in enumerate(zip(shape, first, strict=True)) if i != axis):
            raise OpError(f"concat on axis {axis} needs the other axes equal; '{layer.inputs[0]}' is "
                          f"{_show(first)} but '{name}' is {_show(shape)}", "inputs")
    if len(set(dtypes)) > 1:
        raise OpError(f"concat needs inputs of one dtype; received {', '.join(dtypes)}", "inputs")
    out = list(first)
    out[axis] = sum(s[axis] or 0 for s in shapes)
    return OpResult(tuple(out), dtypes[0], {"axis": axis})


Rule = Callable[[Any, list[Shape], list[str]], OpResult]
RULES: dict[str, Rule] = {
    "dense": dense, "conv2d": conv2d, "depthwise_conv2d": depthwise_conv2d, "max_pool": pool,
    "avg_pool": pool, "global_avg_pool": global_avg_pool, "flatten": flatten, "reshape": reshape,
    "batch_norm": batch_norm, "layer_norm": layer_norm, "dropout": dropout, "embedding": embedding,
    "relu": activation, "leaky_relu": activation, "gelu": activation, "sigmoid": activation,
    "tanh": activation, "softmax": activation, "add": elementwise, "multiply": elementwise, "concat": concat,
}
ACTIVATION_FLOPS = {"relu": 1, "leaky_relu": 2, "gelu": 8, "sigmoid": 4, "tanh": 4, "softmax": 5, "linear": 0}


def activation_of(layer: Any) -> str | None:
    """The layer's `activation:` (None for ops without one).

    Checked against the model's fields first: getattr on a pydantic model without the field
    goes through pydantic's __getattr__ and an AttributeError, which is slow for every layer.
    """
    return layer.activation if "activation" in type(layer).model_fields else None


def infer(layer: Any, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    result = RULES[layer.op](layer, shapes, dtypes)
    act = activation_of(layer)
    if act not in (None, "linear"):
        result.flops += ACTIVATION_FLOPS[act] * _prod(result.shape)
    return result


def backward_flops(forward: int, has_weights: bool) -> int:
    """Estimate: layers with weights need gradients for inputs and weights (2x), others 1x."""
    return 2 * forward if has_weights else forward
