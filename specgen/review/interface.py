"""The `interface` section of `specgen diff`: the served signature as model.onnx declares it, and which of its
changes break a client that sends and reads as before (docs/review.md, "Interface changes").

A client that worked with OLD sends each input at a shape OLD accepted and reads each output at the shape OLD
answered with. NEW breaks it when such a request is refused or answered at another shape, and only then: a
dim_param renamed (`seq` -> `time`) or a fixed size made named (a batch of 1 made dynamic) is a `compatible` row.
Input by input, dimension by dimension, OLD's against NEW's (the batch as `batch`, or 1 where it is fixed):

- the same fixed size, or a name: fine; another fixed size, or a name made fixed: breaks (a client that sent
  another size is refused), as do another rank or dtype;
- a fixed size k or a name m made a name n: n stands for k (or m). It breaks where one of NEW's names stands for
  two different things (`x: [seq]` and `y: [len]` both made `[n]`: the two lengths must now be equal); one of
  OLD's names split into two is widening.

An output keeps its meaning when each of its dimensions, NEW's names replaced by what they stand for, equals
OLD's for every request: `ceil(time/2)` after `seq` -> `time` is `ceil(seq/2)`, `batch` after `1` -> `batch`
is 1. The expressions (kinds/dims.py) are compared by value at a few sizes of OLD's names, not as strings.
"""

from __future__ import annotations

import ast
import math
import random
from collections.abc import Callable
from fractions import Fraction

from specgen import text
from specgen.ir.exported import exported
from specgen.ir.model import ModelIR
from specgen.kinds import dims
from specgen.kinds.ops.nodes import Shape
from specgen.review.sections import Change, Section

Dim = int | str  # a served dimension: a fixed size or a dim_param (a name or an expression of names)
Signature = dict[str, tuple[str, tuple[Dim, ...]]]  # input or output name -> (dtype, served dims)
TRIALS = 4  # sizes of OLD's names the outputs are compared at: random ones, drawn with a fixed seed


def interface(old: ModelIR, new: ModelIR) -> Section:
    """The inputs and outputs that `export.onnx.outputs` keeps, their dtypes and their served dims (render/onnx_plan.py).
    Precision variants keep float32 at the IO and the opset names no tensor: neither changes it."""
    section = Section("interface")
    old, new = exported(old), exported(new)
    inputs = (_signature(old, [(i.name, i.dtype, i.shape) for i in old.inputs]),
              _signature(new, [(i.name, i.dtype, i.shape) for i in new.inputs]))
    outputs = (_signature(old, [(o, old.node(layer).dtype, old.node(layer).shape) for o, layer in old.outputs.items()]),
               _signature(new, [(o, new.node(layer).dtype, new.node(layer).shape) for o, layer in new.outputs.items()]))
    stands = _stands_for(*inputs)
    for kind, (before, after) in (("input", inputs), ("output", outputs)):
        for name in sorted(before.keys() | after.keys()):
            if name not in after:
                section.changes.append(Change("removed", f"{kind} {name}", _render(before[name])))
                section.breaks.append(f"{kind} '{name}' was removed: clients that {_use(kind)} it fail")
            elif name not in before:
                section.changes.append(Change("added", f"{kind} {name}", "", _render(after[name])))
                if kind == "input":
                    section.breaks.append(f"input '{name}' is new: clients that do not send it fail")
            else:
                _compare(section, kind, name, before[name], after[name], stands)
    return section


def _compare(section: Section, kind: str, name: str, a: tuple[str, tuple[Dim, ...]], b: tuple[str, tuple[Dim, ...]],
             stands: dict[str, set[Dim]]) -> None:
    x, y = _render(a), _render(b)
    if x == y:
        return
    why = _input_break(a, b, stands) if kind == "input" else _output_break(a, b, stands)
    if why is None:
        section.changes.append(Change("compatible", f"{kind} {name}", x, y))
        return
    section.changes.append(Change("changed", f"{kind} {name}", x, y))
    section.breaks.append(f"{kind} '{name}' changed from {x} to {y}: clients that {_use(kind)} it as before fail"
                          + (f" ({why})" if why else ""))


def _use(kind: str) -> str:
    return "send" if kind == "input" else "read"


def _signature(ir: ModelIR, tensors: list[tuple[str, str, Shape]]) -> Signature:
    batch: Dim = "batch" if ir.dynamic_batch else 1  # as onnx_plan.Lowering declares it
    return {name: (dtype, tuple(batch if d is None else d for d in shape)) for name, dtype, shape in tensors}


def _render(tensor: tuple[str, tuple[Dim, ...]]) -> str:
    return f"{tensor[0]}{text.shape(tensor[1])}"


def _stands_for(before: Signature, after: Signature) -> dict[str, set[Dim]]:
    """Each name in NEW's inputs -> what it stands for in a request that fitted OLD: OLD's names and fixed sizes
    at the same places (more than one: the name ties together what OLD left free)."""
    stands: dict[str, set[Dim]] = {}
    for name in before.keys() & after.keys():
        (_, a), (_, b) = before[name], after[name]
        if len(a) == len(b):
            for x, y in zip(a, b, strict=True):
                if isinstance(y, str):
                    stands.setdefault(y, set()).add(x)
    return stands


def _input_break(a: tuple[str, tuple[Dim, ...]], b: tuple[str, tuple[Dim, ...]],
                 stands: dict[str, set[Dim]]) -> str | None:
    """Why a request that fitted OLD's `a` is refused by NEW's `b` ('' when the rendering says it), or None."""
    if a[0] != b[0] or len(a[1]) != len(b[1]):
        return ""
    for x, y in zip(a[1], b[1], strict=True):
        if isinstance(y, int) and x != y:
            return ""  # another fixed size, or a name made fixed: clients that sent another size are refused
        if isinstance(y, str) and len(stands[y]) > 1:
            tied = ", ".join(sorted(map(str, stands[y])))
            return f"'{y}' now stands for {tied}: they must be equal"
    return None


def _output_break(a: tuple[str, tuple[Dim, ...]], b: tuple[str, tuple[Dim, ...]],
                  stands: dict[str, set[Dim]]) -> str | None:
    """'' when some request OLD answered at `a` is answered at another shape (or dtype) by NEW, else None."""
    if a[0] != b[0] or len(a[1]) != len(b[1]):
        return ""
    written = {n for d in (*a[1], *b[1]) if isinstance(d, str) for n in dims.names(d)}
    names = sorted(written | set(stands) | {m for meant in stands.values() for m in meant if isinstance(m, str)})
    draw = random.Random(0)
    for _ in range(TRIALS):
        old_size = {n: draw.randint(1_000, 1_000_000) for n in names}
        new_size = {}
        for n in names:  # a NEW name stands for one thing; a tie (an input break already) takes its first
            meant = sorted(stands.get(n, {n}), key=str)[0]
            new_size[n] = meant if isinstance(meant, int) else old_size[meant]
        for x, y in zip(a[1], b[1], strict=True):
            if _value(x, old_size.__getitem__) != _value(y, new_size.__getitem__):
                return ""
    return None


def _value(dim: Dim, size: Callable[[str], int]) -> Fraction:
    """A served dimension's size with each name at `size` (the forms of kinds/dims.py: n, k, n+k, k*n, ceil(n/k))."""
    if isinstance(dim, int):
        return Fraction(dim)
    # Each name prefixed with `_` first: a dimension may be named as a Python keyword (`in`, `if`).
    safe = dims.SYMBOL.sub(lambda m: m[0] if m[0] == "ceil" else f"_{m[0]}", dim)
    return _evaluate(ast.parse(safe, mode="eval").body, lambda name: size(name[1:]))


def _evaluate(node: ast.expr, size: Callable[[str], int]) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return Fraction(node.value)
    if isinstance(node, ast.Name):
        return Fraction(size(node.id))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, size)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ceil" and len(node.args) == 1:
        return Fraction(math.ceil(_evaluate(node.args[0], size)))
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, size), _evaluate(node.right, size)
        operations: dict[type, Callable[[Fraction, Fraction], Fraction]] = {
            ast.Add: lambda p, q: p + q, ast.Sub: lambda p, q: p - q, ast.Mult: lambda p, q: p * q,
            ast.Div: lambda p, q: p / q}
        if type(node.op) in operations:
            return operations[type(node.op)](left, right)
    raise AssertionError(f"a dimension expression kinds/dims.py does not write: {ast.unparse(node)}")
