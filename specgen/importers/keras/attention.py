"""Keras' MultiHeadAttention as a spec multi_head_attention layer: self- and cross-attention, the mask input.

Keras calls it mha(query, value, key=None, attention_mask=None, use_causal_mask=False); a saved model's
config records the tensors positionally or by name (calls.py keeps the named ones, CALL_KWARGS). The spec
reads `input` (query = value = key), or `inputs: [query, value]` / `[query, value, key]`, and
`attention_mask`: `wiring` turns the call's tensors into those keys (convert.py places them). The weights
are Keras' own names and layouts (specgen/kinds/ops/attention.py), so the restore maps them by identity.
"""

from __future__ import annotations

from typing import Any

from specgen.importers.keras.args import Args
from specgen.importers.keras.base import Converter, Shapes, _init
from specgen.importers.keras.dag import CALL_KWARGS, KGraph, KLayer, Ref
from specgen.importers.keras.errors import layer_problem

ROLES = ("query", "value", "key")
READS = "_reads"  # the key a converter's result names its inputs' roles under; convert.py pops it


def roles(a: Args) -> list[str]:
    """The role of each tensor the layer was called on, in KLayer.inputs order."""
    layer = a.layer
    if any(not isinstance(arg, Ref) for arg in layer.args) or len(layer.args) > len(ROLES):
        raise layer_problem(layer.name, layer.cls, "called on constants or on more than 3 positional tensors "
                            "(expected query, value and an optional key)")
    found = list(ROLES[:len(layer.args)])
    found += [k for k in CALL_KWARGS[layer.cls] if isinstance(layer.kwargs.get(k), Ref)]
    if found.count("value") != 1 or len(set(found)) != len(found):
        raise layer_problem(layer.name, layer.cls, "called without a value tensor, or with one twice (expected "
                            "query, value and an optional key)")
    return found


def multi_head_attention(a: Args, shapes: Shapes) -> dict[str, Any]:
    for key, why in (("use_gate", "gated attention"), ("sliding_window", "a sliding-window mask"),
                     ("output_shape", "an output size other than the query's"),
                     ("flash_attention", "a flash-attention switch (specgen picks the ONNX node itself)"),
                     ("lora_rank", "LoRA adapters")):
        a.expect(key, None, False, why=f"no spec form for {why}")
    a.expect("attention_axes", None, [1], -2, [-2], why="attention over the time axis only")
    out: dict[str, Any] = {"op": "multi_head_attention", "num_heads": a.integer("num_heads"),
                           "key_dim": a.integer("key_dim")}
    if a.get("value_dim") not in (None, out["key_dim"]):
        out["value_dim"] = a.integer("value_dim")
    if (rate := a.number("dropout", 0.0)) != 0.0:
        out["dropout"] = rate
    if not a.flag("use_bias", True):
        out["use_bias"] = False
    if a.layer.kwargs.get("use_causal_mask", False) is True:
        out["causal"] = True
    _init(a, out, "kernel_initializer", "kernel_init")
    if (init := a.initializer("bias_initializer")) not in (None, "zeros"):
        out["bias_init"] = init
    return out | {READS: roles(a)}


def wiring(keys: dict[str, Any], ins: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The spec's input keys for the tensors `ins` (roles in keys[READS]) and the inputs in the node's order:
    query, value and key (left out where they repeat: self-attention, key = value), then the mask."""
    by_role = dict(zip(keys.pop(READS), ins, strict=True))
    query, value = by_role["query"], by_role["value"]
    key = by_role.get("key", value)
    sources = [query] if query == value == key else [query, value] + ([key] if key != value else [])
    found: dict[str, Any] = {"input": query} if len(sources) == 1 else {"inputs": list(sources)}
    if "attention_mask" in by_role:
        found["attention_mask"] = by_role["attention_mask"]
        sources.append(by_role["attention_mask"])
    return found, sources


CONVERTERS_ATTENTION: dict[str, Converter] = {"MultiHeadAttention": multi_head_attention}


def key_lengths(graph: KGraph) -> dict[str, str]:
    """Model inputs whose steps are an attention's key/value length, apart from its query's: input name ->
    the name of its time axis (`dim1_kv<j>`, the j-th such group). The importer names an open axis
    `dim<axis>` for every input (convert.py `_dims`), and onnxruntime holds every tensor of one dim_param
    to one size, so a query and a memory of different lengths under one name fail at run time.
    Inputs that meet in a layer of several inputs other than an attention (Add, Multiply, Concatenate, ...)
    share one name, and those that reach an attention's query (through any layers) keep the query's: a value
    that is also a part of the query (`mha(x + y, x)`) has the query's steps."""
    reach = _reaching(graph)
    groups = _Groups()
    for layer in graph.layers:
        if layer.cls not in CONVERTERS_ATTENTION and len(layer.inputs) > 1:
            groups.join({name for p in layer.inputs for name in reach.get(p, ())})
    queries: set[str] = set()
    memories: list[str] = []  # the roots of the value/key groups, in the order the attentions come
    for layer in graph.layers:
        by_role = _roles(layer)
        queries |= {groups.root(n) for n in reach.get(by_role.get("query", ""), ())}
        memories += [groups.root(n) for role in ("value", "key") for n in sorted(reach.get(by_role.get(role, ""), ()))]
    names: dict[str, str] = {}
    for root in dict.fromkeys(memories):
        if root not in queries:
            names[root] = f"dim1_kv{len(names) + 1}"
    return {i.name: names[groups.root(i.name)] for i in graph.inputs if groups.root(i.name) in names}


def _roles(layer: KLayer) -> dict[str, str]:
    """An attention's producer by role (query, value, key, attention_mask); {} for another layer or a call the
    converter refuses, naming why."""
    if layer.cls not in CONVERTERS_ATTENTION:
        return {}
    positional = [a for a in layer.args if isinstance(a, Ref)]
    named = [k for k in CALL_KWARGS[layer.cls] if isinstance(layer.kwargs.get(k), Ref)]
    called = [*ROLES[:len(positional)], *named]
    return dict(zip(called, layer.inputs, strict=True)) if len(called) == len(layer.inputs) else {}


def _reaching(graph: KGraph) -> dict[str, frozenset[str]]:
    """Per producer, the model inputs whose steps its output's steps come from: through every input of a layer,
    and only the query of an attention (its output has the query's steps). Passes until nothing changes (a
    layer may come before its producers in `graph.layers`)."""
    reach: dict[str, frozenset[str]] = {i.name: frozenset({i.name}) for i in graph.inputs}
    for _ in range(len(graph.layers) + 1):
        changed = False
        for layer in graph.layers:
            sources = [_roles(layer)["query"]] if _roles(layer).get("query") else layer.inputs
            found = frozenset(n for p in sources for n in reach.get(p, ()))
            if found != reach.get(layer.name, frozenset()):
                reach[layer.name], changed = found, True
        if not changed:
            break
    return reach


class _Groups:
    """Input names joined into groups (union-find): inputs whose steps must be one length."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def root(self, name: str) -> str:
        while (up := self.parent.get(name, name)) != name:
            name = up
        return name

    def join(self, names: set[str]) -> None:
        roots = sorted({self.root(n) for n in names})
        for other in roots[1:]:
            self.parent[other] = roots[0]
