"""The `checkpoint` section of `specgen diff`: a checkpoint of OLD restored into NEW, by NEW's own restore plan.

NEW's `checkpoint.restore` entries are applied as `specgen restore-plan` applies them (ir/restore_rules.py:
`plan_source` per entry, then `combine`: map, exclude, strict, ema_to_model, later entries overriding earlier
ones, conflicts and missing keys sticking), each entry reading every key a checkpoint of OLD holds (`saved_keys`,
ir/restore_targets.py: the list `--resume` checks real checkpoints against; model variables, masks, EMA shadows,
optimizer slots, the step), so a map that names an EMA shadow or a slot restores where the real plan does; into
NEW's restore targets, as restore-plan plans (ir/restore_targets.py); a NEW without entries restores by name, as
`restore-plan --from`. So the section breaks where the real plan would refuse (a conflict, a missing key, a plan
error) and where OLD's weights would be lost (mismatched, left to an initializer, restored into a layer that
moved: crossed, or a layer that shared another's weights and now has its own). A variable an entry's `exclude`
names is the spec's choice. A row left to its initializer, an unused key or a `missing` key that OLD's own plan
(OLD's checkpoint into OLD, by OLD's entries) has alike is no change: the entries' choices about another checkpoint
(a Keras file's names, another model's run, an `exclude`) are not the change under review, and restore-plan on that
checkpoint judges them. A conflict, a mismatch or a plan error stays a break although OLD's own plan has it, marked
"(as in OLD's own plan)": it is made of keys OLD's checkpoints hold (or of the spec alone), so restore-plan refuses
a checkpoint of OLD by these entries, and `specgen train` would too. So a spec diffed with itself is empty unless
its own restore of its checkpoints is refused. `unused weights` counts OLD's restore targets that restore nothing,
where restore-plan's `unused` counts every key (the step, slots, shadows). No TensorFlow is imported.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import replace

from specgen import text
from specgen.ir.model import ModelIR
from specgen.ir.restore_rules import (
    Entry,
    RestorePlan,
    Row,
    Unused,
    combine,
    ema_base,
    plan_source,
    summary_line,
    target_copies,
    with_copies,
)
from specgen.ir.restore_targets import restore_targets, saved_keys
from specgen.review.renames import Renames
from specgen.review.sections import Change, Section
from specgen.spec.io import RestoreSource
from specgen.spec.model import Spec

OLD_LABEL = "OLD"  # the source a NEW without restore entries reads: OLD's checkpoint, by name
PLACEHOLDER = "OLD_CHECKPOINT"  # what `--map` and the lines here write for a `from` the user fills in
# Refusals made of keys OLD's checkpoints hold: a break even where OLD's own plan has them (restore-plan refuses a
# checkpoint of OLD by these entries). A `missing` key OLD's own plan lacks alike names another checkpoint's key.
KEPT = ("mismatched", "conflict")
SHARED = " (as in OLD's own plan)"  # a break that is not this change's: OLD's own restore is refused alike


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


def old_checkpoint(old: ModelIR) -> dict[str, Entry]:
    """Every key a checkpoint of OLD holds, sorted as restore-plan reads a real one (runtime/commands/
    restore_sources.py), so that a conflict names its keys in the real plan's order."""
    return {key: Entry(key, shape, dtype) for key, (shape, dtype) in sorted(saved_keys(old).items())}


def plan(old: ModelIR, new: ModelIR, sources: Sequence[RestoreSource]) -> RestorePlan:
    """restore-plan's plan over the keys a checkpoint of OLD holds, for NEW's targets: a target network variable no
    key restores is `copied` from its online variable after the restore, as the run does (restore_rules.with_copies)."""
    entries = old_checkpoint(old)
    targets = restore_targets(new)
    parts = [(s, plan_source(str(s.from_), None, entries, s, targets)) for s in sources]  # type: ignore[arg-type]
    return with_copies(combine(parts, targets, RestorePlan([])), target_copies(new))


def checkpoint(old: ModelIR, new: ModelIR, renames: Renames, sources: Sequence[RestoreSource],
               own: Sequence[RestoreSource]) -> Section:
    """`sources`: NEW's restore entries (restore_sources); `own`: OLD's, for the plan a row must differ from."""
    section = Section("checkpoint")
    found = _weights_only(old, plan(old, new, sources))
    before = plan(old, old, own)  # OLD's checkpoint into OLD by OLD's entries: what did not change
    alike = {_verdict(r) for r in before.rows}
    rows = sorted((r for r in found.rows if r.status in KEPT or _verdict(r) not in alike), key=lambda r: r.path)
    _refused(section, rows, alike)
    unshared = _unshared(old, new)
    _initialized(section, old, renames, [r for r in rows if r.status == "initialized"], found, sources, unshared)
    section.breaks += _unshare_breaks(old, new, sources, found, unshared)
    for path, moved in _crossed(old, renames, found.rows):  # alike in OLD's own plan, but the layer moved
        section.changes.append(Change("crossed", path, "", f"OLD's '{path}' is '{moved}' here: needs a map entry"))
        section.breaks.append(f"'{path}' would be restored from OLD's '{path}', which is '{moved}' here (layers "
                              "moved); `specgen diff --map` prints the checkpoint map that restores each layer's own "
                              "weights")
    unused = set(before.unused)
    section.changes += [Change("unused", u.key, text.shape(u.found.shape), u.reason) for u in found.unused
                        if u not in unused]
    for error in found.errors:  # a break, shared or not: restore-plan refuses a checkpoint of OLD by these entries
        section.changes.append(Change("error", "restore plan", "", error))
        section.breaks.append(f"{error}: `specgen restore-plan` refuses it and `specgen train` restores "
                              f"nothing{SHARED if error in before.errors else ''}")
    crossed = sum(c.what == "crossed" for c in section.changes)
    # Only when some are: a checkpoint restored "in full" into the wrong layers must not read as all well.
    # restore-plan's line, but its `unused` counts every key of a real checkpoint (step, slots); this one only OLD's
    # weights and masks, and is labelled so: the counts are compared with restore-plan's by tests/test_diff_restore.
    restored, rest = summary_line(found).replace(", unused ", ", unused weights ", 1).split(", ", 1)
    crossing = f" ({crossed} of them from another layer)" if crossed else ""
    section.summary = f"a checkpoint of OLD restored into NEW: {restored}{crossing}, {rest}{_no_shadows(old, sources)}"
    return section


def _no_shadows(old: ModelIR, sources: Sequence[RestoreSource]) -> str:
    """A note where an entry asks for EMA weights (ema_to_model) and OLD's checkpoints hold no EMA shadow: each
    variable then falls back to its raw weights, as for a batch norm's statistics, and nothing else says so."""
    asking = [i for i, s in enumerate(sources) if s.ema_to_model]
    if not asking or any(ema_base(key) is not None for key in saved_keys(old)):
        return ""
    which = ", ".join(f"checkpoint.restore[{i}]" for i in asking)
    return (f"; note: {which} sets ema_to_model, but OLD's checkpoints hold no EMA shadows (OLD has no train.ema): "
            "the raw weights are restored")


def _refused(section: Section, rows: Iterable[Row], alike: set[tuple[object, ...]]) -> None:
    """The rows restore-plan refuses (mismatched, conflict, missing): a row and a break each, the break marked where
    OLD's own plan refuses alike (not new: the reviewer looks for its cause before this change)."""
    for row in rows:
        shared = SHARED if _verdict(row) in alike else ""
        if row.status == "mismatched" and row.found is not None:
            old_shape, new_shape = text.shape(row.found.shape), text.shape(row.shape)
            section.changes.append(Change("mismatched", row.path, old_shape, new_shape))
            section.breaks.append(f"'{row.path}' is {old_shape} in OLD's checkpoints and {new_shape} here: it cannot "
                                  f"be restored{shared}")
        elif row.status in ("conflict", "missing"):
            section.changes.append(Change(row.status, row.path, "", row.note))
            section.breaks.append(f"'{row.path}' is '{row.status}' in NEW's restore plan ({row.note}): "
                                  f"`specgen restore-plan` refuses it and `specgen train` restores nothing{shared}")


def _initialized(section: Section, old: ModelIR, renames: Renames, rows: list[Row], found: RestorePlan,
                 sources: Sequence[RestoreSource], unshared: dict[str, str]) -> None:
    """A row per variable left to its initializer, with why; a break where OLD had its weights."""
    lost = {renames.variable(p, old) or p for p in restore_targets(old)}  # NEW's share of OLD
    for row in rows:
        excluded = row.note if row.path in found.excluded else _excluded_by(row.path, sources)
        if excluded:  # the spec's own choice: "excluded by 'h1/*' in runs/x", whether or not a key maps here
            section.changes.append(Change("initialized", row.path, "", excluded))
        elif row.path in unshared:
            section.changes.append(Change("initialized", row.path, "", f"OLD's '{unshared[row.path]}' (shared): "
                                          "needs a restore entry"))
        elif candidates := renames.candidates(row.path, old):  # OLD had it, under a name no rule can pick
            layers = " or ".join(repr(c.rsplit("/", 1)[0]) for c in candidates)
            section.changes.append(Change("initialized", row.path, "", f"from OLD's {layers} (ambiguous): needs a "
                                          "map entry"))
            section.breaks.append(_ambiguous(row.path, layers, candidates))
        else:
            had = row.path in lost
            section.changes.append(Change("initialized", row.path, "", "from OLD's weights: needs a map entry"
                                          if had else "new"))
            if had:
                section.breaks.append(_lost(row.path, old))


def _verdict(row: Row) -> tuple[object, ...]:
    """What a row says: a mismatch or a conflict with NEW's shape and dtype and the key's (a mismatch of other shapes
    is another refusal); a row left to its initializer or a missing key without them (an excluded variable that
    changed shape is excluded alike, a key OLD's checkpoints lack is lacking alike)."""
    said = (row.path, row.status, row.source, row.key, row.note)
    return (*said, row.shape, row.dtype, row.found) if row.status in KEPT else said


def _weights_only(old: ModelIR, found: RestorePlan) -> RestorePlan:
    """The plan with only OLD's restore targets among its unused keys (in OLD's variable order): the training state
    a checkpoint also holds restores nothing unless a map names it, and is no row of its own."""
    weights = list(restore_targets(old))
    order = {key: n for n, key in enumerate(weights)}
    unused: list[Unused] = sorted((u for u in found.unused if u.key in order), key=lambda u: order[u.key])
    return replace(found, unused=unused)


def _excluded_by(path: str, sources: Sequence[RestoreSource]) -> str:
    """Why `path` is left to its initializer on purpose: an entry's `exclude` names it. restore_rules records an
    exclusion only where some key maps to the target; a renamed layer excluded in NEW has no key of its name, so
    the globs are tested against the target itself (the same test `strict` makes)."""
    for source in reversed(sources):  # the last entry's reason, as restore_rules.combine keeps it
        glob = next((g for g in source.exclude if fnmatch.fnmatchcase(path, g)), None)
        if glob is not None:
            return f"excluded by '{glob}' in {source.from_}"
    return ""


def _lost(path: str, old: ModelIR) -> str:
    if path in restore_targets(old):
        return (f"'{path}' is in OLD's checkpoints under this name, but NEW's restore maps that key elsewhere: it "
                "would start from its initializer")
    return (f"'{path}' existed in OLD under another name and would start from its initializer; `specgen diff --map` "
            "prints the checkpoint map that restores it")


def _ambiguous(path: str, layers: str, candidates: list[str]) -> str:
    """A variable of a layer that several of OLD's fit equally (renames.Renames.ambiguous): lost as surely as an
    unambiguous rename's, and `--map` prints no entry for it (it guesses none)."""
    entries = " or ".join(f"`{{from: {c}, to: {path}}}`" for c in candidates)
    return (f"'{path}' existed in OLD under another name ({layers}: ambiguous) and would start from its initializer; "
            f"`specgen diff --map` does not guess which: write the map by hand ({entries})")


def _crossed(old: ModelIR, renames: Renames, rows: Iterable[Row]) -> list[tuple[str, str]]:
    """Variables restored by their own name from a layer that moved (`a` and `b` swapped names): (path, where
    OLD's variable of that name is in NEW). A key that a map entry sent here is the spec's own choice."""
    crossed = []
    for row in rows:
        by_name = row.key == row.path or ema_base(row.key) == row.path  # an EMA shadow under ema_to_model too
        moved = renames.variable(row.path, old) if row.status == "restored" and by_name else None
        if moved is not None and moved != row.path:
            crossed.append((row.path, moved))
    return sorted(crossed)


def map_entries(old: ModelIR, new: ModelIR, renames: Renames, declared: list[dict[str, str]],
                sources: Sequence[RestoreSource] = ()) -> list[dict[str, str]]:
    """The `checkpoint.restore[].map` entries that make OLD's checkpoints restore into NEW (exact keys: weights and
    pruning masks), less the keys NEW's spec maps already and the targets it maps a key to (`declared`: a second
    key for one target is a conflict) and the targets its `exclude` names (`sources`: NEW's restore entries; a
    map entry into an excluded target restores nothing)."""
    targets = restore_targets(new)
    mapped = {m.get("from") for m in declared} | {m.get("to") for m in declared if "from" in m}
    found = []
    for key in restore_targets(old):
        to = renames.variable(key, old)
        if (to is not None and to in targets and to != key and not {key, to} & mapped
                and not _excluded_by(to, sources)):
            found.append({"from": key, "to": to})
    return found


def _unshared(old: ModelIR, new: ModelIR) -> dict[str, str]:
    """NEW's variables of a layer that shared another's weights in OLD (`b: {share: a}`) and has its own now:
    NEW path -> OLD's key that layer computed with (`b/kernel` -> `a/kernel`), where shape and dtype agree."""
    before = {n.name: n for n in old.nodes if n.shares is not None}
    found = {}
    for node in (n for n in new.nodes if n.shares is None and n.name in before):
        was = before[node.name].variables
        for name, v in node.variables.items():
            if name in was and (was[name].shape, was[name].dtype) == (v.shape, v.dtype):
                found[v.path] = was[name].path
    return found


def _unshare_breaks(old: ModelIR, new: ModelIR, sources: Sequence[RestoreSource], found: RestorePlan,
                    unshared: dict[str, str]) -> list[str]:
    """One line per un-shared layer left to its initializer. One key restores one variable per restore entry, so
    keeping both `a` and `b` takes an entry of its own per layer that maps `a/*` to `b/*`: offered only where the
    plan with those entries restores each of them from OLD's key and leaves every other row as it was."""
    rows = {r.path: r for r in found.rows}
    lost = {path: key for path, key in unshared.items() if rows[path].status == "initialized"
            and not _excluded_by(path, sources) and path not in found.excluded}
    layers: dict[str, list[str]] = {}
    for path in lost:
        layers.setdefault(path.rsplit("/", 1)[0], []).append(path)
    if not layers:
        return []
    declared = [s for s in sources if str(s.from_) != OLD_LABEL]
    label = str(declared[-1].from_) if declared else PLACEHOLDER
    extras = {layer: [{"from": lost[p], "to": p} for p in paths] for layer, paths in layers.items()}
    trial = {r.path: r for r in plan(old, new, [*sources, *(RestoreSource.model_validate({"from": label, "map": m})
                                                            for m in extras.values())]).rows}
    keeps = all(trial[p].status == "restored" and trial[p].key == k for p, k in lost.items()) and all(
        (trial[p].status, trial[p].key) == (r.status, r.key) for p, r in rows.items() if p not in lost)
    where = "after NEW's restore entries" if declared else f"after a by-name entry {{from: {PLACEHOLDER}}}"
    lines = []
    for layer, paths in layers.items():
        owner = lost[paths[0]].rsplit("/", 1)[0]
        pairs = ", ".join(f"{{from: {lost[p]}, to: {p}}}" for p in paths)
        entry = f"{{from: {label}, map: [{pairs}]}}"
        how = (f"the restore entry {entry} {where} keeps them" if keeps else
               "one key restores one variable per restore entry: map OLD's keys to them in a restore entry of its own")
        lines.append(f"layer '{layer}' used the weights of '{owner}' in OLD (share: {owner}) and has its own here: "
                     f"{', '.join(repr(p) for p in paths)} would start from their initializer; {how}")
    return lines
