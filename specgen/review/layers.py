"""The `layers` section of `specgen diff`: what each layer computes and what it reads, weights or none.

Variables and checkpoints see only layers that hold weights, and only their shapes: an activation, a stride, an
epsilon or a layer reading another input changes what the model computes and leaves them as they were. This section
pairs OLD's layers with NEW's (by name, through the renames found: review/renames.py) and lists, in NEW's layer
order, every layer renamed, added or removed, every setting that differs (the spec's keys with the defaults filled
in, compared as the model computes them and listed as written: `kernel: 3` is `[3, 3]`, a pool's `strides: null`
its size; review/spellings.py) and every change of wiring (the layers each reads, as the IR resolved them, implicit
inputs included), then outputs that name another layer. Under `--fail-on layers` each of those but a rename breaks:
the model with OLD's weights computes something else.

Settings that change only how a layer trains (its op's `training_only` keys in the op registry: initializers,
batch-norm momentum, dropout rates) are not among them: restored from OLD's checkpoint, the model computes what
OLD did. They are rows of the `training` section instead (`layers[<layer>].<key>`), which never breaks.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import to_jsonable_python

from specgen.ir.graph import SIDE_INPUTS
from specgen.ir.model import ModelIR
from specgen.kinds.ops import EXTRA_OUTPUT, op_def
from specgen.kinds.ops.nodes import Node
from specgen.review.renames import Renames
from specgen.review.sections import Change, Section, changed_rows, leaves
from specgen.review.spellings import normalized
from specgen.spec.load import LoadedSpec

WIRING = ("name", "input", "inputs", *SIDE_INPUTS)  # compared as the IR resolved them, not as written
# Spec keys never read from the IR's parameters: `op` is the node's own (a bidirectional layer's parameters name
# its inner op `op`), `activation` the node's resolved one, `share` goes through the renames.
KEPT = ("op", "activation", "share")


def layers(old: LoadedSpec, old_ir: ModelIR, new: LoadedSpec, new_ir: ModelIR,
           renames: Renames) -> tuple[Section, list[Change]]:
    """The `layers` section, and the rows of training-only settings that changed (for the `training` section)."""
    section = Section("layers", echo_breaks=False)
    training: list[Change] = []
    before = {n.name: n for n in old_ir.nodes if n.op != EXTRA_OUTPUT}  # extra outputs follow their layer
    back = {b: a for a, b in renames.layers.items()}
    paired: set[str] = set()
    for node in (n for n in new_ir.nodes if n.op != EXTRA_OUTPUT):
        was = before.get(back.get(node.name, "" if node.name in renames.layers else node.name))
        if was is None:
            _add(section, Change("added", node.name, "", node.op), f"layer '{node.name}' ({node.op}) is new")
            continue
        paired.add(was.name)
        if was.name != node.name:
            section.changes.append(Change("renamed", node.name, was.name, node.name))
        training += _compare(section, (old, was), (new, node), renames)
    for node in (n for n in before.values() if n.name not in paired):
        _add(section, Change("removed", node.name, node.op), f"layer '{node.name}' ({node.op}) was removed")
    for name in sorted(old_ir.outputs.keys() & new_ir.outputs.keys()):
        a, b = old_ir.outputs[name], new_ir.outputs[name]
        if renames.layers.get(a, a) != b:
            _add(section, Change("rewired", f"output {name}", a, b), f"output '{name}' is layer '{b}', was '{a}'")
    return section, training


def _add(section: Section, change: Change, reason: str) -> None:
    section.changes.append(change)
    section.breaks.append(reason)


def _compare(section: Section, old: tuple[LoadedSpec, Node], new: tuple[LoadedSpec, Node],
             renames: Renames) -> list[Change]:
    """One pair of layers: each setting, then the layers it reads (OLD's read through the renames); returns the
    training-only settings that changed (a key is one where both layers' ops say so: a changed op breaks anyway).
    Settings are compared as the model computes them (`_settings`) and listed as written."""
    (old_spec, a), (new_spec, b) = old, new
    (before, was), (after, now) = _settings(old_spec, a, renames), _settings(new_spec, b, Renames())
    only = set(op_def(a.op).training_only) & set(op_def(b.op).training_only)
    training: list[Change] = []
    for row in changed_rows(before, after, was, now):
        key, x, y = row.which, row.old or "-", row.new or "-"
        if _covered(key, only):  # as the training section's own rows: a key on one side only is added or removed
            training.append(Change(row.what, f"layers[{b.name}].{key}", row.old, row.new))
        else:
            _add(section, Change("changed", f"{b.name}.{key}", x, y), f"layer '{b.name}': {key} changed from {x} to {y}")
    read = tuple(renames.layers.get(i, i) for i in a.inputs)  # OLD's inputs by their names in NEW
    if read != b.inputs:
        x, y = ", ".join(read) or "-", ", ".join(b.inputs) or "-"
        _add(section, Change("rewired", f"{b.name}.inputs", x, y), f"layer '{b.name}' reads {y}, was {x}")
    return training


def _covered(key: str, keys: set[str]) -> bool:
    """`key` (a dotted leaf: `kernel_init.kind`, `layer.bias_init`) is one of `keys` or below one of them."""
    return any(key == k or key.startswith((k + ".", k + "[")) for k in keys)


def _settings(loaded: LoadedSpec, node: Node, renames: Renames) -> tuple[dict[str, str], dict[str, str]]:
    """A layer's spec keys with defaults filled in, as dotted leaves, less its wiring: as written (what rows show),
    and as the model computes them (what is compared). The second spells every shorthand in full
    (review/spellings.py) and takes a key the op resolved from the layer's IR parameters, which the renderings
    read (a pool's `strides: null` is its size there, `kernel: 3` is `(3, 3)`). Both hold the activation as
    resolved (`linear` whether written or left out), and `share` through the renames (a rename is not a change)."""
    layer = loaded.layers[node.index]
    dump: dict[str, Any] = layer.model_dump(mode="json", by_alias=True, warnings=False)
    meant = normalized(layer)
    meant |= {k: to_jsonable_python(v) for k, v in node.params.items() if k in meant and k not in KEPT}
    return _leaves(dump, node, renames), _leaves(meant, node, renames)


def _leaves(dump: dict[str, Any], node: Node, renames: Renames) -> dict[str, str]:
    found = {k: v for key, value in dump.items() if key not in WIRING for k, v in leaves(key, value)}
    if "activation" in found:
        found["activation"] = node.activation or "linear"
    if dump.get("share") is not None:
        found["share"] = renames.layers.get(dump["share"], dump["share"])
    else:
        found.pop("share", None)  # not shared: absent ("-" in a row), not the YAML `null`
    return found
