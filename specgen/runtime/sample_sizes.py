"""The sizes a parity check gives each named dynamic dimension (kinds/dims.py) of a model.

One size cannot show a graph that is right at some sizes and wrong at others (a strided SAME window
pads by a different amount as the size moves through its stride), and a fixed size can be one the
model cannot run at: `valid` windows shrink an axis (a 7/2 stem, a 3/2 pool and a 3 conv need at least
19 positions), and a positional_embedding takes at most its max_length steps (the bound
runtime/lengths.py stamps into exported models). The shape rules already wrote both into the IR: every
derived dimension is an expression of its symbols (`ceil((h-6)/2)-2`) that must be at least 1, and a
positional_embedding's `steps` at most its `max_length`. Every expression is non-decreasing in its
symbols, so each symbol's smallest and largest sizes are found by bisection.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from dataclasses import dataclass

from specgen.errors import SpecgenError
from specgen.ir.model import ModelIR
from specgen.kinds import dims
from specgen.kinds.ops import op_def

PREFERRED = 11  # the first size where it fits: odd, as asymmetric SAME pads need; what checks always drew
MAX_SETS = 4  # size sets per check: each costs one more (small) run of both sides
CAP = 256  # no size above this is drawn unless the model needs it
SEARCH = 1 << 20  # the largest size the bisection considers


class NoSizeFits(SpecgenError):
    """A named dimension has no size the model runs at (its message is one line)."""


@dataclass(frozen=True)
class Constraint:
    dim: str  # an expression of symbols (kinds/dims.py)
    bound: int  # dim >= bound (lower) or dim <= bound (upper)
    upper: bool
    layer: str  # the layer whose shape or parameter set it

    def holds(self, sizes: Mapping[str, int]) -> bool:
        value = evaluate(self.dim, sizes)
        return value <= self.bound if self.upper else value >= self.bound


def evaluate(dim: str, sizes: Mapping[str, int]) -> int:
    """The size of a dimension expression once its symbols have sizes: `ceil((h-6)/2)` at h=19 is 7."""
    return math.ceil(dims.value(dims.expression(dim), sizes.__getitem__))


def period(dim: str) -> int:
    """The product of the divisors in an expression (`ceil(ceil(h/2)/3)`: 6): at multiples of it, every strided
    window on the way divides its input evenly, where a SAME window's pad total is smallest."""
    divisors = [n.right.value for n in ast.walk(dims.expression(dim))
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and isinstance(n.right, ast.Constant)]
    return math.prod(int(d) for d in divisors)


def constraints(ir: ModelIR) -> list[Constraint]:
    """Every derived dimension is at least 1; an axis an op reads at an index at least its OpDef.needs_sizes (take's
    index + 1); a bounded time axis (OpDef.bounds_steps) at most its max_length."""
    found = []
    for node in ir.nodes:
        for dim in dict.fromkeys(d for d in node.shape if isinstance(d, str) and not dims.SYMBOL.fullmatch(d)):
            found.append(Constraint(dim, 1, False, node.name))  # every derived dimension is some layer's output
        found += [Constraint(dim, least, False, node.name) for dim, least in op_def(node.op).needs_sizes(node)
                  if least > 1]
        steps = node.params.get("steps") if op_def(node.op).bounds_steps else None
        if isinstance(steps, str):
            found.append(Constraint(steps, node.params["max_length"], True, node.name))
    return found


def symbols(ir: ModelIR) -> list[str]:
    """The named dimensions of the model's inputs, in order."""
    return list(dict.fromkeys(d for i in ir.inputs for d in dims.symbols(i.shape[1:])))


def _smallest(test: Constraint) -> int:
    """The smallest size meeting a lower bound (every symbol of the expression at it; SEARCH + 1: none)."""
    low, high = 1, SEARCH + 1
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if test.holds(_all(test.dim, middle)) else (middle + 1, high)
    return low


def _largest(test: Constraint) -> int:
    """The largest size meeting an upper bound (0: none)."""
    low, high = 0, SEARCH
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if test.holds(_all(test.dim, middle)) else (low, middle - 1)
    return low


def _all(dim: str, size: int) -> dict[str, int]:
    return {name: size for name in dims.names(dim)}


@dataclass(frozen=True)
class Range:
    symbol: str
    smallest: int
    largest: int
    period: int
    lower_layer: str  # the layer that needs the smallest size ("" where 1 fits)
    upper_layer: str  # the layer that bounds the largest ("" where unbounded)


def _size(bound: tuple[int, str]) -> int:
    return bound[0]


def ranges(ir: ModelIR) -> list[Range]:
    """Each input symbol's range of sizes, and the period of its strided windows."""
    tests = constraints(ir)
    found = []
    for symbol in symbols(ir):
        mine = [t for t in tests if symbol in dims.names(t.dim)]
        lows = [(_smallest(t), t.layer) for t in mine if not t.upper] or [(1, "")]
        highs = [(_largest(t), t.layer) for t in mine if t.upper] or [(SEARCH, "")]
        (low, lower), (high, upper) = max(lows, key=_size), min(highs, key=_size)  # the first layer of a tie
        found.append(Range(symbol, low, high, max([period(t.dim) for t in mine] + [1]), lower, upper))
    return found


def monotone(dim: str) -> bool:
    """Whether an expression never falls as its symbols grow (kinds/dims.py writes only such: offsets, strided
    windows, scaling); a bound is turned into its symbol's by bisection only where this holds."""
    return _trend(dims.expression(dim)) in (0, 1)


def _trend(node: ast.expr) -> int | None:
    """1: non-decreasing in every name, -1: non-increasing, 0: constant, None: neither (or not known)."""
    if isinstance(node, ast.Constant | ast.Name):
        return 0 if isinstance(node, ast.Constant) else 1
    if isinstance(node, ast.Call):  # ceil and floor keep the order
        return _trend(node.args[0])
    if isinstance(node, ast.UnaryOp):
        inner = _trend(node.operand)
        return None if inner is None else -inner if isinstance(node.op, ast.USub) else inner
    assert isinstance(node, ast.BinOp)
    left, right = _trend(node.left), _trend(node.right)
    if left is None or right is None:
        return None
    if isinstance(node.op, ast.Add | ast.Sub):
        right = -right if isinstance(node.op, ast.Sub) else right
        return left or right if 0 in (left, right) or left == right else None
    if isinstance(node.op, ast.Mult | ast.Div) and 0 in (left, right):  # by a constant: its sign decides
        constant = dims.value(node.right if right == 0 else node.left, lambda _: 0)
        return (left or right) * (1 if constant > 0 else -1 if constant < 0 else 0)
    return None


def upper_bounds(ir: ModelIR) -> list[tuple[str, int, Constraint]]:
    """Each bound on a time axis (OpDef.bounds_steps) over one symbol, turned into a bound on that symbol: (symbol,
    largest size, the bound). `ceil(seq/3) <= 8` is `seq <= 24`, `seq-2 <= 8` is `seq <= 10`: every expression is
    non-decreasing in its symbol (`monotone`), so the largest size where it holds is found by bisection."""
    return [(dims.names(test.dim)[0], _largest(test), test) for test in constraints(ir)
            if test.upper and len(dims.names(test.dim)) == 1 and monotone(test.dim)]


def uncompared(ir: ModelIR) -> list[Constraint]:
    """The bounds `upper_bounds` cannot turn into one symbol's (over several names, or not monotone): no export
    records them and `specgen diff` says it does not compare them."""
    return [t for t in constraints(ir) if t.upper and not (len(dims.names(t.dim)) == 1 and monotone(t.dim))]


def lower_bounds(ir: ModelIR) -> dict[str, tuple[int, str]]:
    """Each input symbol's smallest size above 1 and the first layer that needs it, from the lower bounds on that
    symbol alone (runtime/lengths.py stamps them into exports). A bound on an expression of several symbols
    (`t+s`) limits none of them alone: left out, so the graph itself is then the only check."""
    found: dict[str, tuple[int, str]] = {}
    for test in constraints(ir):
        names = dims.names(test.dim)
        if test.upper or len(names) != 1:
            continue
        smallest = _smallest(test)
        if smallest > found.get(names[0], (1, ""))[0]:
            found[names[0]] = (smallest, test.layer)
    return {symbol: found[symbol] for symbol in symbols(ir) if symbol in found}


def _describe(r: Range, ir: ModelIR) -> str:
    need = f"layer '{r.lower_layer}' ({ir.node(r.lower_layer).op}) needs at least {r.smallest}" if r.lower_layer else ""
    cap = f"layer '{r.upper_layer}' ({ir.node(r.upper_layer).op}) takes at most {r.largest}"
    return (f"{ir.source}: the named dimension '{r.symbol}' has no size this model runs at: {need}"
            f"{' and ' if need else ''}{cap}")


def candidates(r: Range) -> list[int]:
    """Sizes worth a run, best first: PREFERRED (or the nearest that fits), a multiple of the period and one
    above it (where SAME windows pad least and most asymmetrically), and the smallest size."""
    first = min(max(PREFERRED, r.smallest), r.largest)
    found = [first]
    if r.period > 1:
        multiple = r.period * max(1, -(-r.smallest // r.period))
        found += [multiple, multiple + 1]
    found.append(r.smallest)
    fits = [n for n in found if r.smallest <= n <= r.largest and (n <= CAP or n == first)]
    return list(dict.fromkeys(fits))[:MAX_SETS]


def size_sets(ir: ModelIR) -> list[dict[str, int]]:
    """Up to MAX_SETS assignments of sizes to the model's named dimensions, the main one first ([{}] without any).
    Raises NoSizeFits when a dimension has none."""
    found = ranges(ir)
    for r in found:
        if r.smallest > r.largest:
            raise NoSizeFits(_describe(r, ir))
    lists = [candidates(r) for r in found]
    count = max((len(c) for c in lists), default=1)
    sets = [{r.symbol: c[i] if i < len(c) else c[0] for r, c in zip(found, lists, strict=True)} for i in range(count)]
    tests = constraints(ir)  # an expression of two symbols can still refuse a set: drop it, keep the main one
    return [s for i, s in enumerate(sets) if i == 0 or all(t.holds(s) for t in tests)]

