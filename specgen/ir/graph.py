"""The layer graph: input defaults, dangling references, cycles, topological order."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

from specgen.diagnostics import Diagnostic, did_you_mean
from specgen.spec.load import LoadedSpec
from specgen.spec.source_map import PathKey


def layer_inputs(layer: Any) -> tuple[list[str], str]:
    """The names a layer reads and the spec key they were written under."""
    fields = type(layer).model_fields  # not hasattr: pydantic raises inside it for every other op
    if "inputs" in fields and layer.inputs is not None:  # optional where the op also takes `input` (attention)
        return list(layer.inputs), "inputs"
    return ([layer.input] if layer.input else []), "input"


# Keys naming a further input an op reads after its `input`/`inputs` (in this order), e.g. attention's mask.
# A key may name one tensor or a list of them (a recurrent layer's initial_state).
SIDE_INPUTS = ("attention_mask", "initial_state")


def side_inputs(layer: Any) -> list[str]:
    """The side inputs a layer names (SIDE_INPUTS), which follow its other inputs in its node's inputs."""
    fields = type(layer).model_fields
    return [key for key in SIDE_INPUTS if key in fields and getattr(layer, key) is not None]


def _side_sources(layer: Any, i: int, keys: list[str]) -> tuple[list[str], list[tuple[str | int, ...]]]:
    """The names the side-input keys hold, in order, each with its spec location."""
    names: list[str] = []
    locs: list[tuple[str | int, ...]] = []
    for key in keys:
        value = getattr(layer, key)
        for j, name in enumerate(value if isinstance(value, list) else [value]):
            names.append(name)
            locs.append(("layers", i, key, j) if isinstance(value, list) else ("layers", i, key))
    return names, locs


def producer(source: str, layers: Mapping[str, object] | set[str]) -> str | None:
    """The layer whose output `source` is: itself, or `<layer>` of `<layer>/<output>`, an extra output
    (kinds/ops/base.py OpResult.extra_outputs; ir/resolve.py checks the output's name once shapes are known)."""
    if source in layers:
        return source
    layer = source.rpartition("/")[0]
    return layer if layer in layers else None


def _clash(loaded: LoadedSpec, later: int, earlier: int | None) -> PathKey:
    """Where a name used twice is reported: the later layer's, unless a `--set` renamed the earlier one onto it (the
    override is the mistake, not the later layer's line in the file)."""
    here: PathKey = ("layers", later, "name")
    if earlier is None:
        return here
    there: PathKey = ("layers", earlier, "name")
    return there if loaded.overridden(there) and not loaded.overridden(here) else here


def wire(loaded: LoadedSpec) -> tuple[dict[str, list[str]], list[Diagnostic]]:
    """Each layer's input names (defaults filled in), with every naming problem found."""
    spec, problems = loaded.spec, []
    edges: dict[str, list[str]] = {}
    inputs = set(spec.inputs)
    names = [layer.name for layer in spec.layers]
    known = set(names)  # not the list: a lookup per input made 10,000 layers cost 50 million comparisons
    first: dict[str, int] = {}
    for i, layer in enumerate(spec.layers):
        if layer.name in edges or layer.name in inputs:
            what = "an input" if layer.name in inputs else "another layer"
            problems.append(loaded.diagnostic(_clash(loaded, i, first.get(layer.name)),
                                              f"layer name '{layer.name}' is already used by {what}"))
            continue
        first[layer.name] = i
        sources, key = layer_inputs(layer)
        if not sources:
            if i > 0:
                sources = [spec.layers[i - 1].name]
            elif len(spec.inputs) == 1:
                sources = [next(iter(spec.inputs))]
            else:
                problems.append(loaded.diagnostic(("layers", i), (
                    f"the first layer '{layer.name}' must name its input; the spec has several inputs "
                    f"({', '.join(spec.inputs)})")))
        side, side_locs = _side_sources(layer, i, side_inputs(layer))
        locs = [("layers", i, key, j) if key == "inputs" else ("layers", i, key) for j in range(len(sources))]
        sources = [*sources, *side]
        for source, loc in zip(sources, [*locs, *side_locs], strict=True):
            if source not in inputs and source not in known and producer(source, known) is None:
                problems.append(loaded.diagnostic(loc, (
                    f"layer '{layer.name}' reads '{source}', which is neither a layer nor an input"
                    f"{did_you_mean(source, [*names, *inputs])}")))
            if source == layer.name:
                problems.append(loaded.diagnostic(("layers", i), f"layer '{layer.name}' reads its own output"))
        edges[layer.name] = sources
    return edges, problems


def topological_order(loaded: LoadedSpec, edges: dict[str, list[str]]) -> tuple[list[int], list[Diagnostic]]:
    """Layer indices so that every layer comes after its inputs; spec order breaks ties."""
    spec = loaded.spec
    index = {layer.name: i for i, layer in enumerate(spec.layers)}
    waiting = {name: {p for s in sources if (p := producer(s, index)) is not None} for name, sources in edges.items()}
    readers: dict[str, list[str]] = {}
    for name, sources in waiting.items():
        for source in sources:
            readers.setdefault(source, []).append(name)
    ready = [index[name] for name, sources in waiting.items() if not sources]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for reader in readers.get(spec.layers[i].name, []):
            waiting[reader].discard(spec.layers[i].name)
            if not waiting[reader]:
                heapq.heappush(ready, index[reader])
    stuck = {name for name, sources in waiting.items() if sources}
    if not stuck:
        return order, []
    cycle = _cycle(stuck, waiting)
    first = min(index[name] for name in cycle)
    return order, [loaded.diagnostic(("layers", first), f"the layers form a cycle: {' -> '.join(cycle)}")]


def _cycle(stuck: set[str], waiting: dict[str, set[str]]) -> list[str]:
    """One cycle among the layers that never became ready: follow inputs until one repeats."""
    path: list[str] = []
    name = min(stuck)
    while name not in path:
        path.append(name)
        name = min(s for s in waiting[name] if s in stuck)
    cycle = path[path.index(name):]
    return [*cycle, cycle[0]]
