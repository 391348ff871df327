"""Keras' record of a mask_zero mask in a functional model, which the import leaves to specgen.

Keras 3 saves the mask an Embedding(mask_zero=True) makes as an operation layer `NotEqual(ids, 0)`, and passes
it to each layer that takes one as a call argument (`mask`, or MultiHeadAttention's `query_mask` /
`value_mask` / `key_mask`). specgen derives the same mask from the spec (`mask_zero: true`, ir/masks.py with
Keras' propagation rules), so the import drops both: the NotEqual layer and the call arguments that read it.
Anything else named like a mask (a mask the user computed another way) is still refused as a call argument.
"""

from __future__ import annotations

from typing import Any

from specgen.importers.keras.entries import LayerEntry

MASK_ARGUMENTS = ("mask", "query_mask", "value_mask", "key_mask")


def is_zero_mask(entry: LayerEntry) -> bool:
    """Whether this layer entry is Keras' `NotEqual(tensor, 0)` (one call, a tensor and the number 0)."""
    if entry.class_name != "NotEqual" or len(entry.inbound_nodes) != 1:
        return False
    node = entry.inbound_nodes[0]
    args = node.get("args") if isinstance(node, dict) else None
    return (isinstance(args, list) and len(args) == 2 and _tensor_layer(args[0]) is not None
            and args[1] == 0 and not isinstance(args[1], bool) and not node.get("kwargs"))


def reads_zero_mask(key: str, value: Any, scope: str, masks: set[str]) -> bool:
    """Whether a call argument is one of those masks (then specgen's own mask replaces it)."""
    return key in MASK_ARGUMENTS and (_tensor_layer(value) or "\0") in {m[len(scope):] for m in masks
                                                                        if m.startswith(scope)}


def _tensor_layer(value: Any) -> str | None:
    """The producing layer's name of a Keras 3 tensor reference, or None."""
    if not isinstance(value, dict) or value.get("class_name") != "__keras_tensor__":
        return None
    history = (value.get("config") or {}).get("keras_history")
    return history[0] if isinstance(history, list) and history and isinstance(history[0], str) else None
