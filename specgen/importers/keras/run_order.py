"""The order in which Keras 3 runs the layer calls of a model, so that the import writes the spec's layers in it.

specgen runs a spec's layers in spec order (docs/spec.md, "Shared layers"), and a call of a stateful shared
layer (a `batch_norm`'s moving statistics, updated once per call in training) leaves another result when its
calls run in another order. Keras' `Functional` does not run the calls in the order the config lists them:
`Function._run_through_graph` (keras/src/ops/function.py) runs `nodes_by_depth` from the deepest depth down,
each depth's nodes in the order `map_graph` first met them. This is a port of that, on the config's nodes:

- `_build_map`: a depth-first walk from each output (in `tree.flatten` order: a dict's keys sorted) through
  each node's input tensors (`node.arguments.keras_tensors`: `tree.flatten((args, kwargs))`, so the positional
  tensors first, then the named ones by sorted name), listing every node after its inputs (post-order).
- `map_graph`: that list backwards; a node's depth is 0 unless a reader set it, raised to the highest depth
  its layer had so far (the calls of one shared layer: `operations_depths`), and each of its parent nodes gets
  at least its depth + 1; a node is first met (`nodes_depths`' insertion order) when a reader sets its depth.

So when a shared layer reads two calls of another shared layer, Keras runs the second call first: the later
call is met first, going backwards, and the earlier one is lifted to its depth. A nested model's call is one
node there, which runs the nested model's own calls in its own order; a Sequential runs its layers in list
order (a chain: the same rule gives it). Mask layers (Keras 3's `NotEqual`, `LogicalOr`) are nodes, as in
Keras, though the import leaves them out of the spec. Nothing here imports Keras.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunNode:
    key: str  # `<scope><layer>:<node>`, the start of its output tensors' keys (dag.tensor_key)
    op: str  # `<scope><layer>`: every call of one layer shares a depth floor (map_graph's operations_depths)
    reads: list[str]  # its input tensors' keys, in Keras' order (node.arguments.keras_tensors)
    runs: str | None  # the flat layer it makes (KLayer.name), the scope of a nested model's layers, or None
    nested: bool = False  # `runs` is a nested model's scope


@dataclass
class ModelRun:
    nodes: dict[str, RunNode] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)  # tensor keys in tree.flatten order


def keras_tensors(value: Any) -> list[list[Any]]:
    """The `[layer, node, tensor]` of each tensor reference in a Keras 3 call's arguments, in `tree.flatten` order:
    lists in order, a serialized tuple's items, a plain dict's values by sorted key (optree's order)."""
    found: list[list[Any]] = []
    stack = [value]
    while stack:  # depth-first, left to right: items are pushed reversed
        item = stack.pop()
        if isinstance(item, list):
            stack += reversed(item)
        elif isinstance(item, dict):
            kind = item.get("class_name")
            if kind == "__keras_tensor__":
                history = (item.get("config") or {}).get("keras_history")
                if isinstance(history, list) and len(history) == 3:
                    found.append(history)
            elif kind == "__tuple__":
                stack.append((item.get("config") or {}).get("value"))
            elif kind is None:
                stack += [item[k] for k in sorted(item, key=str, reverse=True)]
    return found


def _parents(model: ModelRun, node: RunNode) -> list[RunNode]:
    """The nodes whose outputs `node` reads, in its input order (repeats kept, as Keras' parent_nodes); a tensor
    made outside the model (an input, or a nested model's bound tensor) has none."""
    found = (model.nodes.get(key.rpartition(":")[0]) for key in node.reads)
    return [parent for parent in found if parent is not None]


def _post_order(model: ModelRun) -> list[RunNode]:
    """`_build_map`: each node after the nodes it reads, walking from each output; with a stack, not recursion
    (a chain of 10,000 layers)."""
    done: set[str] = set()
    order: list[RunNode] = []
    for output in model.outputs:
        start = model.nodes.get(output.rpartition(":")[0])
        if start is None or start.key in done:
            continue
        stack = [(start, iter(_parents(model, start)))]
        done.add(start.key)  # met: a cycle cannot loop (the import refuses a cycle when it orders the layers)
        while stack:
            node, parents = stack[-1]
            parent = next((p for p in parents if p.key not in done), None)
            if parent is None:
                stack.pop()
                order.append(node)
            else:
                done.add(parent.key)
                stack.append((parent, iter(_parents(model, parent))))
    return order


def _run(model: ModelRun) -> list[RunNode]:
    """`map_graph`'s depths, then `_run_through_graph`'s order: deepest first, each depth in first-met order."""
    depths: dict[str, int] = {}  # node key -> depth, in the order first met
    floors: dict[str, int] = {}  # op -> the highest depth of its calls so far
    nodes: dict[str, RunNode] = {}
    for node in reversed(_post_order(model)):
        depth = max(depths.setdefault(node.key, 0), floors.get(node.op, 0))
        floors[node.op] = depths[node.key] = depth
        nodes[node.key] = node
        for parent in _parents(model, node):
            depths[parent.key] = max(depth + 1, depths.get(parent.key, 0))
    by_depth: dict[int, list[str]] = {}
    for key, depth in depths.items():
        by_depth.setdefault(depth, []).append(key)
    return [nodes[key] for depth in sorted(by_depth, reverse=True) for key in by_depth[depth]]


def run_order(models: dict[str, ModelRun]) -> list[str]:
    """The flat layers (KLayer.name) in the order Keras runs them: the top model's (scope "") calls, each nested
    model's call replaced by its own calls in its order."""
    order: list[str] = []
    stack = [iter(_run(models[""]))] if "" in models else []
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
        elif node.nested and node.runs in models:
            stack.append(iter(_run(models[node.runs])))
        elif node.runs is not None and not node.nested:
            order.append(node.runs)
    return order
