"""What changed between two specs, section by section: variables, training, export, other, run (and `interface`,
`layers` and `checkpoint`, each in its own module of review/).

Each section is a list of `Change` rows (what, which, old, new); an empty section is unchanged. Three sections can
break what already exists, and say why in one line each: `interface` (a served client's request or response no
longer fits: review/interface.py),
`checkpoint` (review/checkpoint.py: NEW's restore plan refuses a checkpoint of OLD, or leaves a variable OLD had
without OLD's weights) and `layers` (review/layers.py: what the model computes changed)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specgen import text
from specgen.ir.model import ModelIR
from specgen.review.keys import KeyIndex, held_by, reachable
from specgen.review.renames import Renames
from specgen.review.spellings import normalized
from specgen.spec.model import Spec

# How the model trains, where its runs keep their checkpoints and what they restore from (`checkpoint.*`: the
# `checkpoint` section plans OLD's checkpoint into NEW's restore entries; these rows say that the entries changed).
TRAINING_SECTIONS = ("loss", "optimizers", "train", "data", "collections", "frozen", "targets", "prune", "checkpoint")
OTHER_SECTIONS = ("doc", "lints", "sweep")  # what neither trains nor serves: the spec's text, lints, searches


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
    notes: list[str] = field(default_factory=list)  # lines under the summary that break nothing (checkpoint's resume:)


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
    """Every leaf of the named sections that differs (added, removed or changed), by dotted key, as written; a
    leaf that differs only in its spelling (`metrics: [accuracy]` -> `[{kind: accuracy}]`) is no row."""
    before, after = ({k: v for key in keys for k, v in leaves(key, _dump(spec, key))} for spec in (old, new))
    meant = tuple({k: v for key in keys for k, v in leaves(key, whole.get(key))}
                  for whole in (normalized(spec, set(keys)) for spec in (old, new)))
    return settings_of(name, before, after, (meant[0], meant[1]))


def _dump(spec: Spec, key: str) -> Any:
    return spec.model_dump(mode="json", by_alias=True, warnings=False, include={key}).get(key)


def leaves(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in leaves(f"{prefix}.{k}", v)]
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [leaf for i, v in enumerate(value) for leaf in leaves(f"{prefix}[{_item(v, i)}]", v)]
    return [(prefix, _compact(value))]


def _item(value: dict[str, Any], index: int) -> str | int:
    """A list item's label: its name (a layer's, a named loss term's), else its index: an unnamed loss term's name is
    null, and `[None]` would say nothing and give two unnamed terms the same rows."""
    name = value.get("name")
    return name if isinstance(name, str) and name else index


def _compact(value: Any) -> str:
    """A leaf as one table cell: a string as written (a `doc`'s line breaks and any control character escaped)."""
    return text.printable(value) if isinstance(value, str) else json.dumps(value, sort_keys=True)


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
    for key in ("seed", "overrides", "restore", "versions", "machine"):  # restore: what a fine-tuning run restored
        table |= dict(leaves(key, record.get(key)))
    return table


def settings_of(name: str, before: dict[str, str], after: dict[str, str],
                meant: tuple[dict[str, str], dict[str, str]] | None = None) -> Section:
    """The rows of the leaves that differ; `meant`: the same leaves normalized (review/spellings.py), which decide
    what differs (None: as written)."""
    section = Section(name)

    @functools.cache  # built on first need: most diffs turn no null into a mapping (or back)
    def held(side: int) -> set[str]:
        return held_by((before, after)[side])

    for change in changed_rows(before, after, *(meant or (before, after))):
        if change.what == "removed" and _unset_container(change.which, before, lambda: held(1)):
            continue
        if change.what == "added" and _unset_container(change.which, after, lambda: held(0)):
            continue
        section.changes.append(change)
    return section


def changed_rows(before: dict[str, str], after: dict[str, str], before_meant: dict[str, str],
                 after_meant: dict[str, str]) -> list[Change]:
    """Rows (added, removed or changed) of the written leaves (`before`, `after`: what a reviewer wrote and reads)
    that differ where it matters: each written leaf that differs and is, holds or lies below a normalized leaf
    that differs (`*_meant`), and with it every written leaf that differs and is related to one so shown
    (`kernel_init: orthogonal` -> `{kind: orthogonal, gain: 2}` is three rows, as written). A leaf that differs
    only in its spelling (`kernel: 3` -> `[3, 3]`) is no row."""
    meant = {k for k in before_meant.keys() | after_meant.keys() if before_meant.get(k) != after_meant.get(k)}
    differ = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    # By ancestry (review/keys.py), not pair by pair: a restore map of thousands of entries differs leaf by leaf.
    meant_index = KeyIndex(meant)
    shown = reachable((k for k in differ if meant_index.related(k)), KeyIndex(differ))
    rows = []
    for key in sorted(shown):
        if key not in after:
            rows.append(Change("removed", key, before[key]))
        elif key not in before:
            rows.append(Change("added", key, "", after[key]))
        else:
            rows.append(Change("changed", key, before[key], after[key]))
    return rows


def _unset_container(key: str, side: dict[str, str], other_held: Callable[[], set[str]]) -> bool:
    """`key` is null or an empty list on one side and a mapping or list on the other (`train.ema: null` ->
    `{decay: ...}`, `checkpoint.restore: []` -> one entry): its leaves are the addition (or removal); the null is
    no row of its own. `other_held`: the keys that hold one of the other side's leaves (`held_by`)."""
    return side[key] in ("null", "[]") and key in other_held()
