"""The shape helpers the ops' rules share: windows (TensorFlow's SAME/VALID), axes, channels-first permutations.

No TensorFlow, onnx or jinja2 here: `specgen validate` imports this through the spec union.
"""

from __future__ import annotations

import math
from typing import Any

from specgen import text
from specgen.kinds import dims
from specgen.kinds.ops.base import FLOAT, OnnxContext, OpError
from specgen.kinds.ops.nodes import Node, Shape


def pair(value: int | list[int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


def prod(shape: Shape) -> int:
    """Values per example; a named dynamic dimension counts 1 (FLOPs are per position of it)."""
    return math.prod(dims.nominal(d) for d in shape if d is not None)


def fixed(dim: int | str | None, what: str, key: str = "input") -> int:
    """`dim` where the rule needs a size known at build time; a symbol gets an error naming it."""
    if isinstance(dim, str):
        raise OpError(f"{what} needs a fixed size; received the named dynamic dimension '{dim}' "
                      "(its size is known only at run time)", key)
    return dim or 0


def require_rank(shape: Shape, rank: int, what: str) -> None:
    if len(shape) != rank:
        raise OpError(f"{what} needs a rank-{rank} input (batch, height, width, channels); "
                      f"received {text.shape(shape)}", "input")


def require_float(dtype: str, op: str) -> None:
    if dtype != FLOAT:
        raise OpError(f"{op} needs a float32 input; received {dtype} (integer inputs feed embedding layers)",
                      "input")


def axis_in(axis: int, rank: int, key: str) -> int:
    """`axis` as a non-negative index; the batch axis is refused."""
    if not -rank <= axis < rank or axis % rank == 0:
        raise OpError(f"axis {axis} is out of range for a rank-{rank} tensor (axis 0 is the batch)", key)
    return axis % rank


def to_first(rank: int) -> list[int]:
    """The permutation from channels-last to channels-first."""
    return [0, rank - 1, *range(1, rank - 1)]


def to_last(rank: int) -> list[int]:
    return [0, *range(2, rank), 1]


def held_axis(axis: int, rank: int, first: bool) -> int:
    """A (channels-last, non-negative) axis of a tensor held channels-first when `first`."""
    return to_first(rank).index(axis) if first else axis


# How a window op's ONNX node pads where TensorFlow's SAME pads depend on a named dimension's run-time size
# (the render param `pads` is then one of these instead of a list of ONNX pads).
AUTO_PAD = "SAME_UPPER"  # ONNX's auto_pad SAME_UPPER, which equals TensorFlow's SAME at every size here
IN_GRAPH = "in_graph"  # the graph computes TensorFlow's pads from the input's Shape (same_pads_attrs)
Pads = list[int] | str


def window(size: int, stride: int, dilation: int, padding: str, extent: int | str,
           key: str) -> tuple[int | str, tuple[int, int] | None]:
    """Output extent and (begin, end) padding, the way TensorFlow's SAME/VALID compute them.

    For a named dynamic extent the output is an expression (kinds/dims.py); the padding of a strided
    SAME window then mostly depends on the run-time size and is None (`run_time_pads` says how ONNX gets it).
    """
    effective = (size - 1) * dilation + 1
    if isinstance(extent, str):
        if padding == "valid":
            return dims.ceil_div(dims.offset(extent, 1 - effective), stride), (0, 0)
        if stride == 1:
            return extent, ((effective - 1) // 2, effective - 1 - (effective - 1) // 2)
        if effective < stride and effective <= 2:
            # TensorFlow's total (upper_is_exact) is then 0 or 1, always at the end: ONNX's fixed [0, k - 1] makes the
            # same ceil(n/s) windows at every n, and a window reads its end pad only where TensorFlow pads.
            return dims.ceil_div(extent, stride), (0, effective - 1)
        return dims.ceil_div(extent, stride), None
    if padding == "same":
        out = -(-extent // stride)
    else:
        out = -(-(extent - effective + 1) // stride)
    if out <= 0:
        raise OpError(f"a window of {effective} does not fit an input extent of {extent} "
                      "with padding 'valid'", key)
    total = max((out - 1) * stride + effective - extent, 0)
    return out, (total // 2, total - total // 2)


def upper_is_exact(size: int, stride: int, dilation: int, extent: int | str) -> bool:
    """Whether ONNX's SAME_UPPER pads an axis as TensorFlow's SAME does: when its pad total is never negative.

    Both take the total (ceil(n/s) - 1) * s + k - n (k the dilated window) and put the odd one at the end, but
    TensorFlow clamps a negative total to 0 and onnxruntime pads by it (MaxPool refuses, Conv and
    AveragePool shift their windows). With n = q*s + r the total is k - s at r = 0 and k - r otherwise:
    never negative at any n exactly when k >= s. A fixed extent is checked at its size.
    """
    effective = (size - 1) * dilation + 1
    if isinstance(extent, str):
        return effective >= stride
    return (-(-extent // stride) - 1) * stride + effective - extent >= 0


def run_time_pads(axes: list[tuple[int, int, int, int | str]]) -> str:
    """AUTO_PAD where SAME_UPPER is exact on every (size, stride, dilation, extent) axis of the op, else IN_GRAPH."""
    return AUTO_PAD if all(upper_is_exact(*axis) for axis in axes) else IN_GRAPH


def spatial(shape: Shape, kernel: tuple[int, int], strides: tuple[int, int], dilation: tuple[int, int],
            padding: str, key: str) -> tuple[tuple[int | str, int | str], Pads]:
    """Output (height, width) of a 2-D window op and its ONNX pads (or how they are found at run time)."""
    extents = (_extent(shape[1]), _extent(shape[2]))
    h_out, h_pads = window(kernel[0], strides[0], dilation[0], padding, extents[0], key)
    w_out, w_pads = window(kernel[1], strides[1], dilation[1], padding, extents[1], key)
    if h_pads is None or w_pads is None:
        return (h_out, w_out), run_time_pads(list(zip(kernel, strides, dilation, extents, strict=True)))
    return (h_out, w_out), [h_pads[0], w_pads[0], h_pads[1], w_pads[1]]  # ONNX order: begins, then ends


def same_pads_attrs(node: Node, ctx: OnnxContext, kernel: list[int], strides: list[int], dilation: list[int],
                    fill: float = 0.0, counts: bool = False) -> dict[str, Any]:
    """The ONNX attributes a window template reads for its padding: `pads` (None: auto_pad SAME_UPPER) and
    `same`, the constants of templates/onnx/same_pads.onnx.j2 where the graph computes TensorFlow's SAME pads
    from the run-time size (None elsewhere); the op itself then pads nothing (`pads` all zeros).

    `fill` is what the padded positions hold (a max pool's -inf: they never win); `counts` asks for the
    constant that an average pool needs to count the real elements of each window, as TensorFlow divides by.
    """
    pads = node.params["pads"]
    if pads == AUTO_PAD:
        return {"pads": None, "same": None}
    if pads != IN_GRAPH:
        return {"pads": pads, "same": None}
    name, rank = node.onnx_name, len(kernel)
    excess = [(k - 1) * d + 1 - s for k, s, d in zip(kernel, strides, dilation, strict=True)]  # k_eff - s
    same = {"strides": ctx.constant(f"{name}___same_strides", strides),
            "excess": ctx.constant(f"{name}___same_excess", excess),
            "zero": ctx.constant(f"{name}___same_zero", [0]), "two": ctx.constant(f"{name}___same_two", [2]),
            "outer": ctx.constant(f"{name}___same_outer", [0, 0]),  # the batch and channel axes
            "fill": ctx.float_constant(f"{name}___same_fill", fill) if fill else "",  # "": Pad's default, zeros
            "ones": ctx.constant(f"{name}___same_ones", [1, 1]) if counts else ""}
    return {"pads": [0] * 2 * rank, "same": same}


def _extent(dim: int | str | None) -> int | str:
    return dim if isinstance(dim, str) else dim or 0
