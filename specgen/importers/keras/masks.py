"""Keras' mask_zero masks in an imported model: the import leaves them to specgen, and checks that specgen's
masks are the ones Keras runs with.

Keras 3 saves the mask an Embedding(mask_zero=True) makes as an operation layer `NotEqual(ids, 0)`, the mask a
merge (Add, Subtract, Multiply, ...) of masked tensors makes as `LogicalOr(mask, mask)` (keras/src/layers/
merging/base_merge.py's compute_mask), and passes a mask to each layer that takes one as a call argument
(`mask`, or MultiHeadAttention's `query_mask` / `value_mask` / `key_mask`). specgen derives the same masks from
the spec (`mask_zero: true`, ir/masks.py with Keras' propagation rules), so the import drops the mask layers and
the call arguments that read them. Anything else named like a mask (a mask the user computed another way) is
still refused as a call argument.

`settle` then runs ir/masks.py's rules on the converted layers and compares them with Keras:
- A layer whose class does not support masking destroys the mask in Keras (keras/src/layers/layer.py warns
  "this layer does not support masking and will therefore destroy the mask information": Conv1D, the 1D pools,
  GlobalMaxPooling1D, Flatten, Reshape); the spec refuses a mask there. Where an embedding's mask reaches only
  such layers (no layer uses it), the mask changes nothing Keras computes: the import writes `mask_zero: false`
  and says so in the spec's header. Where another layer uses the same mask, a spec cannot drop it on one path
  only: refused, naming the layer and what to change.
- Every mask Keras recorded for a call must be the mask specgen gives that input (the same id tensors), so a
  mask argument is never dropped for a mask specgen would not make.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from specgen.diagnostics import Diagnostic
from specgen.importers.keras.entries import LayerEntry
from specgen.importers.keras.errors import ImportProblem, layer_problem
from specgen.ir.masks import resolve_masks
from specgen.kinds.ops import REGISTRY
from specgen.kinds.ops.attention import roles

MASK_ARGUMENTS = ("mask", "query_mask", "value_mask", "key_mask")
MASK_ROLE = {"query_mask": "query", "value_mask": "value", "key_mask": "key"}  # MultiHeadAttention's


def mask_ids(entry: LayerEntry, scope: str, masks: dict[str, list[str]]) -> list[str] | None:
    """The keys (graph.py's `<scope><layer>:<node>:<tensor>`) of the id tensors a Keras mask layer is made from:
    `NotEqual(ids, 0)` (one call, a tensor and the number 0), or `LogicalOr(a, b)` of two such masks (a merge's,
    `masks` holding those seen so far); None for any other layer."""
    if entry.class_name not in ("NotEqual", "LogicalOr") or len(entry.inbound_nodes) != 1:
        return None
    node = entry.inbound_nodes[0]
    args = node.get("args") if isinstance(node, dict) else None
    if not isinstance(args, list) or len(args) != 2 or node.get("kwargs"):
        return None
    if entry.class_name == "NotEqual":
        ids = _history(args[0])
        zero = args[1] == 0 and not isinstance(args[1], bool)
        return [f"{scope}{ids[0]}:{ids[1]}:{ids[2]}"] if ids is not None and zero else None
    parts = [masks.get(scope + (tensor_layer(a) or "\0")) for a in args]
    return sorted({key for part in parts for key in part}) if all(p is not None for p in parts) else None  # type: ignore[union-attr]


def reads_zero_mask(key: str, value: Any, scope: str, masks: dict[str, list[str]]) -> bool:
    """Whether a call argument is one of those masks (then specgen's own mask replaces it)."""
    return key in MASK_ARGUMENTS and scope + (tensor_layer(value) or "\0") in masks


def tensor_layer(value: Any) -> str | None:
    """The producing layer's name of a Keras 3 tensor reference, or None."""
    history = _history(value)
    return history[0] if history is not None else None


def _history(value: Any) -> list[Any] | None:
    """A Keras 3 tensor reference's [layer, node, tensor], or None."""
    if not isinstance(value, dict) or value.get("class_name") != "__keras_tensor__":
        return None
    history = (value.get("config") or {}).get("keras_history")
    ok = isinstance(history, list) and len(history) == 3 and isinstance(history[0], str) and \
        all(isinstance(i, int) and not isinstance(i, bool) for i in history[1:])
    return history if ok else None


@dataclass
class Inferred:
    """A converted layer as ir/masks.py reads one (ir/resolve.py's _Inferred), and the Keras call it came from."""

    layer: Any  # the validated spec layer
    index: int
    sources: list[str]
    result: Any
    keras: str  # the Keras layer's path and class
    cls: str
    masks: dict[str, list[str]] | None  # the masks Keras recorded for the call, as spec names of id tensors


@dataclass
class _Refusals:
    """What ir/masks.py reads of a LoadedSpec: where a refusal is (the layer index) and the loss (an import has
    none; a fine-tuning spec's loss is checked when it is validated)."""

    spec: Any = field(default_factory=lambda: SimpleNamespace(loss=None))
    at: list[int] = field(default_factory=list)

    def diagnostic(self, loc: tuple[Any, ...], message: str) -> Diagnostic:
        self.at.append(loc[1])
        return Diagnostic("", None, message)


def _resolve(layers: list[Inferred]) -> tuple[dict[str, tuple[tuple[str, ...], ...]], list[Inferred]]:
    refusals = _Refusals()
    consumed, _ = resolve_masks(refusals, layers)  # type: ignore[arg-type]
    by_index = {x.index: x for x in layers}
    return consumed, [by_index[i] for i in refusals.at]


def settle(layers: list[Inferred], entries: list[dict[str, Any]], notes: list[tuple[str, str]]) -> None:
    """Turn off the masks Keras drops before any layer uses them; refuse what a spec cannot express; check that
    every mask Keras recorded is specgen's."""
    consumed, refused = _resolve(layers)
    used = {i for masks in consumed.values() for ids in masks for i in ids}
    unused = [x for x in layers if getattr(x.layer, "mask_zero", False) and x.sources[0] not in used]
    # Only where Keras drops the mask at every refusal is the spec's `consumed` all Keras uses (a layer Keras gives
    # the mask and passes it on, BatchNormalization, would hide the layers after it from `used`).
    if refused and unused and all(_dropped_by(x) for x in refused):
        for x in unused:
            entries[x.index].pop("mask_zero", None)
            x.layer = x.layer.model_copy(update={"mask_zero": False})
            after = _after(layers, x.layer.name)
            where = ", ".join(f"'{d.keras}' ({d.cls})" for d in refused if d.layer.name in after) or "no layer"
            notes.append((x.keras, f"{x.cls} mask_zero=True (Keras drops the mask at {where} before any layer "
                                   "uses it, so it changes no output)"))
        consumed, refused = _resolve(layers)
    if refused:  # a layer Keras uses the mask in says more than one where it drops it
        raise _cannot_express(next((x for x in refused if not _dropped_by(x)), refused[0]))
    _check_recorded(layers, consumed)


def _after(layers: list[Inferred], start: str) -> set[str]:
    """The layers that read `start`, directly or through others (`layers` are in topological order)."""
    found = {start}
    for x in layers:
        if found.intersection(x.sources):
            found.add(x.layer.name)
    return found


def _dropped_by(x: Inferred) -> str:
    """The Keras class that drops the mask at this layer's op (layer.py's __call__: it does not support masking), or ''."""
    return REGISTRY[x.layer.op].mask.keras_drops


def _cannot_express(x: Inferred) -> ImportProblem:
    op = x.layer.op
    if dropped_by := _dropped_by(x):
        return layer_problem(x.keras, x.cls, f"Keras drops the padding mask (mask_zero=True) here ({dropped_by} does "
                             "not support masking), while another layer uses the same mask; a spec carries a mask to "
                             "every layer it reaches, so it cannot drop it on one path only (docs/spec.md, Masks): "
                             "give this path an Embedding of its own without mask_zero, or end the time axis before "
                             "this layer")
    why = REGISTRY[op].mask.reason or f"specgen does not carry a mask through {op}"
    return layer_problem(x.keras, x.cls, f"its input carries a padding mask (mask_zero=True) that the spec cannot "
                         f"express here: {why} (docs/spec.md, Masks); import the model without mask_zero, or end the "
                         "time axis before this layer")


def _check_recorded(layers: list[Inferred], consumed: dict[str, tuple[tuple[str, ...], ...]]) -> None:
    """Each mask Keras recorded for a call, against the mask specgen gives that input."""
    for x in layers:
        for argument, ids in (x.masks or {}).items():
            position = roles(x.layer)[MASK_ROLE[argument]] if argument in MASK_ROLE else 0
            found = consumed.get(x.layer.name, ())
            ours = sorted(found[position]) if position < len(found) else []
            if ours != sorted(ids):
                raise layer_problem(x.keras, x.cls, f"Keras hands it the mask argument '{argument}' made from "
                                    f"{_ids(ids)}, where the spec's mask rules give {_ids(ours)}: a mask specgen "
                                    "would not make cannot be imported (docs/spec.md, Masks)")


def _ids(ids: list[str]) -> str:
    return "no mask" if not ids else "the ids " + " and ".join(f"'{i}'" for i in ids)
