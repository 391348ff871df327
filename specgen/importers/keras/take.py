"""Keras 3's `x[:, i]` (the GetItem operation) and `keras.ops.take(x, i, axis=a)` as the spec's `take`.

One integer index on one axis, every other axis kept whole: BERT-style `x[:, 0]` readouts and `x[:, -1]`
last steps. Ranges (`x[:, 1:3]`), several indices, `None` / `...` and tensor indices have no spec form and
are refused by name. The batch axis cannot be taken (a spec layer keeps the batch).
"""

from __future__ import annotations

from typing import Any

from specgen.importers.keras.dag import KLayer
from specgen.importers.keras.errors import ImportProblem, layer_problem

CLASSES = ("GetItem", "Take")


def _whole(part: Any) -> bool:
    """Keras' serialized `:` (slice(None, None, None))."""
    return isinstance(part, dict) and part.get("class_name") == "__slice__" \
        and part.get("config") == {"start": None, "stop": None, "step": None}


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(part: Any) -> str:
    """A key part as Python writes it (`:`, `1:3`, `0`), so the error shows the indexing the user wrote."""
    config = part.get("config") if isinstance(part, dict) and part.get("class_name") == "__slice__" else None
    if not isinstance(config, dict):
        return str(part)[:40]
    bounds = ["" if config.get(k) is None else str(config.get(k))[:20] for k in ("start", "stop", "step")]
    return ":".join(bounds if bounds[2] else bounds[:2])


def _refuse(layer: KLayer, received: str) -> ImportProblem:
    return layer_problem(layer.name, layer.cls, f"received {received}; expected one integer index on one axis after "
                         "the batch, every other axis whole (`x[:, 0]`, `x[:, -1, :]`), the spec's take")


def take(layer: KLayer) -> dict[str, Any]:
    constants = layer.constants
    if len(layer.args) != 2 or len(constants) != 1:
        raise _refuse(layer, "a tensor index" if len(constants) == 0 else f"the index {str(constants)[:80]}")
    if layer.cls == "Take":
        axis, index = layer.config.get("axis"), constants[0]
        if not _integer(axis) or not _integer(index) or set(layer.config) - {"name", "axis"}:
            raise _refuse(layer, f"take(x, {str(index)[:40]}, axis={str(axis)[:20]})")
    else:
        key = constants[0] if isinstance(constants[0], list) else [constants[0]]
        shown = f"x[{', '.join(_shown(part) for part in key[:8])}{', ...' if len(key) > 8 else ''}]"
        ints = [i for i, part in enumerate(key) if not _whole(part)]
        if len(ints) != 1 or not _integer(key[ints[0]]) or set(layer.config) - {"name"}:
            raise _refuse(layer, shown)
        axis, index = ints[0], key[ints[0]]
    if axis == 0:
        raise _refuse(layer, f"index {index} on the batch axis")
    return {"op": "take", "axis": axis, "index": index}
