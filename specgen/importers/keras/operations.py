"""Keras 3 operations recorded in a functional graph (`x + 3.0`, `a * b`, `x[:, 0]`) as spec ops."""

from __future__ import annotations

from typing import Any

from specgen.importers.keras.base import KERAS_OPS
from specgen.importers.keras.dag import KLayer
from specgen.importers.keras.errors import layer_problem
from specgen.importers.keras.objects import finite
from specgen.importers.keras.take import CLASSES as TAKE_CLASSES
from specgen.importers.keras.take import take

# keras.ops calls in a graph, each named as the layer class of the op it imports as (OpDef.keras)
OPERATIONS = ("Add", "Multiply", "Subtract")


def operation(layer: KLayer) -> dict[str, Any]:
    """`x + 3.0`, `x * (1 / 6)`, `a * b` in a Keras 3 graph (MobileNetV3's hard sigmoid): exact spec ops."""
    if layer.cls in TAKE_CLASSES:
        return take(layer)
    op = KERAS_OPS[layer.cls] if layer.cls in OPERATIONS else None
    if op is None or len(layer.args) != 2 or set(layer.config) - {"name"}:
        raise layer_problem(layer.name, layer.cls, f"the Keras operation ({layer.module}) has no spec form")
    constants = layer.constants
    if not constants:
        return {"op": op}
    if len(constants) != 1:
        raise layer_problem(layer.name, layer.cls, "an operation on two constants")
    c, first = finite(constants[0]), not isinstance(layer.args[0], float | int)
    if c is None:
        raise layer_problem(layer.name, layer.cls, f"the constant {constants[0]!r} is outside float32's finite range")
    # rescale is x * scale + offset in float32: x * 1.0 is x exactly, so these equal Keras' results.
    if layer.cls == "Add":
        return {"op": "rescale", "scale": 1.0, "offset": c}
    if layer.cls == "Multiply":
        return {"op": "rescale", "scale": c}
    return {"op": "rescale", "scale": 1.0, "offset": -c} if first else {"op": "rescale", "scale": -1.0, "offset": c}
