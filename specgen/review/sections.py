"""What changed between two specs, section by section: interface, variables, checkpoint, training, export (and
`layers`, in review/layers.py).

Each section is a list of `Change` rows (what, which, old, new); an empty section is unchanged. Three sections can
break what already exists, and say why in one line each: `interface` (a served client's request or response no
longer fits: an input or output removed, renamed, re-typed or reshaped, or a new input it does not send),
`checkpoint` (review/checkpoint.py: NEW's restore plan refuses a checkpoint of OLD, or leaves a variable OLD had
without OLD's weights) and `layers` (review/layers.py: what the model computes changed)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from specgen import text
from specgen.ir.exported import exported
from specgen.ir.model import ModelIR
from specgen.review.renames import Renames
from specgen.spec.model import Spec

TRAINING_SECTIONS = ("loss", "optimizers", "train", "data", "collections", "frozen", "targets", "prune")


@dataclass(frozen=True)
class Change:
    what: str  # added, removed, renamed, reshaped, dtype, collections, optimizer, frozen, unfrozen, changed, ...
    which: str  # the input, output, variable or key
    old: str = ""
    new: str = ""


@dataclass
class Section:
    name: str
    changes: list[Change] = field(default_factory=list)
    breaks: list[str] = field(default_factory=list)  # one line per way it breaks what exists
    summary: str = ""  # one line of counts, where the section has them (checkpoint)
    echo_breaks: bool = True  # False where each row is its own break (layers): the text does not say it twice


def interface(old: ModelIR, new: ModelIR) -> Section:
    """The served signature, as model.onnx declares it (render/onnx_plan.py): the inputs and outputs that
    `export.onnx.outputs` keeps, their dtypes, and their unknown dimensions as `batch`, or 1 where
    `export.onnx.dynamic_batch: false` fixes them. Precision variants keep it (float32 at the IO); the opset does not
    change it."""
    section = Section("interface")
    old, new = exported(old), exported(new)
    for kind, before, after in (("input", _inputs(old), _inputs(new)), ("output", _outputs(old), _outputs(new))):
        for name in sorted(before.keys() | after.keys()):
            if name not in after:
                section.changes.append(Change("removed", f"{kind} {name}", before[name]))
                section.breaks.append(f"{kind} '{name}' was removed: clients that {_use(kind)} it fail")
            elif name not in before:
                section.changes.append(Change("added", f"{kind} {name}", "", after[name]))
                if kind == "input":
                    section.breaks.append(f"input '{name}' is new: clients that do not send it fail")
            elif before[name] != after[name]:
                section.changes.append(Change("changed", f"{kind} {name}", before[name], after[name]))
                section.breaks.append(f"{kind} '{name}' changed from {before[name]} to {after[name]}: clients that "
                                      f"{_use(kind)} it as before fail")
    return section


def _use(kind: str) -> str:
    return "send" if kind == "input" else "read"


def _served(ir: ModelIR, dtype: str, dims: Any) -> str:
    return f"{dtype}{text.shape(dims, unknown='batch' if ir.dynamic_batch else '1')}"  # as onnx_plan.Lowering


def _inputs(ir: ModelIR) -> dict[str, str]:
    return {i.name: _served(ir, i.dtype, i.shape) for i in ir.inputs}


def _outputs(ir: ModelIR) -> dict[str, str]:
    return {name: _served(ir, ir.node(layer).dtype, ir.node(layer).shape) for name, layer in ir.outputs.items()}


def _facts(ir: ModelIR) -> dict[str, dict[str, str]]:
    """Variable path -> shape/dtype, collections, optimizer and trainability, as the variables section compares."""
    optimizer = {p: name for name, paths in ir.optimizers.items() for p in paths}
    facts = {}
    for v in ir.variables:
        groups = [c for c in v.collections if c not in ("trainable", "frozen")]
        state = "trainable" if "trainable" in v.collections else "frozen" if "model" in v.collections else ""
        facts[v.path] = {"shape": f"{v.dtype}{text.shape(v.shape)}", "collections": ", ".join(groups),
                         "optimizer": optimizer.get(v.path, ""), "state": state}
    return facts


def variables(old: ModelIR, new: ModelIR, renames: Renames) -> Section:
    section = Section("variables")
    before, after = _facts(old), _facts(new)
    # A moved variable's old name may still exist in NEW (layers that swapped names): it pairs only by the move.
    moved = {p: q for p in before if (q := renames.variable(p, old)) is not None and q in after}
    kept = sorted((before.keys() & after.keys()) - moved.keys() - set(moved.values()))
    for path in sorted(before.keys() - moved.keys() - set(kept)):
        section.changes.append(Change("removed", path, before[path]["shape"]))
    for path in sorted(after.keys() - set(moved.values()) - set(kept)):
        section.changes.append(Change("added", path, "", after[path]["shape"]))
    pairs = [(p, p) for p in kept] + sorted(moved.items())
    for old_path, new_path in pairs:
        if old_path != new_path:
            section.changes.append(Change("renamed", new_path, old_path, new_path))
        section.changes += _variable_changes(new_path, before[old_path], after[new_path])
    return section


def _variable_changes(path: str, a: dict[str, str], b: dict[str, str]) -> list[Change]:
    changes = []
    if a["shape"] != b["shape"]:
        changes.append(Change("reshaped" if a["shape"].split("[")[0] == b["shape"].split("[")[0] else "dtype",
                              path, a["shape"], b["shape"]))
    for key in ("collections", "optimizer"):
        if a[key] != b[key]:
            changes.append(Change(key, path, a[key] or "-", b[key] or "-"))
    if a["state"] != b["state"] and a["state"] and b["state"]:
        changes.append(Change("frozen" if b["state"] == "frozen" else "unfrozen", path, a["state"], b["state"]))
    return changes


def settings(name: str, old: Spec, new: Spec, keys: tuple[str, ...]) -> Section:
    """Every leaf of the named sections that differs (added, removed or changed), by dotted key."""
    before, after = ({k: v for key in keys for k, v in leaves(key, _dump(spec, key))} for spec in (old, new))
    return settings_of(name, before, after)


def _dump(spec: Spec, key: str) -> Any:
    return spec.model_dump(mode="json", by_alias=True, warnings=False, include={key}).get(key)


def leaves(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in leaves(f"{prefix}.{k}", v)]
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [leaf for i, v in enumerate(value) for leaf in leaves(f"{prefix}[{v.get('name', i)}]", v)]
    return [(prefix, _compact(value))]


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def run(old: dict[str, Any], new: dict[str, Any]) -> Section:
    """Two runs' provenance.json: the data each stage read (file by file), seed, overrides, versions, machine."""
    return settings_of("run", _run_leaves(old), _run_leaves(new))


def _run_leaves(record: dict[str, Any]) -> dict[str, str]:
    table: dict[str, str] = {}
    for stage, found in sorted((record.get("data") or {}).items()):
        if not isinstance(found, dict):
            continue
        for item in found.get("list") or []:
            if isinstance(item, dict):
                table[f"data.{stage}.{item.get('file')}"] = f"sha256 {str(item.get('sha256'))[:12]}, {item.get('bytes')} bytes"
        if "sha256_of_list" in found:
            table[f"data.{stage}"] = f"{found.get('files')} files, list sha256 {str(found['sha256_of_list'])[:12]}"
    for key in ("seed", "overrides", "versions", "machine"):
        table |= dict(leaves(key, record.get(key)))
    return table


def settings_of(name: str, before: dict[str, str], after: dict[str, str]) -> Section:
    section = Section(name)
    for key in sorted(before.keys() | after.keys()):
        if key not in after:
            if not _unset_container(key, before, after):
                section.changes.append(Change("removed", key, before[key]))
        elif key not in before:
            if not _unset_container(key, after, before):
                section.changes.append(Change("added", key, "", after[key]))
        elif before[key] != after[key]:
            section.changes.append(Change("changed", key, before[key], after[key]))
    return section


def _unset_container(key: str, side: dict[str, str], other: dict[str, str]) -> bool:
    """`key` is null on one side and a mapping or list on the other (`train.ema: null` -> `{decay: ...}`): its
    leaves are the addition (or removal); the null is no row of its own."""
    return side[key] == "null" and any(k.startswith((key + ".", key + "[")) for k in other)
