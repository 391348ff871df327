"""Gradient reachability: every weight an optimizer claims must get a gradient from the loss.

A graph walk on the resolved model, backwards from the layers the loss terms read: a gradient
reaches a layer's input when the op passes gradients to that input position (`OpDef.gradient`)
and both tensors are floats (integer tensors carry none, in TensorFlow as in any autodiff). A
weight is reached when a layer that uses it (its owner, or a layer sharing it) is reached.
TensorFlow gives any other weight a None gradient and the optimizer update fails at the first
step ("None values not supported"), so `build_ir` reports it as an error, naming the weight,
its optimizer and the layer that blocks the gradient, if one does.

Pure Python, no TensorFlow: `specgen validate` runs this.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen.diagnostics import Diagnostic
from specgen.ir.collections import variable_list
from specgen.ir.model import ModelIR, Node
from specgen.kinds.ops import op_def
from specgen.kinds.ops.base import FLOAT
from specgen.spec.load import LoadedSpec


def loss_outputs(ir: ModelIR) -> tuple[str, ...]:
    """The model outputs whose gradients the loss terms take: the one place that knows the loss's shape.

    With several loss terms (`TrainingIR.terms`), every term's output; a term's labels, if read
    from a model output, are a constant (read under stop_gradient) and are not listed here.
    """
    terms = ir.training.terms if ir.training else ()
    return tuple(o for o in dict.fromkeys(t.output for t in terms if t.output) if o in ir.outputs)


def penalized(ir: ModelIR) -> set[str]:
    """Weights a regularizer term sums over: they get a gradient from the loss directly, whatever the graph."""
    return {p for t in (ir.training.terms if ir.training else ()) for p in t.paths}


@dataclass(frozen=True)
class Blocked:
    """A gradient stops at `layer`'s input `source`."""

    layer: Node  # the layer at which the gradient stops
    reason: str  # why, for the message


@dataclass(frozen=True)
class Walk:
    reached: frozenset[str]  # layers whose output gets a gradient from the loss
    stops: tuple[tuple[Node, str], ...]  # (reached layer, source) where it goes no further


def _dtypes(ir: ModelIR) -> dict[str, str]:
    return {i.name: i.value_dtype for i in ir.inputs} | {n.name: n.dtype for n in ir.nodes}


def walk(ir: ModelIR, outputs: tuple[str, ...]) -> Walk:
    """The layers a gradient from `outputs` reaches; nodes are in topological order, so readers come first."""
    dtypes = _dtypes(ir)
    reached = {ir.outputs[o] for o in outputs}
    stops = []
    for node in reversed(ir.nodes):
        if node.name not in reached:
            continue
        for position, source in enumerate(node.inputs):
            passes = op_def(node.op).passes_gradient(position) and node.dtype == FLOAT == dtypes[source]
            if passes:
                reached.add(source)
            else:
                stops.append((node, source))
    return Walk(frozenset(reached), tuple(stops))


def users(ir: ModelIR) -> dict[str, set[str]]:
    """Weight path -> the layers that use it (a shared weight: its owner and every layer sharing it)."""
    table: dict[str, set[str]] = {}
    for node in ir.nodes:
        for var in node.variables.values():
            table.setdefault(var.path, set()).add(node.name)
    return table


def unreached(ir: ModelIR) -> dict[str, list[str]]:
    """Optimizer name -> the weights it claims that no gradient from the loss reaches."""
    outputs = loss_outputs(ir)
    if not outputs:
        return {}
    reached, used_by, direct = walk(ir, outputs).reached, users(ir), penalized(ir)
    lost = {name: [p for p in paths if not used_by.get(p, set()) & reached and p not in direct]
            for name, paths in ir.optimizers.items()}
    return {name: paths for name, paths in lost.items() if paths}


def _closure(start: set[str], edges: dict[str, list[str]]) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += edges.get(name, [])
    return seen


def blocker(ir: ModelIR, layers: set[str], outputs: tuple[str, ...]) -> Blocked | None:
    """The first layer (in graph order) at which a gradient from `outputs` stops on its way to `layers`."""
    readers: dict[str, list[str]] = {}
    for node in ir.nodes:
        for source in node.inputs:
            readers.setdefault(source, []).append(node.name)
    below = _closure(layers, readers)  # `layers` and everything computed from them
    dtypes, by_name = _dtypes(ir), {n.name: n for n in ir.nodes}
    for node, source in sorted(walk(ir, outputs).stops, key=lambda s: s[0].index):
        if source not in below:
            continue
        if dtypes[source] == FLOAT and node.dtype == FLOAT:
            return Blocked(node, f"layer '{node.name}' ({node.op}) passes no gradient to its input '{source}'")
        # An integer tensor: name the layer that made it from a float one on the way from `layers`.
        for name in sorted(_closure({source}, {n: [s for s in by_name[n].inputs if s in below]
                                               for n in below if n in by_name}),
                           key=lambda n: by_name[n].index if n in by_name else -1):
            maker = by_name.get(name)
            if maker and maker.dtype != FLOAT and any(dtypes[s] == FLOAT for s in maker.inputs if s in below):
                return Blocked(maker, f"layer '{maker.name}' ({maker.op}) outputs {maker.dtype}, and integer "
                                      "tensors carry no gradient")
    return None


def _quoted(names: list[str]) -> str:
    return " and ".join(f"'{n}'" for n in names)


def reach_problems(loaded: LoadedSpec, ir: ModelIR) -> list[Diagnostic]:
    """One error per optimizer (and per blocking layer) that claims weights no gradient reaches."""
    outputs = loss_outputs(ir)
    used_by = users(ir)
    upstream = _closure({ir.outputs[o] for o in outputs}, {n.name: list(n.inputs) for n in ir.nodes})
    target = f"the loss output{'s' if len(outputs) > 1 else ''} {_quoted(list(outputs))}"
    problems = []
    for name, lost in unreached(ir).items():
        cut = [p for p in lost if used_by[p] & upstream]  # on a path to the loss, but blocked
        off = [p for p in lost if p not in cut]
        if off:
            problems.append(loaded.diagnostic(("optimizers", name, "variables"), _off_path(ir, name, off, outputs,
                                                                                          target)))
        by_blocker: dict[str, tuple[Blocked | None, list[str]]] = {}
        for path in cut:
            found = blocker(ir, used_by[path], outputs)
            by_blocker.setdefault(found.layer.name if found else "", (found, []))[1].append(path)
        for found, paths in by_blocker.values():
            problems.append(loaded.diagnostic(("optimizers", name, "variables"), _blocked(name, paths, found, target)))
    return problems


def _pronouns(paths: list[str]) -> tuple[str, str, str]:
    return ("does", "its", "it") if len(paths) == 1 else ("do", "their", "them")


def _off_path(ir: ModelIR, name: str, lost: list[str], outputs: tuple[str, ...], target: str) -> str:
    used_by = users(ir)
    mine = set().union(*(used_by[p] for p in lost))
    fed = [out for out, layer in ir.outputs.items() if out not in outputs
           and mine & _closure({layer}, {n.name: list(n.inputs) for n in ir.nodes})]
    where = (f"they feed only output {_quoted(fed)}, which the loss does not read" if fed
             else "their layers reach no output")
    fix = f"or make the loss read {_quoted(fed)} instead" if fed else "or remove the layers that reach no output"
    do, their, them = _pronouns(lost)
    return (f"optimizer '{name}' claims {variable_list(lost)}, which {do} not reach {target} ({where}): {their} "
            f"gradients would be None and training would stop at the first step. Freeze {them} (list {them} in "
            f"'frozen' instead of in this optimizer), {fix}")


def _blocked(name: str, lost: list[str], found: Blocked | None, target: str) -> str:
    do, their, them = _pronouns(lost)
    why = found.reason if found else "no path to it carries a gradient"
    fix = f"or change layer '{found.layer.name}'" if found else "or change the layers between"
    return (f"optimizer '{name}' claims {variable_list(lost)}, which {do} not get a gradient from {target}: "
            f"{why}; {their} gradients would be None and training would stop at the first step. Freeze {them} "
            f"(list {them} in 'frozen' instead of in this optimizer), {fix}")
