"""A variant's graph as the ONNX spec requires it, before it is written: nodes in topological order, checked.

onnxruntime's float16 converter appends the Casts it inserts (at the graph inputs, around each node kept in
float32) at the END of the node list. onnxruntime sorts a graph when it loads it, so every gate passes on such a
file, but the spec requires topological order: `onnx.checker` refuses it, `onnx.reference` cannot run it, and a
tool walking `graph.node` in order mis-reads it. So every variant, whatever made it (fp16, int8, a precision
added later), is sorted here and must pass `onnx.checker.check_model(full_check=True)` (strict shape inference
too), as the float32 export does, before `specgen export` writes it: one that does not is a refusal.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

import onnx

from specgen.runtime.precision.base import PrecisionRefusal


def _used(node: onnx.NodeProto) -> Iterator[str]:
    """The names a node reads: its inputs, and every name its subgraphs (If, Loop, Scan bodies) read, since a
    body may read the outer graph's tensors (over-counting a body's own names is harmless: none is written here)."""
    yield from node.input
    for attribute in node.attribute:
        for graph in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
            for inner in graph.node:
                yield from _used(inner)


def topological(nodes: Sequence[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """`nodes` ordered so that each comes after the nodes writing its inputs. Stable: a sorted list comes back
    as it is (the int8 quantizer's graphs keep their bytes), and otherwise ties keep the written order.

    A name no node of the list writes (a graph input, an initializer, an outer graph's tensor, "" for an omitted
    input) is there from the start. Nodes in a cycle stay at the end as written: the checker then says why."""
    writer: dict[str, int] = {}
    for k, node in enumerate(nodes):
        for name in node.output:
            writer.setdefault(name, k)
    readers: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for k, node in enumerate(nodes):
        for source in {writer[name] for name in _used(node) if name in writer} - {k}:
            readers[source].append(k)
            waiting[k] += 1
    ready = [k for k, count in enumerate(waiting) if count == 0]  # a heap: the earliest written node first
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for reader in readers[k]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    placed = set(order)
    return [nodes[k] for k in order] + [node for k, node in enumerate(nodes) if k not in placed]


def sort_graph(graph: onnx.GraphProto) -> None:
    """`graph`'s nodes, and its subgraphs' (bodies get the converter's Casts too), in topological order, in place."""
    for node in graph.node:
        for attribute in node.attribute:
            for inner in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                sort_graph(inner)
    ordered = [onnx.NodeProto.FromString(n.SerializeToString()) for n in topological(graph.node)]
    del graph.node[:]
    graph.node.extend(ordered)


def checked_variant(model_bytes: bytes, precision: str) -> bytes:
    """The variant's bytes with every graph sorted, after `onnx.checker.check_model(full_check=True)` passed on it;
    PrecisionRefusal (nothing is written) naming what the checker found otherwise."""
    model = onnx.load_from_string(model_bytes)
    sort_graph(model.graph)
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PrecisionRefusal(f"{precision}: the variant is not a valid ONNX model (onnx.checker: {first})") from None
    return model.SerializeToString(deterministic=True)
