"""JSON tensor `data` to numpy arrays, refusing every value that cannot become the declared datatype.

`data` is either flat (exactly as many numbers as the shape holds) or nested exactly as the
shape. The nesting and the count are checked on the lists before any array is built, the
JSON types of the leaves next (one pass over their types: numbers only, no booleans, and
integers only for integer datatypes), then numpy converts with overflow raising, so a value
out of the datatype's range is named instead of wrapping or becoming infinity. Every refusal is
a ProtocolError (400) naming the input, the value and what was expected.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from itertools import chain
from typing import Any

import numpy as np

from specgen.serve.errors import ProtocolError

SHOWN_CHARS = 80  # a value echoed in an error message is cut to this many characters


class HugeInt:
    """An integer literal longer than Python's int-string conversion limit (4,300 digits), kept as its digit count."""

    def __init__(self, text: str):
        self.digits = len(text.lstrip("-"))

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


def kind(value: Any) -> str:
    """The JSON type of a decoded value, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, HugeInt):
        return repr(value)
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):  # "received a list, expected a non-empty list" would contradict itself
        return "a list" if value else "an empty list"
    return "an object"


def cut(text: str) -> str:
    """A name from a request (a model, a version) for a message, cut short like `show`: a URL may carry 16 KiB."""
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def _json_pieces(value: Any) -> Iterator[str]:
    """`value` as json.dumps writes it, piece by piece, but a HugeInt as its description (unquoted: [an integer of
    5000 digits, 2]). The marker is the type, never a character: any character can come in a request's string."""
    if isinstance(value, HugeInt):
        yield repr(value)
    elif isinstance(value, list | tuple):
        yield "["
        for index, item in enumerate(value):
            yield from ((", ",) if index else ())
            yield from _json_pieces(item)
        yield "]"
    elif isinstance(value, dict):
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            yield from ((", ",) if index else ())
            yield json.dumps(str(key)[:SHOWN_CHARS + 1]) + ": "
            yield from _json_pieces(item)
        yield "}"
    elif isinstance(value, str):  # one more character than is shown: cut() then marks the string as cut
        yield json.dumps(value[:SHOWN_CHARS + 1])
    else:
        yield json.dumps(value, default=repr)


def show(value: Any) -> str:
    """A request value as JSON for a message, cut short: requests may hold anything, of any size. Only what is shown
    is written (a body may hold millions of numbers), so the nesting walked is at most as deep as the text is long."""
    text = ""
    try:
        for piece in _json_pieces(value):
            text += piece
            if len(text) > SHOWN_CHARS:
                break
    except (ValueError, RecursionError):  # an int past Python's 4,300-digit conversion limit
        text = kind(value)
    return cut(text)


def _expected(datatype: str, count: int, shape: tuple[int, ...]) -> str:
    return f"{count} {datatype} values for shape {list(shape)} (flat row-major or nested)"


def _leaves(name: str, data: list[Any], shape: tuple[int, ...], expected: str) -> list[Any]:
    """The numbers of `data` in row-major order, after checking its nesting and count against `shape`."""
    count = math.prod(shape)
    if not shape or not data or not isinstance(data[0], list):
        if len(data) != count:
            raise ProtocolError(f"input '{name}': received {len(data)} data elements, expected {expected}")
        return data
    level: list[Any] = [data]
    for depth, dim in enumerate(shape):
        for item in level:
            if not isinstance(item, list):
                raise ProtocolError(f"input '{name}': received nested lists in 'data' that do not match the shape: "
                                    f"{kind(item)} where dimension {depth} of shape {list(shape)} needs a list of {dim}, "
                                    f"expected {expected}")
            if len(item) != dim:
                raise ProtocolError(f"input '{name}': received nested lists in 'data' that do not match the shape: "
                                    f"a list of {len(item)} where dimension {depth} of shape {list(shape)} is {dim}, "
                                    f"expected {expected}")
        level = list(chain.from_iterable(level))
    return level


def _refuse_types(name: str, leaves: list[Any], dtype: np.dtype, datatype: str) -> None:
    """Only numbers, and only integers for integer datatypes: one pass over the leaves' types."""
    integer = dtype.kind in "iu"
    allowed: set[type] = {int} if integer else {int, float}
    if set(map(type, leaves)) <= allowed:
        return
    value = next(v for v in leaves if type(v) not in allowed)
    wanted = f"{datatype} {'integers' if integer else 'numbers'}"
    if type(value) is float:
        raise ProtocolError(f"input '{name}': received a number that is not an integer ({show(value)}) in 'data', "
                            f"expected {wanted}")
    what = "a list among the numbers" if isinstance(value, list) else kind(value)
    raise ProtocolError(f"input '{name}': received {what} in 'data', expected {wanted}")


def _too_big(value: int | float, limit: float) -> bool:
    if isinstance(value, int) and value.bit_length() > 1024:  # no float holds it
        return True
    return math.isfinite(float(value)) and abs(float(value)) > limit


def _out_of_range(name: str, leaves: list[Any], dtype: np.dtype, datatype: str) -> ProtocolError:
    """The error for the first value outside the datatype's range (the error path only)."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        value = next((v for v in leaves if not info.min <= v <= info.max), None)
        return ProtocolError(f"input '{name}': received {show(value)} in 'data', expected {datatype} integers in "
                             f"{info.min}..{info.max}")
    limit = float(np.finfo(dtype).max)
    value = next((v for v in leaves if _too_big(v, limit)), None)
    return ProtocolError(f"input '{name}': received {show(value)} in 'data', expected {datatype} numbers within "
                         f"+-{limit:.8g} (or NaN, Infinity, -Infinity)")


def json_array(name: str, datatype: str, dtype: np.dtype, data: Any, shape: tuple[int, ...]) -> np.ndarray:
    """JSON `data` as a flat array of `dtype`, or a ProtocolError naming the input and what was expected."""
    expected = _expected(datatype, math.prod(shape), shape)
    if not isinstance(data, list):
        raise ProtocolError(f"input '{name}': received 'data' that is {kind(data)}, expected a list of {expected}")
    leaves = _leaves(name, data, shape, expected)
    _refuse_types(name, leaves, dtype, datatype)
    try:
        with np.errstate(over="raise"):
            return np.array(leaves, dtype=dtype)
    except (OverflowError, FloatingPointError):
        raise _out_of_range(name, leaves, dtype, datatype) from None
