"""The shape helpers the ops' rules share: windows (TensorFlow's SAME/VALID), axes, channels-first permutations.

No TensorFlow, onnx or jinja2 here: `specgen validate` imports this through the spec union.
"""

from __future__ import annotations

import math

from specgen import text
from specgen.kinds import dims
from specgen.kinds.ops.base import FLOAT, OpError
from specgen.kinds.ops.nodes import Shape


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


def window(size: int, stride: int, dilation: int, padding: str, extent: int | str,
            key: str) -> tuple[int | str, int | None, int | None]:
    """Output extent and (begin, end) padding, the way TensorFlow's SAME/VALID compute them.

    For a named dynamic extent the output is an expression (kinds/dims.py); the padding of a strided
    SAME window then depends on the run-time size and is None (ONNX's auto_pad SAME_UPPER computes it).
    """
    effective = (size - 1) * dilation + 1
    if isinstance(extent, str):
        if padding == "same":
            pads = (None, None) if stride > 1 else ((effective - 1) // 2, effective - 1 - (effective - 1) // 2)
            return dims.ceil_div(extent, stride), *pads
        return dims.ceil_div(dims.offset(extent, 1 - effective), stride), 0, 0
    if padding == "same":
        out = -(-extent // stride)
    else:
        out = -(-(extent - effective + 1) // stride)
    if out <= 0:
        raise OpError(f"a window of {effective} does not fit an input extent of {extent} "
                      "with padding 'valid'", key)
    total = max((out - 1) * stride + effective - extent, 0)
    return out, total // 2, total - total // 2


def spatial(shape: Shape, kernel: tuple[int, int], strides: tuple[int, int], dilation: tuple[int, int],
            padding: str, key: str) -> tuple[tuple[int | str, int | str], list[int] | None]:
    """Output (height, width) of a 2-D window op and its ONNX pads (None: SAME_UPPER at run time)."""
    h_out, top, bottom = window(kernel[0], strides[0], dilation[0], padding, _extent(shape[1]), key)
    w_out, left, right = window(kernel[1], strides[1], dilation[1], padding, _extent(shape[2]), key)
    if top is None or left is None or bottom is None or right is None:
        return (h_out, w_out), None
    return (h_out, w_out), [top, left, bottom, right]  # ONNX order: begins, then ends


def _extent(dim: int | str | None) -> int | str:
    return dim if isinstance(dim, str) else dim or 0
