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
    # Bilinear: tf.image.resize maps output pixel x to source (x + 0.5) * in/out - 0.5 (half_pixel), clamped at the
    # edges, as ONNX Resize `linear`, `half_pixel` does (equal at every size pair). `sizes` for all four axes, the
    # first two read from the input (any batch, any channels): onnxruntime's transpose optimizer mis-permutes a
    # two-element `sizes` with `axes` (measured with 1.31, upsample.py).
    name, (height, width) = node.onnx_name, node.params["size"]
    if node.params["interpolation"] == "bilinear":
        return {"interpolation": "bilinear", "hw": ctx.constant(f"{name}___hw", [height, width])}
    return {"interpolation": "nearest", "axes": [_nearest_axis(ctx, name, "h", 2, height),
                                                 _nearest_axis(ctx, name, "w", 3, width)],
            "half": ctx.float_constant(f"{name}___half", 0.5), "one": ctx.float_constant(f"{name}___one", 1.0),
            "step": ctx.constant(f"{name}___step", [1])}


def _nearest_axis(ctx: OnnxContext, name: str, axis_name: str, axis: int, out: int) -> dict[str, Any]:
    """One axis of a nearest resize (templates/onnx/ops/resize.onnx.j2): TensorFlow's kernel takes source pixel
    min(floor((x + 0.5f) * (in / (float)out)), in - 1) in float32. ONNX Resize `nearest` computes
    (x + 0.5) / (out / in) - 0.5 and rounds: the same real number, rounded otherwise, so at some size pairs
    (30 -> 9, 6 -> 37) it reads the neighbouring pixel. The graph spells TensorFlow's arithmetic out instead."""
    return {"name": axis_name, "axis": axis, "out": ctx.float_constant(f"{name}___{axis_name}_out", float(out)),
            "end": ctx.float_constant(f"{name}___{axis_name}_end", out + 0.5)}


# moments: its taps are neighbours, taken as equal (the pools' assumption, docs/spec.md#lints).
OPS = (OpDef("resize", Resize, resize, tf_attrs, onnx_attrs, layout="first", symbolic=True, moments="same"),)
