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
is 1. The expressions (kinds/dims.py) are compared by value, not as strings, at sizes of OLD's names
that decide it: every remainder of the strides involved (`_agree`).

The served contract is more than the declared dims: what runtime/lengths.py's `stamp` writes into the export and
`specgen infer` / `serve` enforce. A named dim has a range of sizes the model runs at: `valid` windows shrink an
axis (a conv1d of kernel 3, `valid`, needs seq >= 3), an op that reads an index needs that many steps (a take of
index 4: seq >= 5), and a positional_embedding takes at most its max_length steps, of its symbol or of an
expression of it (`ceil(seq/3) <= 8`: seq <= 24). A raised minimum or a lowered maximum is a break even where every
declared dim is the same (`_ranges`); a bound over several names is said not to be compared (`_uncompared`). An
input read as ids (an embedding's, a gather's indices) takes ids in a range: a narrowed one breaks (`_ids`).
"""

from __future__ import annotations

import ast
import itertools
import math
import random
from collections.abc import Iterator
from fractions import Fraction

from specgen import text
from specgen.ir.exported import exported
from specgen.ir.model import ModelIR
from specgen.kinds import dims
from specgen.kinds.ops.nodes import Shape
from specgen.review.sections import Change, Section
from specgen.runtime import lengths, sample_sizes

Dim = int | str  # a served dimension: a fixed size or a dim_param (a name or an expression of names)
Signature = dict[str, tuple[str, tuple[Dim, ...]]]  # input or output name -> (dtype, served dims)
TRIALS = 4  # far sizes of OLD's names an output is also compared at, drawn with a fixed seed (a check, not the proof)
GRID_LIMIT = 100_000  # evaluations `_agree` makes at most: a one-name kinds/dims.py form up to a period of 25_000


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
    _ranges(section, (old, new), inputs)
    _uncompared(section, old, new)
    _ids(section, old, new, inputs)
    return section


# The sizes a named dim takes: the smallest and why (the layer that needs it), the largest (None: any) and why.
Span = tuple[int, str, int | None, str]


def spans(ir: ModelIR) -> dict[str, Span]:
    """Each named dim of the inputs -> its range as the served model enforces it (runtime/lengths.py)."""
    lows, highs = lengths.minima(ir), lengths.bounds(ir)
    found: dict[str, Span] = {}
    for symbol in dict.fromkeys(d for i in ir.inputs for d in dims.symbols(i.shape[1:])):
        low, layer, op = lows.get(symbol, (1, "", ""))
        bound = highs.get(symbol)
        found[symbol] = (low, f"layer '{layer}' ({op}) needs at least {low}" if low > 1 else "",
                         None if bound is None else bound[0], "" if bound is None else lengths.cap_text(bound))
    return found


def _ranges(section: Section, irs: tuple[ModelIR, ModelIR], inputs: tuple[Signature, Signature]) -> None:
    """A row per named dim of NEW whose range of sizes moved: a break where a size OLD served is now refused."""
    old, new = spans(irs[0]), spans(irs[1])
    seen: set[str] = set()
    for name in sorted(inputs[0].keys() & inputs[1].keys()):
        (_, a), (_, b) = inputs[0][name], inputs[1][name]
        for x, y in zip(a, b, strict=True) if len(a) == len(b) else ():
            if not isinstance(y, str) or y not in new or y in seen:
                continue
            seen.add(y)
            was: Span = (x, "", x, "") if isinstance(x, int) else old.get(x, (1, "", None, ""))
            why = _refused(y, was, new[y])
            if (was[0], was[2]) == (new[y][0], new[y][2]) or (isinstance(x, int) and not why):
                continue  # a fixed size made named and still served: the declared dims' row says so
            section.changes.append(Change("changed" if why else "compatible", f"input {name}", _span(x, was),
                                          _span(y, new[y])))
            section.breaks += [f"input '{name}': NEW {w}; OLD served {_span(x, was)}: clients that send {size} '{y}' fail"
                               for w, size in why]


def _refused(dim: str, was: Span, now: Span) -> list[tuple[str, str]]:
    """What NEW refuses of what OLD served (sizes below its smallest, or above its largest), and which sizes."""
    (low, _, high, _), (least, needs, most, caps) = was, now
    found = [(f"needs {dim} >= {least} ({needs})", "a shorter")] if least > low else []
    if most is not None and (high is None or most < high):
        found.append((f"takes {dim} <= {most} ({caps})", "a longer"))
    return found


def _uncompared(section: Section, old: ModelIR, new: ModelIR) -> None:
    """A row and a break per bound over several names (runtime/sample_sizes.py `uncompared`) that differs between
    OLD and NEW: neither side's range can be said, so the change is a break until shown otherwise."""
    def texts(ir: ModelIR) -> dict[str, str]:
        return {t.layer: f"{t.dim} <= {t.bound}" for t in sample_sizes.uncompared(ir)}

    before, after = texts(old), texts(new)
    for layer in sorted(before.keys() | after.keys()):
        if before.get(layer) != after.get(layer):
            section.changes.append(Change("not compared", f"layer {layer}", before.get(layer, ""), after.get(layer, "")))
            section.breaks.append(f"layer '{layer}': the bound {after.get(layer) or before[layer]} is over several "
                                  "names and is not compared: a break until shown otherwise")


def _ids(section: Section, old: ModelIR, new: ModelIR, inputs: tuple[Signature, Signature]) -> None:
    """A row per input read as ids whose range moved (runtime/lengths.py `id_ranges`, which infer and serve
    enforce): a break where an id OLD took is now refused; an input without a range takes any id."""
    before, after = lengths.id_ranges(old), lengths.id_ranges(new)
    for name in sorted((before.keys() | after.keys()) & inputs[0].keys() & inputs[1].keys()):
        was, now = before.get(name), after.get(name)
        if was is not None and now is not None and was[:2] == now[:2]:
            continue
        narrowed = now is not None and (was is None or now[0] > was[0] or now[1] < was[1])
        section.changes.append(Change("changed" if narrowed else "compatible", f"input {name}", _id_span(was),
                                      _id_span(now)))
        if narrowed and now is not None:
            section.breaks.append(f"input '{name}': NEW takes {_id_span(now)} (layer '{now[2]}' ({now[3]}) takes ids "
                                  f"below {now[1]}); OLD served {_id_span(was)}: clients that send an id {_outside(now)} fail")


def _outside(ids: tuple[int, int, str, str]) -> str:
    """The ids a range refuses: `of 2 or more` (every range starts at 0 today), `below 1 or of 2 or more`."""
    return f"below {ids[0]} or of {ids[1]} or more" if ids[0] else f"of {ids[1]} or more"


def _id_span(ids: tuple[int, int, str, str] | None) -> str:
    """`ids < 20`, `any ids` (no range checked)."""
    if ids is None:
        return "any ids"
    return f"ids < {ids[1]}" if ids[0] == 0 else f"{ids[0]} <= ids < {ids[1]}"


def _span(dim: Dim, span: Span) -> str:
    """`seq >= 3`, `3 <= seq <= 16`, `size 5` (a fixed size)."""
    low, _, high, _ = span
    if isinstance(dim, int):
        return f"size {dim}"
    return f"{dim} >= {low}" if high is None else f"{low} <= {dim} <= {high}"


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
    batch: Dim = dims.BATCH if ir.dynamic_batch else 1  # as onnx_plan.Lowering declares it
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
    """'' when some request OLD answered at `a` is answered at another shape (or dtype) by NEW, else None (or a
    reason where a dimension is beyond what `_agree` can decide in GRID_LIMIT evaluations)."""
    if a[0] != b[0] or len(a[1]) != len(b[1]):
        return ""
    for x, y in zip(a[1], b[1], strict=True):
        agree = _agree(x, y, stands)
        if agree is not True:
            return "" if agree is False else f"{x} and {y} could not be compared: a break until shown otherwise"
    return None


def _agree(old: Dim, new: Dim, stands: dict[str, set[Dim]]) -> bool | None:
    """Whether OLD's dimension `old` and NEW's `new`, NEW's names taken at what they stand for, are equal at every
    size of OLD's names (None: more than GRID_LIMIT evaluations would decide it).

    Decided exactly, not sampled. Each expression is a quasi-polynomial in each name (the others held at any
    sizes): on each residue class of the name modulo a period P it is a polynomial of degree at most D, where
    `_form` bounds P and D from how it is built (a ceil or floor of a division by k multiplies the period of what
    it divides by k). So is their difference, with the lcm of the periods and the larger degree. A polynomial of
    degree D that is 0 at D+1 points is 0, so the difference is 0 at every size iff it is 0 at the sizes
    1..P*(D+1) of each name: D+1 sizes in every residue class. With several names, the grid of those sizes
    decides it one name at a time (fix the others in the grid, the first is free; then each value of the first,
    and so on). Sizes at random far from it are added as a check on the bound, not as the proof."""
    meant = {n: sorted(stands.get(n, {n}), key=str)[0] for n in _names(new)}  # a tie (an input break) takes its first
    olds = sorted(set(_names(old)))
    news = sorted({m for m in meant.values() if isinstance(m, str)})
    trees = dims.expression(str(old)), dims.expression(str(new))
    (p, d, _), (p2, d2, _) = map(_form, trees)
    reach = math.lcm(p, p2) * (max(d, d2) + 1)

    def of_old(size: dict[str, int]) -> Fraction:
        return dims.value(trees[0], size.__getitem__)

    def of_new(size: dict[str, int]) -> Fraction:
        return dims.value(trees[1], lambda n: m if isinstance(m := meant[n], int) else size[m])

    def grid(names: list[str]) -> Iterator[dict[str, int]]:
        return (dict(zip(names, point, strict=True)) for point in itertools.product(range(1, reach + 1), repeat=len(names)))

    draw = random.Random(0)
    far = [{n: draw.randint(1_000, 1_000_000) for n in sorted({*olds, *news})} for _ in range(TRIALS)]
    if set(olds).isdisjoint(news):  # f(u) = g(w) for all u, w: both constant, at one value; the same grid, cheaper
        if reach ** len(olds) + reach ** len(news) > GRID_LIMIT:
            return None
        values = {*map(of_old, grid(olds)), *map(of_new, grid(news))}
        return len(values) == 1 and all(of_old(size) == of_new(size) for size in far)
    every = sorted({*olds, *news})
    if reach ** len(every) > GRID_LIMIT:
        return None
    return all(of_old(size) == of_new(size) for size in itertools.chain(grid(every), far))


def _names(dim: Dim) -> list[str]:
    return [] if isinstance(dim, int) else dims.names(dim)


def _form(node: ast.expr) -> tuple[int, int, int]:
    """(period, degree, denominator) bounds of an expression as a quasi-polynomial in each of its names: a period
    P and a degree D as `_agree` uses them, and a q with q * value an integer at every integer size."""
    if isinstance(node, ast.Constant):
        return 1, 0, 1
    if isinstance(node, ast.Name):
        return 1, 1, 1
    if isinstance(node, ast.UnaryOp):
        return _form(node.operand)
    if isinstance(node, ast.Call):  # ceil(E) or floor(E): E * q = M is integer-valued, and on a residue class of
        # the period p, M is an integer-valued polynomial in the class's index t, whose remainder modulo q repeats
        # every q * D! values of t (binomial basis: C(t, i) modulo q repeats every q * i!)
        p, d, q = _form(node.args[0])
        return p * q * math.factorial(d), d, 1
    assert isinstance(node, ast.BinOp)
    (p, d, q), (p2, d2, q2) = _form(node.left), _form(node.right)
    if isinstance(node.op, ast.Div):  # by a constant only (a stride): E / (u/v) = E * v / u
        if any(isinstance(n, ast.Name) for n in ast.walk(node.right)):
            raise AssertionError(f"a division by a name, which kinds/dims.py does not write: {ast.unparse(node)}")
        return p, d, q * abs(dims.value(node.right, lambda _: 0).numerator)
    if isinstance(node.op, ast.Mult):
        return math.lcm(p, p2), d + d2, q * q2
    return math.lcm(p, p2), max(d, d2), math.lcm(q, q2)
