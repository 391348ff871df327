"""Multi-input ops: add, multiply, subtract (broadcasting like numpy) and concat (along one axis).

Broadcasting needs inputs of one rank (the batch axis lines up; a [batch, C] input next to a
[batch, H, W, C] one would broadcast against the wrong axes): each other axis is equal or 1 on
one side. ONNX runs them in the first input's layout, and the lowering transposes every input
of the same rank into it, so a [N, 1, 1, C] squeeze-and-excite gate held channels-last meets a
channels-first conv output as [N, C, 1, 1].
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from specgen import text
from specgen.fields.base import Int, LayerName
from specgen.fields.layers import MultiInputBase
from specgen.kinds.dims import fixed
from specgen.kinds.ops.base import MaskRule, OnnxContext, OpDef, OpError, OpResult
from specgen.kinds.ops.nodes import Node, Shape
from specgen.kinds.ops.shapes import axis_in, held_axis, prod, require_float


class Elementwise(MultiInputBase):
    op: Literal["add", "multiply"]


class Subtract(MultiInputBase):
    op: Literal["subtract"]
    inputs: Annotated[list[LayerName], Field(min_length=2, max_length=2, description="[a, b]: the output is a - b.")]


class Concat(MultiInputBase):
    op: Literal["concat"]
    axis: Int = Field(-1, description="Counted with the batch dimension as axis 0, which cannot be concatenated.")


def broadcast(layer: Elementwise | Subtract, shapes: list[Shape]) -> Shape:
    """The numpy broadcast of same-rank shapes; OpError naming both inputs when it does not exist."""
    out = list(shapes[0])
    for i, (shape, name) in enumerate(zip(shapes[1:], layer.inputs[1:], strict=True), start=1):
        fits = len(shape) == len(out) and all(a == b or 1 in (a, b) for a, b in zip(out, shape, strict=True))
        if not fits:
            before = f"'{layer.inputs[0]}'" if i == 1 else f"'{layer.inputs[0]}' to '{layer.inputs[i - 1]}' broadcast to"
            rank = ("; an input of lower rank needs size-1 axes first (e.g. global_avg_pool's keepdims: true)"
                    if len(shape) != len(out) else _symbols_differ(out, shape))
            raise OpError(f"inputs: received {before} {text.shape(tuple(out))} and '{name}' {text.shape(shape)}, which do not "
                          f"broadcast; expected inputs of one rank whose axes are equal or 1 in one of them{rank}",
                          "inputs")
        out = [a if b == 1 else b for a, b in zip(out, shape, strict=True)]
    return tuple(out)


def _symbols_differ(a: list[int | str | None], b: Shape) -> str:
    """The hint for named dynamic dimensions (kinds/dims.py) that do not line up, else ''."""
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x != y and isinstance(x, str) | isinstance(y, str)]
    if not pairs:
        return ""
    x, y = pairs[0]
    return (f"; named dynamic dimensions line up only with the same name or size 1 ({x!r} vs {y!r}: "
            "their sizes are known only at run time)")


def elementwise(layer: Elementwise | Subtract, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    shape = broadcast(layer, shapes)
    for dtype in dtypes:
        require_float(dtype, layer.op)
    return OpResult(shape, flops=(len(shapes) - 1) * prod(shape))


def concat(layer: Concat, shapes: list[Shape], dtypes: list[str]) -> OpResult:
    rank = len(shapes[0])
    axis = axis_in(layer.axis, rank, "axis")
    first = shapes[0]
    for shape, name in zip(shapes[1:], layer.inputs[1:], strict=True):
        if len(shape) != rank or any(a != b for i, (a, b) in enumerate(zip(shape, first, strict=True)) if i != axis):
            raise OpError(f"concat on axis {axis} needs the other axes equal; '{layer.inputs[0]}' is "
                          f"{text.shape(first)} but '{name}' is {text.shape(shape)}", "inputs")
    if len(set(dtypes)) > 1:
        raise OpError(f"concat needs inputs of one dtype; received {', '.join(dtypes)}", "inputs")
    out = list(first)
    out[axis] = sum(fixed(s[axis]) for s in shapes)
    return OpResult(tuple(out), dtypes[0], {"axis": axis})


def concat_tf_attrs(node: Node) -> dict[str, Any]:
    return {"axis": node.params["axis"]}


def concat_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    return {"axis": held_axis(node.params["axis"], len(node.shape), first)}


def concat_mask(layer: Concat, masked: tuple[bool, ...], rank: int) -> str:
    """A padding mask marks the time axis: concatenating along it would need the masks concatenated too."""
    if layer.axis % rank == rank - 1:
        return ""
    return (f"concat along axis {layer.axis} joins the time axis the mask marks; Keras then concatenates the masks, "
            "which specgen does not (concatenate along the last axis)")


MERGE_MASK = MaskRule("union")  # Keras' Merge.compute_mask: the OR of the masks, none when an input has none
# Keras 3's Multiply (keras/src/layers/merging/multiply.py, _merge_function) also reads the masks for its values:
# each masked input counts as 1 at its masked steps, and where every input is masked (only when all carry one)
# the product is 0. Add, Subtract and Concatenate use the raw values (Average, Maximum and Minimum, which treat
# masked values specially too, are not specgen ops). render/mask_plan.py hands the masks to the templates.
PRODUCT_MASK = MaskRule("union", consumes="product")


def multiply_onnx_attrs(node: Node, first: bool, ctx: OnnxContext) -> dict[str, Any]:
    """Where a [batch, time] mask meets the product: Keras expands it on the last axis (channels-last), which a
    channels-first [batch, channels, time] tensor holds at axis 1."""
    return {"mask_axis": 1 if first else -1} if any(node.input_masks) else {}

OPS = (
    OpDef("add", Elementwise, elementwise, layout="any", symbolic=True, mask=MERGE_MASK, moments="sum",
          keras=("Add",)),
    OpDef("multiply", Elementwise, elementwise, onnx_attrs=multiply_onnx_attrs, layout="any", symbolic=True,
          mask=PRODUCT_MASK, moments="product", keras=("Multiply",)),
    OpDef("subtract", Subtract, elementwise, layout="any", symbolic=True, mask=MERGE_MASK, moments="difference",
          keras=("Subtract",)),
    OpDef("concat", Concat, concat, concat_tf_attrs, concat_onnx_attrs, layout="any",
          mask=MaskRule("union", check=concat_mask), moments="joined", keras=("Concatenate",)),
)
