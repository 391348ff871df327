"""The `checkpoint` section of `specgen diff`: a checkpoint of OLD restored into NEW, by NEW's own restore plan.

NEW's `checkpoint.restore` entries are applied as `specgen restore-plan` applies them (ir/restore_rules.py:
`plan_source` per entry, then `combine`: map, exclude, strict, ema_to_model, later entries overriding earlier
ones, conflicts and missing keys sticking), each entry reading the keys a checkpoint of OLD holds (its model
variables); a NEW without entries restores by name, as `restore-plan --from`. So the section breaks where the
real plan would refuse (a conflict, a missing key, a plan error) and where OLD's weights would be lost
(mismatched, left to an initializer, restored into a layer that moved: crossed). No TensorFlow is imported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from specgen import text
from specgen.ir.model import ModelIR
from specgen.ir.restore_rules import Entry, RestorePlan, Row, combine, plan_source, summary_line
from specgen.review.renames import Renames
from specgen.review.sections import Change, Section
from specgen.spec.io import RestoreSource
from specgen.spec.model import Spec

OLD_LABEL = "OLD"  # the source a NEW without restore entries reads: OLD's checkpoint, by name


def restore_sources(spec: Spec, mapping: Sequence[dict[str, str]] = ()) -> list[RestoreSource]:
    """NEW's restore entries, each one read as a checkpoint of OLD (one by name where it has none), with
    `mapping` (the entries `--map` prints) after each one's own map: where the printed map would go."""
    declared = spec.checkpoint.restore if spec.checkpoint is not None else []
    added = RestoreSource.model_validate({"from": OLD_LABEL, "map": list(mapping)})
    if not declared:
        return [added]
    return [source.model_copy(update={"map": [*source.map, *added.map]}) for source in declared]


def declared_map(spec: Spec) -> list[dict[str, str]]:
    """The `map` entries of NEW's `checkpoint.restore` (all entries, in order): keys `--map` need not print."""
    sources = spec.checkpoint.restore if spec.checkpoint is not None else []
    return [m.model_dump(by_alias=True, exclude_none=True) for source in sources for m in source.map]


def plan(old: ModelIR, new: ModelIR, sources: Sequence[RestoreSource]) -> RestorePlan:
    """restore-plan's plan over the keys of a checkpoint of OLD, for NEW's model variables."""
    entries = {v.path: Entry(v.path, v.shape, v.dtype) for v in old.model_variables}
    targets = {v.path: (v.shape, v.dtype) for v in new.model_variables}
    parts = [(s, plan_source(str(s.from_), None, entries, s, targets)) for s in sources]  # type: ignore[arg-type]
    return combine(parts, targets, RestorePlan([]))


def checkpoint(old: ModelIR, new: ModelIR, renames: Renames, sources: Sequence[RestoreSource]) -> Section:
    section = Section("checkpoint")
    found = plan(old, new, sources)
    lost = {renames.variable(p, old) or p for p in (v.path for v in old.model_variables)}  # NEW's share of OLD
    excluded = found.excluded
    rows = sorted(found.rows, key=lambda r: r.path)
    for row in rows:
        if row.status == "mismatched" and row.found is not None:
            old_shape, new_shape = text.shape(row.found.shape), text.shape(row.shape)
            section.changes.append(Change("mismatched", row.path, old_shape, new_shape))
            section.breaks.append(f"'{row.path}' is {old_shape} in OLD's checkpoints and {new_shape} here: it cannot "
                                  "be restored")
        elif row.status in ("conflict", "missing"):
            section.changes.append(Change(row.status, row.path, "", row.note))
            section.breaks.append(f"'{row.path}' is '{row.status}' in NEW's restore plan ({row.note}): "
                                  "`specgen restore-plan` refuses it and `specgen train` restores nothing")
    for row in (r for r in rows if r.status == "initialized"):
        had = row.path in lost and row.path not in excluded
        section.changes.append(Change("initialized", row.path, "", _why_initialized(row, had, row.path in excluded)))
        if had:
            section.breaks.append(_lost(row.path, old))
    for path, moved in _crossed(old, renames, found.rows):
        section.changes.append(Change("crossed", path, "", f"OLD's '{path}' is '{moved}' here: needs a map entry"))
        section.breaks.append(f"'{path}' would be restored from OLD's '{path}', which is '{moved}' here (layers "
                              "moved); `specgen diff --map` prints the checkpoint map that restores each layer's own "
                              "weights")
    section.changes += [Change("unused", u.key, text.shape(u.found.shape), u.reason) for u in found.unused]
    for error in found.errors:
        section.changes.append(Change("error", "restore plan", "", error))
        section.breaks.append(f"{error}: `specgen restore-plan` refuses it and `specgen train` restores nothing")
    crossed = sum(c.what == "crossed" for c in section.changes)
    # Only when some are: a checkpoint restored "in full" into the wrong layers must not read as all well.
    restored, rest = summary_line(found).split(", ", 1)
    crossing = f" ({crossed} of them from another layer)" if crossed else ""
    section.summary = f"a checkpoint of OLD restored into NEW: {restored}{crossing}, {rest}"
    return section


def _why_initialized(row: Row, had: bool, excluded: bool) -> str:
    if excluded:
        return row.note  # the spec's own choice: "excluded by 'h1/*' in runs/x"
    return "from OLD's weights: needs a map entry" if had else "new"


def _lost(path: str, old: ModelIR) -> str:
    if path in {v.path for v in old.model_variables}:
        return (f"'{path}' is in OLD's checkpoints under this name, but NEW's restore maps that key elsewhere: it "
                "would start from its initializer")
    return (f"'{path}' existed in OLD under another name and would start from its initializer; `specgen diff --map` "
            "prints the checkpoint map that restores it")


def _crossed(old: ModelIR, renames: Renames, rows: Iterable[Row]) -> list[tuple[str, str]]:
    """Variables restored by their own name from a layer that moved (`a` and `b` swapped names): (path, where
    OLD's variable of that name is in NEW). A key that a map entry sent here is the spec's own choice."""
    crossed = []
    for row in rows:
        moved = renames.variable(row.path, old) if row.status == "restored" and row.key == row.path else None
        if moved is not None and moved != row.path:
            crossed.append((row.path, moved))
    return sorted(crossed)


def map_entries(old: ModelIR, new: ModelIR, renames: Renames, declared: list[dict[str, str]]) -> list[dict[str, str]]:
    """The `checkpoint.restore[].map` entries that make OLD's checkpoints restore into NEW (exact keys), less the
    keys NEW's spec maps already (`declared`)."""
    targets = {v.path for v in new.model_variables}
    mapped = {m.get("from") for m in declared}
    found = []
    for v in old.model_variables:
        to = renames.variable(v.path, old)
        if to is not None and to in targets and to != v.path and v.path not in mapped:
            found.append({"from": v.path, "to": to})
    return found
