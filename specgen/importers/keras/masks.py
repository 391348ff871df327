"""Keras' mask_zero masks in an imported model: the import leaves them to specgen, and checks that specgen's
masks are the ones Keras runs with.

Keras 3 saves the mask an Embedding(mask_zero=True) makes as an operation layer `NotEqual(ids, 0)`, the mask a
merge (Add, Subtract, Multiply, ...) of masked tensors makes as `LogicalOr(mask, mask)` (keras/src/layers/
merging/base_merge.py's compute_mask), and passes a mask to each layer that takes one as a call argument
(`mask`, or MultiHeadAttention's `query_mask` / `value_mask` / `key_mask`). specgen derives the same masks from
the spec (`mask_zero: true`, ir/masks.py with Keras' propagation rules), so the import drops the mask layers and
the call arguments that read them. Anything else named like a mask (a mask the user computed another way) is
still refused as a call argument, named by the layer that makes it (calls.py), and a Masking layer by its own
name (OTHER_MASKS).

`settle` then runs ir/masks.py's rules on the converted layers and compares them with Keras:
- A layer whose class does not support masking destroys the mask in Keras (keras/src/layers/layer.py warns
  "this layer does not support masking and will therefore destroy the mask information": Conv1D, the 1D pools,
  GlobalMaxPooling1D, Flatten, Reshape); the spec refuses a mask there. Where an embedding's mask reaches only
  such layers (no layer uses it), the mask changes nothing Keras computes: the import writes `mask_zero: false`
  and says so in the spec's header. Where another layer uses the same mask, a spec cannot drop it on one path
  only: refused, naming the layer and what to change.
- Every mask Keras recorded for a call must be the mask specgen gives that input (the same id tensors), so a
  mask argument is never dropped for a mask specgen would not make.
- The other way round: a layer specgen's rules give a mask that Keras runs without. Keras 3 fills in a layer's
  mask itself only for a call with one tensor argument (`mask=`), or, for a call with more, for the arguments
  the layer has a `<argument>_mask=` for (MultiHeadAttention's query, value and key): keras/src/layers/layer.py,
  Layer.__call__, "Populate mask argument(s)". So `GRU(...)(x, initial_state=[h])` runs unmasked in Keras,
  while a spec recurrent layer always reads its input's mask (and, with return_sequences, Keras still passes
  the mask on to the layers after it: Layer.__call__ computes the output mask from the first input's). A spec
  has no key that makes one layer ignore the mask its input carries (docs/spec.md, Masks), and the import does
  not add one: it would be a spec-language feature (validation, both renderings, their parity tests) for one
  Keras 3 call-site rule, while these two cases cover it with no wrong answer. Where no layer Keras does give
  the mask uses it, the import writes
  `mask_zero: false` (exact: the mask then changes no output in Keras, and none in the spec), and says so in
  the spec's header, as for a mask Keras drops; where another layer uses it, refused by the layer's name, with
  what Keras does and the two ways to change the Keras model (pass the mask in the call, or an input without
  it). Sequential models and Keras 2 files have no such record (`masks` None) and need none: a Sequential's
  calls have one tensor argument each, and a Keras 2 recurrent call on initial_state tensors is refused before
  (its node lists them as inputs: "called on 2 tensors").
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
# Keras layers that make a mask of another kind than mask_zero's, refused by name where the walk meets them
# (graph.py), before a layer after them names that mask as a call argument.
OTHER_MASKS = {"Masking": "refused: its mask (the steps whose features all equal mask_value) is not an "
                          "Embedding(mask_zero=True)'s padding mask, the only mask specgen imports (docs/import.md, "
                          "Masks); remove the Masking layer, or feed token ids through Embedding(mask_zero=True)"}
MASK_ROLE = {"query_mask": "query", "value_mask": "value", "key_mask": "key"}  # MultiHeadAttention's


# Concatenate.compute_mask (keras/src/layers/merging/concatenate.py) over masked inputs of rank 3: per input
# LogicalOr(ExpandDims(mask, -1), ZerosLike(input, bool)), the ops Concatenate of those on the last axis, Any on the
# last axis: the OR of the masks, which is the spec's concat rule (ir/masks.py). The ops and the config each has.
_CONCAT_MASK_OPS = {"ExpandDims": ("axis",), "ZerosLike": ("dtype",), "Concatenate": ("axis",),
                    "Any": ("axis", "keepdims")}
_WANTED = {"axis": (-1, 2), "keepdims": (False,), "dtype": ("bool",)}  # -1 or 2: the last axis of [batch, time, 1]
# Each step's result is kept in `masks` as the step before it needs it (a marker key, no layer's: "\0" starts it),
# so only the whole chain makes a mask a call may read: an `Any` of another tensor is still refused by name.
_STAGE = "\0{stage}:{key}"
_NEEDS = {"ExpandDims": ("mask",), "ZerosLike": (), "LogicalOr": ("expand", "zeros"), "Concatenate": ("column",),
          "Any": ("concat",)}
_MADE = {"ExpandDims": "expand", "ZerosLike": "zeros", "LogicalOr": "column", "Concatenate": "concat", "Any": "mask"}


def mask_ids(entry: LayerEntry, scope: str, masks: dict[str, list[str]]) -> list[str] | None:
    """The keys (graph.py's `<scope><layer>:<node>:<tensor>`) of the id tensors a Keras mask layer is made from:
    `NotEqual(ids, 0)` (one call, a tensor and the number 0), `LogicalOr(a, b)` of two such masks (a merge's,
    `masks` holding those seen so far), or a step of Concatenate's merge (_CONCAT_MASK_OPS; its ZerosLike is the
    OR's identity: no ids); None for any other layer."""
    if entry.class_name not in ("NotEqual", "LogicalOr", *_CONCAT_MASK_OPS) or len(entry.inbound_nodes) != 1:
        return None
    node = entry.inbound_nodes[0]
    args = node.get("args") if isinstance(node, dict) else None
    if not isinstance(args, list) or node.get("kwargs"):
        return None
    if entry.class_name in _CONCAT_MASK_OPS or (entry.class_name == "LogicalOr" and _stages(args, scope, masks)):
        return _concat_step(entry, args, scope, masks)
    if len(args) != 2:
        return None
    if entry.class_name == "NotEqual":
        ids = tensor_history(args[0])
        zero = args[1] == 0 and not isinstance(args[1], bool)
        return [f"{scope}{ids[0]}:{ids[1]}:{ids[2]}"] if ids is not None and zero else None
    return _union(args, scope, masks)


def _key(arg: Any, scope: str) -> str:
    return scope + (tensor_layer(arg) or "\0")


def _union(args: list[Any], scope: str, masks: dict[str, list[str]]) -> list[str] | None:
    """The ids of masks all seen before, merged; None if any is not one."""
    parts = [masks.get(_key(a, scope)) for a in args]
    return sorted({key for part in parts for key in part}) if all(p is not None for p in parts) else None  # type: ignore[union-attr]


def _stage(arg: Any, scope: str, masks: dict[str, list[str]]) -> str:
    """A tensor's Concatenate-merge stage ("expand", "zeros", "column", "concat"), "mask" for a finished mask
    (mask_zero's, a merge's), "" for any other tensor."""
    key = _key(arg, scope)
    found = [s for s in _MADE.values() if _STAGE.format(stage=s, key=key) in masks]
    return found[0] if found else "mask" if key in masks else ""


def _stages(args: list[Any], scope: str, masks: dict[str, list[str]]) -> tuple[str, ...]:
    """Each tensor's stage, where one at least is a step of the Concatenate merge; () otherwise."""
    found = tuple(_stage(a, scope, masks) for a in args)
    return found if any(f not in ("", "mask") for f in found) else ()


def _concat_step(entry: LayerEntry, args: list[Any], scope: str, masks: dict[str, list[str]]) -> list[str] | None:
    """One op of Concatenate.compute_mask, recorded as Keras records it (a keras.ops layer, its axis the last,
    on the stages before it); None for the same op used otherwise. Its result's stage is noted in `masks`."""
    cls = entry.class_name
    config = {k: v for k, v in entry.config.items() if k != "name"}
    if cls != "LogicalOr" and (not (entry.module or "").startswith("keras.src.ops")
                               or set(config) != set(_CONCAT_MASK_OPS[cls])
                               or any(config[k] not in _WANTED[k] or isinstance(config[k], bool) != (k == "keepdims")
                                      for k in config)):
        return None
    tensors = args[0] if cls == "Concatenate" and len(args) == 1 and isinstance(args[0], list) else args
    stages = [_stage(t, scope, masks) for t in tensors]
    if cls == "ZerosLike":
        ok = len(args) == 1 and tensor_history(args[0]) is not None
    elif cls == "LogicalOr":  # one expand and one zeros
        ok = sorted(stages) == sorted(_NEEDS[cls])
    elif cls == "Concatenate":  # one column per input
        ok = bool(stages) and set(stages) == set(_NEEDS[cls])
    else:  # ExpandDims of a mask, Any of a concat
        ok = stages == list(_NEEDS[cls])
    ids = ([] if cls == "ZerosLike" else _union(tensors, scope, masks)) if ok else None
    if ids is not None and cls != "Any":
        masks[_STAGE.format(stage=_MADE[cls], key=scope + (entry.name or str(entry.config.get("name"))))] = []
    return ids


def reads_zero_mask(key: str, value: Any, scope: str, masks: dict[str, list[str]]) -> bool:
    """Whether a call argument is one of those masks (then specgen's own mask replaces it)."""
    found = scope + (tensor_layer(value) or "\0")  # a step of Concatenate's merge is no mask yet: refused (calls.py)
    return key in MASK_ARGUMENTS and found in masks and not any(_STAGE.format(stage=s, key=found) in masks
                                                                 for s in _MADE.values() if s != "mask")


def tensor_layer(value: Any) -> str | None:
    """The producing layer's name of a Keras 3 tensor reference, or None."""
    history = tensor_history(value)
    return history[0] if history is not None else None


def tensor_history(value: Any) -> list[Any] | None:
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
    index: int  # its place in the spec layers as converted (convert.py), before they are put in Keras' run order
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
    """Turn off the masks Keras drops, or runs every layer without, before any layer uses them; refuse what a spec
    cannot express; check that every mask Keras recorded is specgen's."""
    consumed, refused = _resolve(layers)
    unfilled = _unfilled(layers, consumed)
    # The ids of the masks a layer reads in Keras too: a mask Keras hands no layer changes no output there.
    skip = {(x.layer.name, p) for x, p in unfilled}
    used = {i for name, masks in consumed.items() for p, ids in enumerate(masks) if (name, p) not in skip for i in ids}
    unused = [x for x in layers if getattr(x.layer, "mask_zero", False) and x.sources[0] not in used]
    # Only where Keras drops the mask at every refusal is the spec's `consumed` all Keras uses (a layer Keras gives
    # the mask and passes it on, BatchNormalization, would hide the layers after it from `used`).
    if (refused or unfilled) and unused and all(_dropped_by(x) for x in refused):
        for x in unused:
            entries[x.index].pop("mask_zero", None)
            x.layer = x.layer.model_copy(update={"mask_zero": False})
            notes.append((x.keras, f"{x.cls} mask_zero=True ({_unused_because(layers, x, refused, unfilled)}, so "
                                   "it changes no output)"))
        consumed, refused = _resolve(layers)
        unfilled = _unfilled(layers, consumed)
    if refused:  # a layer Keras uses the mask in says more than one where it drops it
        raise _cannot_express(next((x for x in refused if not _dropped_by(x)), refused[0]))
    if unfilled:
        raise _not_filled(layers, unfilled, consumed)
    _check_recorded(layers, consumed)


def _unused_because(layers: list[Inferred], x: Inferred, refused: list[Inferred],
                    unfilled: list[tuple[Inferred, int]]) -> str:
    """Why an embedding's mask changes no Keras output: where Keras drops it, which layers Keras runs without it."""
    after = _after(layers, x.layer.name)
    dropped = ", ".join(f"'{d.keras}' ({d.cls})" for d in refused if d.layer.name in after)
    unmasked = {u.keras: u for u, _ in unfilled if u.layer.name in after}
    if not unmasked:
        return f"Keras drops the mask at {dropped or 'no layer'} before any layer uses it"
    runs = "; ".join(f"Keras runs '{u.keras}' ({u.cls}) without it, as that call {_more_tensors(u)}"
                     for u in unmasked.values())
    return (f"Keras drops the mask at {dropped}; " if dropped else "") + runs + "; Keras 3 fills in mask= only " \
        "for a call with one tensor argument, and no other layer uses the mask"


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


def _position(x: Inferred, argument: str) -> int:
    """The layer input a Keras mask argument masks: `mask` the first, MultiHeadAttention's by role."""
    return roles(x.layer)[MASK_ROLE[argument]] if argument in MASK_ROLE else 0


def _filled(x: Inferred, position: int) -> bool:
    """Whether Keras 3 fills in the mask of this input itself when the call passes none (Layer.__call__'s
    "Populate mask argument(s)"): `mask=` for a call with one tensor argument (the spec layer's one input),
    `<argument>_mask=` for a call with more where the layer has one (MultiHeadAttention's query, value, key)."""
    if len(x.sources) == 1:
        return True
    rule = REGISTRY[x.layer.op].mask
    if rule is not None and rule.consumes == "product":  # Keras' Multiply reads each input tensor's own mask
        return True  # the ops whose renderings take a mask per role (query, value, key)
    return rule is not None and rule.consumes == "attention" and position in {
        roles(x.layer)[r] for r in MASK_ROLE.values()}


def _unfilled(layers: list[Inferred], consumed: dict[str, tuple[tuple[str, ...], ...]]) -> list[tuple[Inferred, int]]:
    """(layer, input) where specgen's rules give the layer a mask and Keras runs it without one: no mask recorded
    for that input, and none Keras fills in (a Keras 3 functional call only: `masks` None has no record)."""
    found = []
    for x in layers:
        if x.masks is None:
            continue
        recorded = {_position(x, argument) for argument in x.masks}
        found += [(x, p) for p, ids in enumerate(consumed.get(x.layer.name, ()))
                  if ids and p not in recorded and not _filled(x, p)]
    return found


def _more_tensors(x: Inferred) -> str:
    """What makes a call one Keras 3 fills in no mask for: its tensor arguments beside the input."""
    return "passes initial_state too" if getattr(x.layer, "initial_state", None) else \
        f"has {len(x.sources)} tensor arguments"


def _not_filled(layers: list[Inferred], unfilled: list[tuple[Inferred, int]],
                consumed: dict[str, tuple[tuple[str, ...], ...]]) -> ImportProblem:
    """The refusal of the first layer Keras runs without the mask its input carries, naming a layer that uses it."""
    x, position = unfilled[0]
    ids = consumed[x.layer.name][position]
    skip = {(u.layer.name, p) for u, p in unfilled}
    user = next((u for u in layers for p, m in enumerate(consumed.get(u.layer.name, ()))
                 if set(m) & set(ids) and (u.layer.name, p) not in skip), None)
    uses = f"'{user.keras}' ({user.cls}) uses it" if user else "another layer uses it"
    own = f"mask=keras.ops.not_equal({ids[0]}, 0)" if len(ids) == 1 else "mask=<the mask of its input>"
    return layer_problem(x.keras, x.cls, f"Keras 3 runs this call without the padding mask (mask_zero=True) of its input, "
                         f"made from {_ids(list(ids))}: it fills in mask= only for a call with one tensor argument, "
                         f"and this call {_more_tensors(x)}; the spec's {x.layer.op} would read the mask, and it "
                         f"cannot be left out of the spec since {uses} (docs/import.md, Masks): pass the mask in the "
                         f"Keras call ({own}) to mask this layer in Keras too, or feed it a tensor without the mask "
                         "(an Embedding of its own without mask_zero)")


def _check_recorded(layers: list[Inferred], consumed: dict[str, tuple[tuple[str, ...], ...]]) -> None:
    """Each mask Keras recorded for a call, against the mask specgen gives that input."""
    for x in layers:
        for argument, ids in (x.masks or {}).items():
            position = _position(x, argument)
            found = consumed.get(x.layer.name, ())
            ours = sorted(found[position]) if position < len(found) else []
            if ours != sorted(ids):
                raise layer_problem(x.keras, x.cls, f"Keras hands it the mask argument '{argument}' made from "
                                    f"{_ids(ids)}, where the spec's mask rules give {_ids(ours)}: a mask specgen "
                                    "would not make cannot be imported (docs/spec.md, Masks)")


def _ids(ids: list[str]) -> str:
    return "no mask" if not ids else "the ids " + " and ".join(f"'{i}'" for i in ids)
