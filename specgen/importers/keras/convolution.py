"""Keras' 2-D image layers as spec layers: convolutions, pools, padding, cropping and upsampling.

Specgen images are channels-last; a converter refuses channels-first configs by key.
"""

from __future__ import annotations

from typing import Any

from specgen.importers.keras.args import Args
from specgen.importers.keras.base import KERAS_OPS, Shapes, _bias_act, _init
from specgen.importers.keras.objects import is_integer


def _sides(a: Args, key: str, default: int) -> int | list[Any]:
    """ZeroPadding2D / Cropping2D amounts (n, (rows, cols) or ((top, bottom), (left, right))), shortest spec form."""
    value = a.get(key, default)
    pairs = [value, value] if is_integer(value, 0) else value
    flat = []
    if isinstance(pairs, list | tuple) and len(pairs) == 2:
        pairs = [[p, p] if is_integer(p, 0) else p for p in pairs]
        flat = [v for p in pairs if isinstance(p, list | tuple) and len(p) == 2 for v in p]
    if len(flat) != 4 or not all(is_integer(v, 0) for v in flat):
        raise a.wrong(key, "n, (rows, cols) or ((top, bottom), (left, right)) of integers >= 0")
    top, bottom, left, right = flat
    if top == bottom and left == right:
        return top if top == left else [top, left]
    return [[top, bottom], [left, right]]


def _windowed(a: Args) -> dict[str, Any]:
    a.expect("data_format", "channels_last", None, why="specgen images are channels-last")
    return {"padding": a.expect("padding", "valid", "same", why="padding 'valid' or 'same'")}


def _conv_window(a: Args, out: dict[str, Any], dilation: bool = True) -> dict[str, Any]:
    out |= {"kernel": a.pair("kernel_size")}
    if (strides := a.pair("strides", 1)) != 1:
        out["strides"] = strides
    out |= _windowed(a)
    if dilation and (rate := a.pair("dilation_rate", 1)) != 1:
        out["dilation"] = rate
    return out


def conv2d(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("lora_rank", None, why="LoRA adapters have no spec form")
    out = _conv_window(a, {"op": "conv2d", "filters": a.integer("filters")})
    if (groups := a.integer("groups", 1)) != 1:
        out["groups"] = groups
    _init(a, out, "kernel_initializer", "kernel_init")
    return _bias_act(a, out)


def depthwise_conv2d(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("groups", 1, None)  # Keras 2 keeps Conv's groups in the config
    out = _conv_window(a, {"op": "depthwise_conv2d"})
    if (mult := a.integer("depth_multiplier", 1)) != 1:
        out["depth_multiplier"] = mult
    _init(a, out, "depthwise_initializer", "kernel_init")
    return _bias_act(a, out)


def separable_conv2d(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("groups", 1, None)
    if a.keras2:  # tf_keras writes its base Conv's kernel_initializer, which a SeparableConv2D never uses
        a.get("kernel_initializer")
    out = _conv_window(a, {"op": "separable_conv2d", "filters": a.integer("filters")})
    if (mult := a.integer("depth_multiplier", 1)) != 1:
        out["depth_multiplier"] = mult
    _init(a, out, "depthwise_initializer", "depthwise_init")
    _init(a, out, "pointwise_initializer", "pointwise_init")
    return _bias_act(a, out)


def conv2d_transpose(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("dilation_rate", 1, [1, 1], why="conv2d_transpose has no dilation")
    a.expect("groups", 1, None)
    out = _conv_window(a, {"op": "conv2d_transpose", "filters": a.integer("filters")}, dilation=False)
    if a.get("output_padding") is not None:
        out["output_padding"] = a.pair("output_padding", minimum=0)
    _init(a, out, "kernel_initializer", "kernel_init")
    return _bias_act(a, out)


def pool(a: Args, shapes: Shapes) -> dict[str, Any]:
    """MaxPooling2D, AveragePooling2D: the op their class imports as (OpDef.keras)."""
    size = a.pair("pool_size", 2)
    out = {"op": KERAS_OPS[a.layer.cls], "size": size} | _windowed(a)
    if a.get("strides") is not None and (strides := a.pair("strides")) != size:
        out["strides"] = strides
    return out


def global_pool(a: Args, shapes: Shapes) -> dict[str, Any]:
    """The 1-D and 2-D global pools: the op their class imports as (OpDef.keras)."""
    a.expect("data_format", "channels_last", None, why="specgen images are channels-last")
    return {"op": KERAS_OPS[a.layer.cls], **({"keepdims": True} if a.flag("keepdims", False) else {})}


def pad(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("data_format", "channels_last", None, why="specgen images are channels-last")
    return {"op": "pad", "padding": _sides(a, "padding", 1)}


def crop(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("data_format", "channels_last", None, why="specgen images are channels-last")
    return {"op": "crop", "cropping": _sides(a, "cropping", 0)}


def upsample(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("data_format", "channels_last", None, why="specgen images are channels-last")
    out = {"op": "upsample", "size": a.pair("size", 2)}
    if (mode := a.expect("interpolation", "nearest", "bilinear")) != "nearest":
        out["interpolation"] = mode
    return out
