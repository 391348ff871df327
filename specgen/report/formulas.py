"""FLOPs as polynomials in the named dynamic dimensions, for `specgen report` of a spec that declares some.

The op rules count a named dimension as 1 (kinds/dims.py), which makes most layers' figures "per position"
of their output. That is not true of every layer: attention's scores grow with the product of the query and
key lengths (seq^2 for self-attention), and a layer that reduces a named dimension away (a global pool, a
recurrent layer's last state) grows with it although its output has none. So each layer's rule is run again
with each dimension expression (`seq`, `ceil(seq/2)`, ...) at several sizes (dims.sizes), and the counts are
interpolated exactly (integer coefficients, each dimension's degree at most 3, checked at points off the grid).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from specgen.ir import shares
from specgen.ir.model import ModelIR, Node, value_dtype
from specgen.kinds import dims, ops
from specgen.kinds.ops.base import EXTRA_OUTPUT

Monomial = tuple[tuple[str, int], ...]  # ((dimension expression, power), ...) sorted; () is the constant
Poly = dict[Monomial, int]


def _coefficients(values: Sequence[Fraction]) -> list[Fraction]:
    """c with sum(c[j] * x**j) == values[x - 1] for x = 1..len(values) (a small Vandermonde system, exactly)."""
    n = len(values)
    rows = [[Fraction(x ** j) for j in range(n)] + [values[x - 1]] for x in range(1, n + 1)]
    for col in range(n):
        pivot = rows[col][col]
        rows[col] = [v / pivot for v in rows[col]]
        for r in range(n):
            if r != col and rows[r][col]:
                factor = rows[r][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [rows[i][n] for i in range(n)]


def _fit(count: Callable[[Mapping[str, int]], int], names: Sequence[str], degree: int) -> Poly | None:
    """The polynomial of per-dimension degree <= `degree` through `count` on the grid 1..degree+1, or None when
    its coefficients are not integers or it misses `count` at two points off the grid."""
    points = range(1, degree + 2)
    grid: dict[tuple[int, ...], Fraction] = {
        at: Fraction(count(dict(zip(names, at, strict=True)))) for at in itertools.product(points, repeat=len(names))}
    # One axis at a time: values along it become coefficients of its powers (the grid is a tensor product).
    for axis in range(len(names)):
        done: dict[tuple[int, ...], Fraction] = {}
        for rest in {k[:axis] + k[axis + 1:] for k in grid}:
            line = [grid[(*rest[:axis], x, *rest[axis:])] for x in points]
            for power, c in enumerate(_coefficients(line)):
                done[(*rest[:axis], power, *rest[axis:])] = c
        grid = done
    if any(c.denominator != 1 for c in grid.values()):
        return None
    poly: Poly = {tuple(sorted((n, p) for n, p in zip(names, powers, strict=True) if p)): int(c)
                  for powers, c in grid.items() if c}
    for base in (7, 12):
        at = {n: base + 2 * i for i, n in enumerate(names)}
        if evaluate(poly, at) != count(at):
            return None
    return poly


def evaluate(poly: Poly, at: Mapping[str, int]) -> int:
    """The polynomial at the sizes `at` (dimension expression -> size)."""
    total = 0
    for monomial, c in poly.items():
        for name, power in monomial:
            c *= at[name] ** power
        total += c
    return total


def _node_poly(node: Node, config: Any, dtypes: list[str]) -> Poly | None:
    names = list(dict.fromkeys(d for s in (*node.input_shapes, node.shape) for d in s if isinstance(d, str)))

    def count(at: Mapping[str, int]) -> int:
        with dims.sizes(at):
            return ops.infer(config, list(node.input_shapes), dtypes).flops

    if not names:
        return {(): node.flops} if node.flops else {}
    return next((p for degree in (1, 2, 3) if (p := _fit(count, names, degree)) is not None), None)


def flops_polys(ir: ModelIR, layers: Sequence[Any]) -> dict[str, Poly]:
    """Layer name -> its forward FLOPs as a polynomial in the dimension expressions its shapes hold, for the
    layers whose rule could be rerun and fitted; `layers` are the spec's (LoadedSpec.layers, the IR's indices)."""
    dtypes = {i.name: value_dtype(i.dtype) for i in ir.inputs} | {n.name: n.dtype for n in ir.nodes}
    found: dict[str, Poly] = {}
    for node in ir.nodes:
        if node.op == EXTRA_OUTPUT:
            continue  # a layer's second output: its FLOPs are the layer's
        layer = layers[node.index]
        config = shares.effective(layer, next(x for x in layers if x.name == node.shares)) if node.shares else layer
        poly = _node_poly(node, config, [dtypes[s] for s in node.inputs])
        # At size 1 everywhere it must give the figure the IR holds, or it is not the same rule's count.
        if poly is not None and evaluate(poly, dict.fromkeys(_names(poly), 1)) == node.flops:
            found[node.name] = poly
    return found


def _names(poly: Poly) -> set[str]:
    return {n for m in poly for n, _ in m}


def scaled(poly: Poly, factor: int) -> Poly:
    return {m: c * factor for m, c in poly.items()}


def added(polys: Sequence[Poly]) -> Poly:
    total: Poly = {}
    for poly in polys:
        for m, c in poly.items():
            total[m] = total.get(m, 0) + c
    return {m: c for m, c in total.items() if c}


def _closes_at_end(text: str) -> bool:
    """Whether the parenthesis opened first closes at the end (`ceil(a/2)`, not `ceil(a/2)-ceil(b/2)`)."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and char == ")":
            return i == len(text) - 1
    return False


def _factor(name: str, power: int) -> str:
    # A bare name or one whole ceil(...) reads as one factor; `ceil(height/2)-2` or `2*width` gets parentheses.
    whole_ceil = name.startswith("ceil(") and name.endswith(")") and _closes_at_end(name)
    shown = name if dims.SYMBOL.fullmatch(name) or whole_ceil else f"({name})"
    return shown if power == 1 else f"{shown}^{power}"


def formula(poly: Poly, rank: Mapping[str, int] | None = None) -> str:
    """`10 + 594*seq + 42*seq^2`: the constant first, then by degree; names in `rank`'s order (first seen in the
    model), else alphabetical."""
    if not poly:
        return "0"
    order = rank or {}

    def key(name: str) -> tuple[int, str]:
        return order.get(name, len(order)), name

    def factors(m: Monomial) -> list[tuple[str, int]]:
        return sorted(m, key=lambda np: key(np[0]))

    terms = sorted(poly.items(), key=lambda mc: (sum(p for _, p in mc[0]), [key(n) for n, _ in factors(mc[0])]))
    return " + ".join("*".join([f"{c:,}", *(_factor(n, p) for n, p in factors(m))]) for m, c in terms)
