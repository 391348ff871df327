"""Layers renamed or moved between two specs: the same op, the same variables, the same place in the graph.

A layer of OLD missing from NEW and a layer of NEW missing from OLD are a rename when their op and their variables
(name within the layer, shape, dtype) are equal. When several fit, the place in the graph decides: the layer whose
inputs are the other's inputs (read through the renames found so far) wins. Where two candidates still fit
equally, both are reported and none is guessed: `Renames.ambiguous`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specgen.ir.model import ModelIR
from specgen.kinds.ops.nodes import Node


@dataclass
class Renames:
    layers: dict[str, str] = field(default_factory=dict)  # old layer -> new layer
    ambiguous: dict[str, list[str]] = field(default_factory=dict)  # old layer -> the new layers that fit equally

    def variable(self, old_path: str, old: ModelIR) -> str | None:
        """The new path of an old variable of a renamed layer, else None: its weights (`fc/kernel` ->
        `head/fc/kernel`) and the training state named after them (`ema/fc/kernel`, an optimizer's slots)."""
        for layer, new in self.layers.items():
            for owned in (v.path for v in old.node(layer).variables.values() if v.path.startswith(layer + "/")):
                moved = new + owned[len(layer):]
                if old_path == owned:
                    return moved
                if old_path.endswith("/" + owned):
                    return old_path[:-len(owned)] + moved
        return None


def _signature(node: Node) -> tuple[object, ...]:
    if node.shares is not None:  # a layer that reuses another's weights owns none: compared by op alone
        return (node.op, "shares")
    return (node.op, tuple(sorted((k, v.shape, v.dtype) for k, v in node.variables.items())))


def find_renames(old: ModelIR, new: ModelIR) -> Renames:
    old_names, new_names = {n.name for n in old.nodes}, {n.name for n in new.nodes}
    gone = [n for n in old.nodes if n.name not in new_names]
    came = [n for n in new.nodes if n.name not in old_names]
    result = Renames()
    taken: set[str] = set()
    for _ in range(len(gone) + 1):  # each pass can settle a layer whose input was renamed in the pass before
        settled = False
        for node in gone:
            if node.name in result.layers:
                continue
            fits = [c for c in came if c.name not in taken and _signature(c) == _signature(node)]
            placed = [c for c in fits if tuple(c.inputs) == tuple(result.layers.get(i, i) for i in node.inputs)]
            pick = placed if len(fits) > 1 else fits
            if len(pick) == 1 and _unique_for(pick[0], node, gone, result):
                result.layers[node.name] = pick[0].name
                taken.add(pick[0].name)
                result.ambiguous.pop(node.name, None)
                settled = True
            elif len(fits) > 1:
                result.ambiguous[node.name] = sorted(c.name for c in (placed or fits))
        if not settled:
            break
    return result


def _unique_for(candidate: Node, node: Node, gone: list[Node], found: Renames) -> bool:
    """No other removed layer fits `candidate` as well as `node` does (else the pair is a guess)."""
    rivals = [g for g in gone if g.name != node.name and g.name not in found.layers
              and _signature(g) == _signature(candidate)]
    if not rivals:
        return True
    mapped = tuple(found.layers.get(i, i) for i in node.inputs)
    return mapped == tuple(candidate.inputs) and all(tuple(found.layers.get(i, i) for i in g.inputs) != tuple(candidate.inputs)
                                                for g in rivals)
