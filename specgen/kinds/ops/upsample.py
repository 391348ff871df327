"""upsample: keras.layers.UpSampling2D (integer factors, nearest or bilinear); ONNX Resize, channels-first."""

from __future__ import annotations

from typing import Any, Literal

from specgen.fields.layers import LayerBase, Size2
from specgen.kinds.dims import count, nominal, scaled
from specgen.kinds.ops.base import FLOAT, OnnxContext, OpDef, OpResult
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import pair, require_float, require_rank

# Per output value: nearest copies; bilinear weighs 4 taps (a multiply-add each, counted 2).
FLOPS_PER_VALUE = {"nearest": 0, "bilinear": 8}


class Upsample(LayerBase):
    op: Literal["upsample"]
    size: Size2 = 2
    interpolation: Literal["nearest", "bilinear"] = "nearest"


def upsample(layer: Upsample, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_rank(shape, 4, layer.op)
    require_float(dtype, layer.op)
    sh, sw = pair(layer.size)
    out = (None, scaled(shape[1] or 0, sh), scaled(shape[2] or 0, sw), shape[3])
    params = {"size": (sh, sw), "interpolation": layer.interpolation}
    values = nominal(out[1]) * nominal(out[2]) * count(out[3])  # per position of a named dimension
    return OpResult(out, FLOAT, params, flops=FLOPS_PER_VALUE[layer.interpolation] * values)


def tf_attrs(node: Node) -> dict[str, Any]:
    # Keras repeats for nearest and calls tf.image.resize (half-pixel centers, no antialias) for bilinear.
    return {"size": list(node.params["size"]), "interpolation": node.params["interpolation"],
            "out_hw": list(node.shape[1:3]), "dynamic": any(isinstance(d, str) for d in node.shape[1:3])}


def onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    # The template picks the Resize modes that match TensorFlow: nearest as repeating (source index
    # floor(out / size): asymmetric coordinates rounded down), bilinear as tf.image.resize (source
    # (out + 0.5) / size - 0.5, half_pixel, clamped at the edges).
    # Scales for all four axes (integers, exact in float), not `sizes` with the `axes` attribute:
    # onnxruntime's transpose optimizer mis-permutes a two-element `sizes` (measured with 1.31).
    sh, sw = node.params["size"]
    return {"interpolation": node.params["interpolation"], "scales": [1.0, 1.0, float(sh), float(sw)],
            "scales_name": f"{node.onnx_name}___scales"}


OPS = (OpDef("upsample", Upsample, upsample, tf_attrs, onnx_attrs, layout="first", symbolic=True, moments="same",
              keras=("UpSampling2D",)),)
