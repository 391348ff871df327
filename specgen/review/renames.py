"""Layers renamed or moved between two specs: the same op, the same variables, the same place in the graph.

A layer of OLD missing from NEW and a layer of NEW missing from OLD are a rename when their op and their variables
(name within the layer, shape, dtype) are equal. When several fit, the place in the graph decides: the layer whose
inputs are the other's inputs (read through the renames found so far) wins. Where two candidates still fit
equally, both are reported and none is guessed: `Renames.ambiguous`.

Names that stay can still move: two same-shaped layers that swap names (`a` <-> `b`), or a chain that shifts by
one, keep every name, yet a checkpoint restored by name puts each layer's weights into the other. So each layer of
OLD is also placed in NEW from the inputs forward (the same op and variables, reading the places of its own
inputs), and where that explains NEW with fewer misfits (layers rewired, reshaped, unmatched; outputs naming
another layer) than the names do, the place wins: `_by_place`. Unless the place needs settings to change that the
names keep (a relu layer moved with `before:` past a tanh one: each name keeps its activation, the places would
swap them): then the layers moved, each with its own weights, and the names stand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specgen.ir.model import ModelIR
from specgen.kinds.ops import EXTRA_OUTPUT
from specgen.kinds.ops.nodes import Node

Place = tuple[object, ...]


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

    def candidates(self, new_path: str, old: ModelIR) -> list[str]:
        """OLD's variables that `new_path` may be under an ambiguous rename (`p/kernel`: `a/kernel`, `b/kernel` where
        `a` and `b` both fit `p`), none guessed: the variable existed in OLD, so an initializer loses its weights."""
        found = []
        for layer, fits in sorted(self.ambiguous.items()):
            for new in fits:
                owned = layer + new_path[len(new):]
                if new_path.startswith(new + "/") and any(v.path == owned for v in old.node(layer).variables.values()):
                    found.append(owned)
        return found


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
    _by_place(old, new, result)
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


def _by_place(old: ModelIR, new: ModelIR, found: Renames) -> None:
    """Re-pair layers by their place in the graph where that fits NEW better than their names do (swaps, shifts).

    Group by group (the names one re-pairing touches), so an unrelated change elsewhere cannot veto a swap; a group
    is taken only when it pairs every layer it names on both sides, so no name ends up both kept and moved."""
    new_names = {n.name for n in new.nodes}
    current = {n.name: found.layers.get(n.name, n.name) for n in old.nodes
               if n.name in found.layers or n.name in new_names}
    placed = _placed(old, new, current)
    for group in _groups(old, current, placed):
        trial = current | {n.name: placed[n.name] for n in old.nodes if n.name in group and n.name in placed}
        olds_paired = all(n.name in placed for n in old.nodes if n.name in group)
        news_paired = {n.name for n in new.nodes if n.name in group} <= set(trial.values())
        if (olds_paired and news_paired and _misfits(old, new, trial) < _misfits(old, new, current)
                and _settings_changed(old, new, trial) <= _settings_changed(old, new, current)):
            current = trial
    found.layers = {a: b for a, b in current.items() if a != b}
    for layer in found.layers:
        found.ambiguous.pop(layer, None)


def _place(node: Node, inputs: tuple[str, ...]) -> Place:
    # An extra output (an LSTM's state_h) is told from its siblings by which output it is, not by its name.
    extra = node.params.get("output") if node.op == EXTRA_OUTPUT else None
    return (_signature(node), extra, inputs)


def _placed(old: ModelIR, new: ModelIR, by_name: dict[str, str]) -> dict[str, str]:
    """OLD layer -> the NEW layer at its place: the one layer of its op and variables that reads the places of its
    inputs (its own name where several do). Nodes are in graph order, so inputs are placed first."""
    spots: dict[Place, list[str]] = {}
    for n in new.nodes:
        spots.setdefault(_place(n, n.inputs), []).append(n.name)
    spec_inputs = {i.name for i in old.inputs}
    placed: dict[str, str] = {}
    taken: set[str] = set()
    for node in old.nodes:
        inputs = tuple(i if i in spec_inputs else placed.get(i, "") for i in node.inputs)
        if "" in inputs:
            continue  # an input has no place in NEW: neither has this layer
        fits = [c for c in spots.get(_place(node, inputs), []) if c not in taken]
        pick = by_name.get(node.name) if by_name.get(node.name) in fits else fits[0] if len(fits) == 1 else None
        if pick is not None:
            placed[node.name] = pick
            taken.add(pick)
    return placed


def _groups(old: ModelIR, current: dict[str, str], placed: dict[str, str]) -> list[set[str]]:
    """The names each re-pairing touches, joined: a layer, its place, what each is paired with now, and the layers
    that read it. The readers are the evidence: names that swap move their readers' inputs too (`cat: [b, a]`),
    inputs that swap leave them as they were (`cat: [a, b]`), and a group is taken only when its readers are placed
    as well (_by_place)."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    def join(a: str, b: str) -> None:
        parent[root(a)] = root(b)

    for a, b in current.items():
        if a != b:
            join(a, b)
    moved = [n.name for n in old.nodes if n.name in placed and placed[n.name] != current.get(n.name)]
    readers: dict[str, list[str]] = {}
    for n in old.nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n.name)
    for name in moved:
        join(name, placed[name])
        for reader in readers.get(name, []):
            join(name, reader)
    groups: dict[str, set[str]] = {}
    for name in parent:
        groups.setdefault(root(name), set()).add(name)
    return [groups[r] for r in dict.fromkeys(root(name) for name in moved)]  # in OLD's layer order


def _misfits(old: ModelIR, new: ModelIR, pairs: dict[str, str]) -> int:
    """What NEW does not explain of OLD under `pairs` (OLD layer -> NEW layer): layers unpaired on either side, of
    another op or variables, or reading other layers; outputs that name another layer."""
    nodes = {n.name: n for n in new.nodes}
    count = len(nodes) - len(set(pairs.values()))
    for node in old.nodes:
        to = nodes.get(pairs.get(node.name, ""))
        if to is None:
            count += 1
            continue
        count += (_signature(node) != _signature(to)) + (tuple(pairs.get(i, i) for i in node.inputs) != to.inputs)
    return count + sum(pairs.get(layer, layer) != new.outputs.get(name) for name, layer in old.outputs.items())


def _settings_changed(old: ModelIR, new: ModelIR, pairs: dict[str, str]) -> int:
    """Pairs (OLD layer -> NEW layer) whose activation or op settings differ: a pairing that needs more of them
    than the names do explains NEW by changing layers, not by moving them."""
    nodes = {n.name: n for n in new.nodes}
    return sum((node.activation, node.params) != (to.activation, to.params) for node in old.nodes
               if (to := nodes.get(pairs.get(node.name, ""))) is not None)
