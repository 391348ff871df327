"""Keras' 1-D layers as spec layers: Conv1D, MaxPooling1D, AveragePooling1D and the 1-D global pools.

Kept beside layers.py (whose CONVERTERS merges this table in) so that the sequence layers grow
in their own module. Keras writes 1-D sizes as one-element lists ([3]); the spec takes an integer.
"""

from __future__ import annotations

from typing import Any

from specgen.importers.keras.args import Args
from specgen.importers.keras.base import KERAS_OPS, Converter, Shapes, _bias_act, _init
from specgen.importers.keras.convolution import global_pool
from specgen.importers.keras.objects import is_integer


def _one(a: Args, key: str, default: Any = None) -> int:
    value = a.get(key, default)
    values = list(value) if isinstance(value, list | tuple) else [value]
    if len(values) != 1 or not is_integer(values[0], 1):
        raise a.wrong(key, "a positive integer, or a list of one")
    return int(values[0])


def _channels_last(a: Args) -> None:
    a.expect("data_format", "channels_last", None, why="specgen sequences are channels-last [batch, steps, channels]")


def conv1d(a: Args, shapes: Shapes) -> dict[str, Any]:
    a.expect("lora_rank", None, why="LoRA adapters have no spec form")
    _channels_last(a)
    out: dict[str, Any] = {"op": "conv1d", "filters": a.integer("filters"), "kernel": _one(a, "kernel_size")}
    padding = a.expect("padding", "valid", "same", "causal", why="padding 'valid', 'same' or 'causal'")
    for key, spec_key in (("strides", "strides"), ("dilation_rate", "dilation")):
        if (value := _one(a, key, 1)) != 1:
            out[spec_key] = value
    out |= {"padding": padding} | ({"groups": groups} if (groups := a.integer("groups", 1)) != 1 else {})
    _init(a, out, "kernel_initializer", "kernel_init")
    return _bias_act(a, out)


def pool1d(a: Args, shapes: Shapes) -> dict[str, Any]:
    """MaxPooling1D, AveragePooling1D: the op their class imports as (OpDef.keras)."""
    _channels_last(a)
    size = _one(a, "pool_size", 2)
    padding = a.expect("padding", "valid", "same", why="padding 'valid' or 'same'")
    out = {"op": KERAS_OPS[a.layer.cls], "size": size, "padding": padding}
    if a.get("strides") is not None and (strides := _one(a, "strides")) != size:
        out["strides"] = strides
    return out


CONVERTERS_1D: dict[str, Converter] = {
    "Conv1D": conv1d, "MaxPooling1D": pool1d, "AveragePooling1D": pool1d,
    "GlobalAveragePooling1D": global_pool, "GlobalMaxPooling1D": global_pool,
}
