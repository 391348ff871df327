"""resize: keras.layers.Resizing (bilinear or nearest, no antialias, no crop); ONNX Resize, channels-first.

The output's height and width are fixed by the layer, whatever the input's: an input declared with
named dimensions (`shape: [height, width, 3]`) takes images of any size, as a serving model that
resizes its own input does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from specgen.fields.base import PositiveInt
from specgen.fields.layers import LayerBase
from specgen.kinds.dims import nominal
from specgen.kinds.ops.base import FLOAT, OnnxContext, OpDef, OpResult
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import require_float, require_rank

# Per output value: nearest copies; bilinear weighs 4 taps (a multiply-add each, counted 2), as upsample counts.
FLOPS_PER_VALUE = {"nearest": 0, "bilinear": 8}


class Resize(LayerBase):
    op: Literal["resize"]
    height: PositiveInt = Field(description="Output height.")
    width: PositiveInt = Field(description="Output width.")
    interpolation: Literal["bilinear", "nearest"] = "bilinear"
    crop_to_aspect_ratio: Literal[False] = Field(False, description=(
        "Keras' default, the only value here: the image is stretched to height x width, not cropped first."))


def resize(layer: Resize, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_rank(shape, 4, layer.op)
    require_float(dtype, layer.op)
    out = (None, layer.height, layer.width, shape[3])
    params = {"size": (layer.height, layer.width), "interpolation": layer.interpolation}
    values = layer.height * layer.width * nominal(shape[3])
    return OpResult(out, FLOAT, params, flops=FLOPS_PER_VALUE[layer.interpolation] * values)


def tf_attrs(node: Node) -> dict[str, Any]:
    # Keras' Resizing calls tf.image.resize with antialias=False: half-pixel centers for both methods.
    return {"size": list(node.params["size"]), "interpolation": node.params["interpolation"]}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    # tf.image.resize maps output pixel x to source (x + 0.5) * in/out - 0.5 (half_pixel), bilinear clamped at
    # the edges, and nearest takes floor((x + 0.5) * in/out): half_pixel rounded half up (round_prefer_ceil).
    # `sizes` for all four axes, the first two read from the input (any batch, any channels): onnxruntime's
    # transpose optimizer mis-permutes a two-element `sizes` with `axes` (measured with 1.31, upsample.py).
    return {"interpolation": node.params["interpolation"],
            "hw": ctx.constant(f"{node.onnx_name}___hw", list(node.params["size"]))}


# moments: its taps are neighbours, taken as equal (the pools' assumption, docs/spec.md#lints).
OPS = (OpDef("resize", Resize, resize, tf_attrs, onnx_attrs, layout="first", symbolic=True, moments="same"),)
