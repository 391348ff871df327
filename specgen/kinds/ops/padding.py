"""pad and crop: zeros around, or rows and columns off, the height and width of NHWC images.

Like Keras' ZeroPadding2D and Cropping2D: `padding` / `cropping` is one integer for every side,
`[h, w]` (top and bottom, left and right) or `[[top, bottom], [left, right]]`. Both run in their
input's ONNX layout ("any"): after a conv the tensor is held channels-first and Pad / Slice take
the held height and width axes, so no Transpose is added around them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import Field

from specgen import text
from specgen.fields.base import NonNegativeInt
from specgen.fields.layers import LayerBase
from specgen.fields.unions import by_shape
from specgen.kinds.dims import fixed
from specgen.kinds.ops.base import OnnxContext, OpDef, OpError, OpResult
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import held_axis, require_rank

Pairs = tuple[tuple[int, int], tuple[int, int]]  # ((top, bottom), (left, right))


def _pick(value: Any) -> str | None:
    """The branch of a padding value: a scalar, `[h, w]` or `[[top, bottom], [left, right]]`."""
    if isinstance(value, dict):
        return None
    if isinstance(value, list):
        return "pairs" if any(isinstance(v, list) for v in value) else "list"
    return "scalar"


Two = Annotated[list[NonNegativeInt], Field(min_length=2, max_length=2)]
if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Sides: TypeAlias = int | list[int] | list[list[int]]
else:
    Sides = by_shape(_pick, "an integer, [h, w] or [[top, bottom], [left, right]]", scalar=NonNegativeInt, list=Two,
                     pairs=Annotated[list[Two], Field(min_length=2, max_length=2)])


class Pad(LayerBase):
    op: Literal["pad"]
    padding: Sides = Field(1, description="Zeros added: an integer, [h, w] or [[top, bottom], [left, right]].")


class Crop(LayerBase):
    op: Literal["crop"]
    cropping: Sides = Field(0, description="Rows and columns removed: an integer, [h, w] or "
                                           "[[top, bottom], [left, right]].")


def pairs(value: int | list[int] | list[list[int]]) -> Pairs:
    if isinstance(value, int):
        return (value, value), (value, value)
    h, w = value
    if isinstance(h, list) and isinstance(w, list):
        return (h[0], h[1]), (w[0], w[1])
    assert isinstance(h, int) and isinstance(w, int)
    return (h, h), (w, w)


def pad(layer: Pad, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_rank(shape, 4, "pad")
    (top, bottom), (left, right) = sides = pairs(layer.padding)
    out = (None, fixed(shape[1]) + top + bottom, fixed(shape[2]) + left + right, shape[3])
    return OpResult(out, dtype, {"sides": sides})  # no arithmetic: 0 FLOPs, like reshape


def crop(layer: Crop, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    (shape,), (dtype,) = shapes, dtypes
    require_rank(shape, 4, "crop")
    (top, bottom), (left, right) = sides = pairs(layer.cropping)
    height, width = fixed(shape[1]), fixed(shape[2])
    if top + bottom >= height or left + right >= width:
        raise OpError(f"cropping: received {layer.cropping!r} ({top + bottom} rows and {left + right} columns off), "
                      f"expected at most {height - 1} rows (top + bottom) and {width - 1} columns (left + right) "
                      f"off a {text.shape(shape)} input, leaving at least one", "cropping")
    return OpResult((None, height - top - bottom, width - left - right, shape[3]), dtype, {"sides": sides})


def pad_tf_attrs(node: Node) -> dict[str, Any]:
    (top, bottom), (left, right) = node.params["sides"]
    return {"paddings": [[0, 0], [top, bottom], [left, right], [0, 0]]}


def pad_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    """ONNX Pad's `pads` input: every axis' begin, then every axis' end, in the held layout."""
    (top, bottom), (left, right) = node.params["sides"]
    begins, ends = [0] * 4, [0] * 4
    for axis, (before, after) in ((1, (top, bottom)), (2, (left, right))):
        begins[held_axis(axis, 4, first)], ends[held_axis(axis, 4, first)] = before, after
    return {"pads": ctx.constant(f"{node.onnx_name}___pads", begins + ends)}


def _kept(node: Node) -> tuple[list[int], list[int]]:
    """(starts, ends) of the rows and columns a crop keeps."""
    (top, bottom), (left, right) = node.params["sides"]
    _, height, width, _ = node.input_shapes[0]
    return [top, left], [(height or 0) - bottom, (width or 0) - right]


def crop_tf_attrs(node: Node) -> dict[str, Any]:
    starts, ends = _kept(node)
    return {"starts": starts, "ends": ends}


def crop_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    starts, ends = _kept(node)
    name = node.onnx_name
    return {"starts": ctx.constant(f"{name}___starts", starts), "ends": ctx.constant(f"{name}___ends", ends),
            "axes": ctx.constant(f"{name}___axes", [held_axis(1, 4, first), held_axis(2, 4, first)])}


OPS = (
    OpDef("pad", Pad, pad, pad_tf_attrs, pad_onnx_attrs, layout="any", moments="same", pad_folding="zero_pad",
          keras=("ZeroPadding2D",)),
    OpDef("crop", Crop, crop, crop_tf_attrs, crop_onnx_attrs, layout="any", moments="same", keras=("Cropping2D",)),
)
