"""Valid-looking specs drawn from the JSON Schema (tests/test_validate_implies_build.py).

Values come from the schema that `specgen schema` writes from the pydantic models, so a new op, key
or section is drawn as soon as it exists, with no table here to keep up to date. Numbers are drawn
mostly at their edges: the bounds themselves, the ends of float32 (3.4e38, the smallest normal and
subnormal), the int32 sizes, 0 and 1, since those are where validation and rendering disagreed.
Names are drawn from a small pool, so that references (labels, outputs, collections) often resolve.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from specgen.fields.base import FLOAT32_MAX, IDENT, LAYER, MAX_INT

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "specgen.schema.json").read_text())
DEFS = SCHEMA["$defs"]
FLOAT32_TINY, FLOAT32_SUBNORMAL = 1.1754943508222875e-38, 1.401298464324817e-45  # numpy.finfo(float32)
FLOATS = [0.0, 1.0, -1.0, 0.5, 1e-3, 0.99999994, 1.0000001, 2.0, 10.0, 1e6, -1e6, FLOAT32_MAX, -FLOAT32_MAX,
          3e38, FLOAT32_TINY, -FLOAT32_TINY, FLOAT32_SUBNORMAL, 1e-40]
BEYOND = [1e39, -1e39, 1e300]  # past float32: drawn only where the schema has no bound (a field that escaped it)
INTS = [0, 1, 2, 3, 4, 7, 64, MAX_INT]
NAMES = ["x", "y", "l0", "l1", "l2", "label", "all", "head"]  # inputs, outputs, layers, labels, groups
PATTERNS = ["*", "l0/*", "l1/kernel", "trainable", "all", "data.npz", "runs/a"]


def _within(value: float, node: dict[str, Any]) -> bool:
    return (value >= node.get("minimum", -math.inf) and value <= node.get("maximum", math.inf)
            and value > node.get("exclusiveMinimum", -math.inf) and value < node.get("exclusiveMaximum", math.inf))


def _number(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    bounds = [node[k] for k in ("minimum", "maximum") if k in node]
    if node["type"] == "integer":
        edges = [v for v in INTS + [int(b) for b in bounds] + [int(b) + 1 for b in bounds] if _within(v, node)]
        return st.sampled_from(edges or [1])
    edges = [v for v in FLOATS + [float(b) for b in bounds] if _within(v, node)]
    low = max(node.get("minimum", -1e3), node.get("exclusiveMinimum", -1e3), -1e3)
    high = min(node.get("maximum", 1e3), node.get("exclusiveMaximum", 1e3), 1e3)
    drawn = [st.sampled_from(edges)] if edges else []
    if low < high:
        drawn.append(st.floats(low, high, exclude_min="exclusiveMinimum" in node, exclude_max="exclusiveMaximum" in node))
    beyond = [v for v in BEYOND if _within(v, node)]
    return st.one_of(drawn + [st.sampled_from(beyond)] * (2 if beyond else 0))  # weighted: the likeliest escape


def _object(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    properties = node.get("properties")
    if properties is None:  # a mapping with free keys (collections, optimizers): a small one
        values = next(iter(node.get("patternProperties", {}).values()), node.get("additionalProperties"))
        inner = from_schema(values) if isinstance(values, dict) else st.none()
        return st.dictionaries(st.sampled_from(NAMES), inner, min_size=1, max_size=2)
    required = set(node.get("required", ()))
    return st.fixed_dictionaries({k: from_schema(v) for k, v in properties.items() if k in required},
                                 optional={k: from_schema(v) for k, v in properties.items() if k not in required})


def _string(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    if node.get("pattern") in (IDENT, LAYER):
        return st.sampled_from(NAMES)
    return st.sampled_from(PATTERNS)


_MADE: dict[int, st.SearchStrategy[Any]] = {}  # id of a SCHEMA node -> its strategy (SCHEMA lives as long)


def from_schema(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A strategy for values that match `node`, a JSON Schema node of SCHEMA (built once per node:
    building them is most of the cost of a draw)."""
    if id(node) not in _MADE:
        _MADE[id(node)] = _make(node)
    return _MADE[id(node)]


def _make(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        return st.deferred(lambda: from_schema(DEFS[name]))
    if "const" in node:
        return st.just(node["const"])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    for union in ("oneOf", "anyOf"):
        if union in node:  # null is an optional key's default: leaving the key out draws it
            return st.one_of([from_schema(member) for member in node[union] if member.get("type") != "null"])
    kind = node.get("type")
    if kind in ("integer", "number"):
        return _number(node)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "string":
        return _string(node)
    if kind == "array":
        low = node.get("minItems", 0)
        return st.lists(from_schema(node.get("items", {})), min_size=low, max_size=min(node.get("maxItems", 3), low + 2))
    if kind == "object" or "properties" in node:
        return _object(node)
    return st.none()
