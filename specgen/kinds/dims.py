"""Named dynamic dimensions: how a shape carries a size that is known only at run time.

A dimension of a `Shape` (kinds/ops/nodes.py) is an int (fixed), None (the batch) or a str: a
symbol the spec declares in an input's shape (`shape: [seq, 64]`), or an expression of symbols an
op derived from one (`ceil(height/2)`, `height-2`, `2*width`). The expression is the dimension's
identity: two tensors line up where their strings are equal (a residual add of two `seq` tensors),
the ONNX graph declares it as that `dim_param`, TensorFlow's signature as None, and the report
prints it. Hand-written rather than sympy: four forms cover every rule (offsets, strided windows,
integer scaling), and the strings must be stable byte for byte in generated files.

FLOPs count a symbolic dimension as 1 (`nominal`): the figures are per position of each symbol.
`sizes` sets other counts for a while, so specgen/report/formulas.py can rerun a rule to recover its
FLOPs as a polynomial in the dimensions (attention's scores are quadratic in the length).
No specgen import here: spec/io.py and every op module use it.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction

SYMBOL = re.compile(r"[a-z][a-z0-9_]*")
_NAME = re.compile(r"[a-z][a-z0-9_]*(?![a-z0-9_(])")  # a symbol in an expression: an identifier not called (ceil()
_ATOM = re.compile(r"[a-z][a-z0-9_]*|ceil\(.*\)|\d+\*[a-z][a-z0-9_]*")
_OFFSET = re.compile(r"(?P<base>.*?)(?P<off>[+-]\d+)")
SYMBOL_HINT = "a lowercase identifier such as seq or height (a named dynamic dimension)"
BATCH = "batch"  # the batch axis's dim_param in the exported ONNX graph (render/onnx_plan.py): float[batch, seq, 8]
# Names specgen itself gives a meaning in a dimension, which a symbol of the spec must not take (spec/io.py refuses
# them): one ONNX dim_param is one size at run time, so a symbol `batch` was tied to the batch size in model.onnx
# (float[batch, batch, 8]) while TensorFlow left the two free; `ceil` and `floor` are the functions of expressions.
RESERVED: dict[str, str] = {
    BATCH: "the exported ONNX graph names the batch axis 'batch' (float[batch, seq, 8]), so a dimension of that name "
           "would have to equal the batch size",
    "ceil": "derived dimensions are written with it (ceil(seq/2))",
    "floor": "dimension expressions use it as a function (floor(seq/2))",
}
_SIZES: ContextVar[Mapping[str, int]] = ContextVar("specgen_dim_sizes", default={})  # noqa: B039 (never mutated)


def is_symbolic(dim: object) -> bool:
    return isinstance(dim, str)


def symbols(shape: tuple[object, ...]) -> list[str]:
    """The symbolic dimensions of `shape`, in order."""
    return [d for d in shape if isinstance(d, str)]


def names(dim: str) -> list[str]:
    """The declared symbols an expression is made of (`ceil((height-2)/2)` -> ['height'])."""
    return list(dict.fromkeys(_NAME.findall(dim)))


ROUNDS: dict[str, Callable[[Fraction], int]] = {"ceil": math.ceil, "floor": math.floor}
_OPERATIONS: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda p, q: p + q, ast.Sub: lambda p, q: p - q, ast.Mult: lambda p, q: p * q, ast.Div: lambda p, q: p / q}


def expression(dim: str) -> ast.expr:
    """An expression as `value` reads it, each symbol prefixed with `_`: a symbol may be named as a Python keyword
    (`in`, `if`), which ast could not parse bare."""
    return ast.parse(_NAME.sub(lambda m: f"_{m[0]}", dim), mode="eval").body


def value(node: ast.expr, size: Callable[[str], int]) -> Fraction:
    """An `expression` (symbols, integers, + - * /, ceil and floor) in exact arithmetic, `size` giving each symbol's
    size by its name; ValueError for any other form."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    if isinstance(node, ast.Name):
        return Fraction(size(node.id[1:]))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -value(node.operand, size)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ROUNDS and len(node.args) == 1:
        return Fraction(ROUNDS[node.func.id](value(node.args[0], size)))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATIONS:
        return _OPERATIONS[type(node.op)](value(node.left, size), value(node.right, size))
    raise ValueError(f"not a dimension expression: {ast.unparse(node)}")


def nominal(dim: int | str | None) -> int:
    """The size FLOPs and element counts assume: a symbol counts 1 (per position; within `sizes`, its size
    there), the batch 1."""
    if isinstance(dim, str):
        return _SIZES.get().get(dim, 1)
    return dim if isinstance(dim, int) else 1


def count(dim: int | str | None) -> int:
    """A dimension in an element or FLOP count: a symbol counts 1 (per position, as `nominal`), the batch (None) 0."""
    return nominal(dim) if isinstance(dim, str) else dim or 0


@contextmanager
def sizes(values: Mapping[str, int]) -> Iterator[None]:
    """Within it, `nominal` and `count` take each dimension expression in `values` at that size (others 1)."""
    token = _SIZES.set(dict(values))
    try:
        yield
    finally:
        _SIZES.reset(token)


def fixed(dim: int | str | None) -> int:
    """The size of a dimension in the rule of an op without `symbolic` (kinds/ops/__init__.py refuses named dimensions
    before such a rule runs); the batch (None) is 0."""
    if isinstance(dim, str):
        raise AssertionError(f"the named dimension '{dim}' reached a rule that needs fixed sizes")
    return dim or 0


def _split(dim: str) -> tuple[str, int]:
    """`height-2` -> ('height', -2); an expression without a trailing offset -> (dim, 0)."""
    match = _OFFSET.fullmatch(dim)
    if match and _ATOM.fullmatch(match["base"]):
        return match["base"], int(match["off"])
    return dim, 0


def offset(dim: int | str, by: int) -> int | str:
    """`dim + by`, folding offsets (`height-2` then -2 gives `height-4`)."""
    if isinstance(dim, int):
        return dim + by
    base, off = _split(dim)
    off += by
    return base if off == 0 else f"{base}{off:+d}"


def _paren(dim: str) -> str:
    return dim if _ATOM.fullmatch(dim) else f"({dim})"


def scaled(dim: int | str, factor: int) -> int | str:
    """`factor * dim` (upsampling, a transposed convolution's stride)."""
    if isinstance(dim, int) or factor == 1:
        return dim * factor if isinstance(dim, int) else dim
    return f"{factor}*{_paren(dim)}"


def ceil_div(dim: int | str, by: int) -> int | str:
    """`ceil(dim / by)` (a strided window's output extent)."""
    if isinstance(dim, int):
        return -(-dim // by)
    return dim if by == 1 else f"ceil({_paren(dim)}/{by})"
