"""`specgen report`'s FLOPs table: per layer, its parameters, forward and backward FLOPs and activation std."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from specgen import text
from specgen.ir.model import ModelIR, Node
from specgen.ir.scales import Scale, propagate, ratio_column, unmodelled_note
from specgen.kinds import dims
from specgen.kinds.ops import backward_flops
from specgen.report.formulas import Monomial, Poly, added, flops_polys, formula, scaled

NOTE = ("FLOPs are per example (batch 1); a multiply-add counts 2. The backward estimate is 2x the forward FLOPs "
        "for layers with trainable weights (input and weight gradients) and 1x otherwise. The activation std is "
        "each output's at initialization over the input's, for unit-variance inputs, as the model of "
        "docs/spec.md#lints estimates it: weights, inputs and units independent; the positions that pools, resizes "
        "and attention combine taken as equal, as in images (over n independent positions an average has 1/sqrt(n) "
        "of the std shown); a recurrent layer's input steps taken as independent (smooth ones give it up to 2x the "
        "std shown).")


WIDE = 40  # the widest formula shown in a cell


def flops_table(ir: ModelIR, layers: Sequence[Any] | None = None) -> str:
    """The table; with the spec's `layers` (LoadedSpec.layers), a spec with named dynamic dimensions gets exact
    formulas in them where a per-position figure would mislead (report/formulas.py)."""
    scales = propagate(ir)  # once: the column and its note read the same propagation
    std = ratio_column(scales)
    polys = flops_polys(ir, layers) if layers is not None and _declared(ir) else {}
    rank = {n: i for i, n in enumerate(dict.fromkeys(
        d for node in ir.nodes for s in (*node.input_shapes, node.shape) for d in s if isinstance(d, str)))}
    rows: list[tuple[str, ...]] = []
    forward: list[Poly] = []
    backward: list[Poly] = []
    long: list[str] = []
    total_p = 0
    for node in ir.nodes:
        # A shared layer's weights are counted once, under their owner; its FLOPs (and the weight
        # gradients of its call, which add to the owner's) count like any layer's.
        params = 0 if node.shares else sum(v.size for v in node.variables.values())
        factor = backward_flops(1, any("trainable" in v.collections for v in node.variables.values()))
        poly = polys.get(node.name, {(): node.flops} if node.flops else {})
        op = node.op + (f"+{node.activation}" if node.activation else "") + (f", shares {node.shares}" if node.shares else "")
        cells = _fit((_cell(poly, node, node.flops, rank), _cell(scaled(poly, factor), node, node.flops * factor, rank)),
                     node.name, long)
        rows.append((node.name, op, text.shape(node.shape), f"{params:,}", *cells, std[node.name]))
        total_p, forward, backward = total_p + params, [*forward, poly], [*backward, scaled(poly, factor)]
    rows.append(("total", "", "", f"{total_p:,}", *_fit((_total(forward, rank), _total(backward, rank)), "total", long),
                 ""))
    return text.table(("layer", "op", "output", "params", "forward FLOPs", "backward FLOPs (est.)",
                       "activation std (init)"), rows, right={3, 4, 5, 6}) + "\n" + "".join(f"{line}\n" for line in long) + \
        NOTE + _unmodelled(ir, scales) + _symbols_note(ir, bool(polys))


def _fit(cells: tuple[str, str], name: str, long: list[str]) -> tuple[str, str]:
    """Formulas of many terms or nested dimensions (a strided image network) go under the table, one line per row,
    so the columns stay readable."""
    if max(map(len, cells)) <= WIDE:
        return cells
    long.append(f"{name}: forward FLOPs {cells[0]}; backward (est.) {cells[1]}")
    return "below", "below"


def _cell(poly: Poly, node: Node, nominal: int, rank: dict[str, int]) -> str:
    """The per-position figure where it is one (a single term: the product of the output's named dimensions, or
    none), else the formula."""
    per_output: Monomial = tuple(sorted(Counter(d for d in node.shape if isinstance(d, str)).items()))
    if len(poly) <= 1 and all(m in ((), per_output) for m in poly):
        return f"{nominal:,}"
    return formula(poly, rank)


def _total(polys: list[Poly], rank: dict[str, int]) -> str:
    total = added(polys)
    return formula(total, rank) if any(total) else f"{total.get((), 0):,}"


def _unmodelled(ir: ModelIR, scales: dict[str, Scale]) -> str:
    """Why the column shows '-' where it does (ir/scales.py), for specs with such layers."""
    note = unmodelled_note(ir, scales)
    return " " + note if note else ""


def _declared(ir: ModelIR) -> list[str]:
    return list(dict.fromkeys(n for i in ir.inputs for d in i.shape if isinstance(d, str) for n in dims.names(d)))


def _symbols_note(ir: ModelIR, exact: bool) -> str:
    """How FLOPs count named dynamic dimensions (kinds/dims.py), for specs that declare some."""
    declared = _declared(ir)
    if not declared:
        return ""
    if not exact:  # a table made without the spec's layers (hand-made IRs): the op rules' counts as they are
        return (f" Named dynamic dimensions ({', '.join(declared)}) count as size 1 in these figures; a layer whose "
                "cost is not proportional to them (attention is quadratic in the length) is undercounted.")
    return (f" Named dynamic dimensions ({', '.join(declared)}): a plain figure on a row whose output has them is "
            "per position (multiply by the run-time sizes of the named dimensions in its output); a cost that "
            "grows otherwise (attention's scores with the square of the length, a layer that reduces one away) is "
            "a formula in them (a long one under the table), as is the total." + _served(ir, declared))


def _served(ir: ModelIR, declared: list[str]) -> str:
    """The smallest size of each named dimension that `valid` windows and indexed reads need, and the largest a
    positional_embedding takes (runtime/lengths `minima`, `bounds`): what `specgen export` records and infer/serve
    enforce, said here so that a spec's author sees it before a client is refused."""
    from specgen.runtime import lengths  # the op registry's shape rules; no TensorFlow

    needs = [f"{name} >= {low} (layer '{layer}', {op})" for name, (low, layer, op) in lengths.minima(ir).items()
             if name in declared and low > 1]
    caps = [f"{name} <= {bound[0]} ({lengths.cap_text(bound)})" for name, bound in lengths.bounds(ir).items()
            if name in declared]
    if not needs and not caps:
        return ""
    which = " or ".join(word for word, found in (("shorter", needs), ("longer", caps)) if found)
    return f" Served sizes: {', '.join(needs + caps)}; a {which} input is refused."
