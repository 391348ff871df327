"""The rules of a restore plan over key lists alone: renames, EMA shadows, exclusions, conflicts (no TensorFlow).

`specgen restore-plan`, `train` and `export` (runtime/commands/restore.py) run these rules on the keys of a real
checkpoint; `specgen diff` (specgen/review/) runs the same rules on the keys a checkpoint of the old spec would
hold, so "does last month's checkpoint restore into this change" is answered by the plan's own logic, without
TensorFlow and without a checkpoint on disk.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from specgen import text
from specgen.diagnostics import Position, did_you_mean
from specgen.ir.training import keys
from specgen.kinds.features import accumulate, precision
from specgen.kinds.features.ema import shadow
from specgen.spec import regex
from specgen.spec.io import RenameKey, RenamePattern, RenamePrefix, RestoreSource

if TYPE_CHECKING:
    from specgen.ir.model import ModelIR


@dataclass(frozen=True)
class Entry:
    """One checkpoint tensor: its key as stored (an HDF5 dataset path in a Keras file), shape and dtype name."""

    raw_key: str
    shape: tuple[int, ...]
    dtype: str
    hint: str = ""  # what the key stands for when its name cannot say (a Keras variable by index)


# `copied`: a target network's variable that no key restores: the run copies its online variable into it after the
# restore (runtime/lib/target_networks.py after_restore), so its initializer never reaches a step.
Status = Literal["restored", "copied", "initialized", "mismatched", "missing", "conflict"]
Targets = dict[str, tuple[tuple[int, ...], str]]
EMA_SUFFIX, EMA_PREFIX = "/ExponentialMovingAverage", shadow("")


@dataclass(frozen=True)
class Row:
    """Where one target variable's value comes from."""

    path: str
    status: Status
    shape: tuple[int, ...]
    dtype: str
    source: str = ""  # the checkpoint as the spec (or --from) names it
    key: str = ""
    found: Entry | None = None  # the checkpoint's tensor, for restored and mismatched rows
    note: str = ""
    prefix: Path | None = None  # the checkpoint prefix (or Keras weight file) apply_plan reads
    entry: int | None = None  # the `checkpoint.restore` entry a restored row comes from (its index)


@dataclass(frozen=True)
class Unused:
    """A checkpoint key that restores nothing, and why."""

    source: str
    key: str
    found: Entry
    reason: str
    prefix: Path | None = None  # the file it is in (Row.prefix): entries reading one file share its keys


@dataclass
class RestorePlan:
    rows: list[Row]
    unused: list[Unused] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # map entries that name no variable here
    display: str = "<spec>"
    position: Position | None = None
    excluded: set[str] = field(default_factory=set)  # initialized because an entry's `exclude` names them
    read: list[tuple[str, Path]] = field(default_factory=list)  # each entry's `from` and the file it resolved to

    @property
    def ok(self) -> bool:
        return not self.errors and all(r.status in ("restored", "copied", "initialized") for r in self.rows)

    def count(self, status: Status) -> int:
        return sum(r.status == status for r in self.rows)


MapEntry = RenameKey | RenamePattern | RenamePrefix


def rename(name: str, entries: Sequence[MapEntry]) -> str:
    """The first matching map entry's target for `name`; `name` itself when none matches."""
    return next((target for entry in entries if (target := renamed(name, entry)) is not None), name)


def renamed(name: str, entry: MapEntry) -> str | None:
    """What one map entry makes of `name`; None when it does not match it."""
    if isinstance(entry, RenameKey):
        return entry.to if name == entry.from_ else None
    if isinstance(entry, RenamePattern):
        try:  # RE2: linear in the key whatever the pattern (spec/regex.py)
            return regex.rename(entry.pattern, entry.to, name)
        except ValueError as exc:  # only for entries built without validation (model_construct)
            raise ValueError(f"map entry {entry_text(entry)}: {exc}") from None
    if entry.strip_prefix is None or name.startswith(entry.strip_prefix):
        return (entry.add_prefix or "") + name[len(entry.strip_prefix or ""):]
    return None


def entry_text(entry: MapEntry) -> str:
    """A map entry as the spec writes it, for messages."""
    if isinstance(entry, RenameKey):
        return f"{{from: {entry.from_}, to: {entry.to}}}"
    if isinstance(entry, RenamePattern):
        return f"{{pattern: {entry.pattern}, to: {entry.to}}}"
    parts = [f"{k}: {v}" for k, v in (("strip_prefix", entry.strip_prefix), ("add_prefix", entry.add_prefix)) if v]
    return "{" + ", ".join(parts) + "}"


def ema_base(key: str) -> str | None:
    if key.endswith(EMA_SUFFIX):
        return key.removesuffix(EMA_SUFFIX)
    return key.removeprefix(EMA_PREFIX) if key.startswith(EMA_PREFIX) else None


def shape_text(shape: tuple[int, ...], dtype: str) -> str:
    return f"{dtype}{text.shape(shape)}"


# Stored dtype -> the variable dtypes it converts to without rounding, as Keras' load_weights casts a float16 or
# bfloat16 file into a float32 model: every value of the narrower float is one of the wider (bfloat16 is float32's
# top 16 bits). Anything else (float64 into float32 would round; integers are no weights) stays a mismatch.
EXACT_WIDENING = {"float16": ("float32", "float64"), "bfloat16": ("float32", "float64"), "float32": ("float64",)}


def widens(stored: str, variable: str) -> bool:
    """Whether a value stored as `stored` converts into a `variable` dtype exactly (EXACT_WIDENING)."""
    return variable in EXACT_WIDENING.get(stored, ())


def dtype_note(stored: str, variable: str) -> str:
    """The plan's note for a stored dtype other than the variable's: the exact cast it makes, or why it refuses."""
    if widens(stored, variable):
        return f"{stored} -> {variable}, exact"
    return (f"dtype differs: {stored} -> {variable} {'would round' if stored.startswith('float') else 'is no exact cast'}"
            f"; only float16 and bfloat16 widen into float32 exactly: convert the weights to {variable} first")


@dataclass
class SourcePlan:
    rows: dict[str, Row] = field(default_factory=dict)  # restored or mismatched
    sticky: dict[str, Row] = field(default_factory=dict)  # missing or conflict
    unused: list[Unused] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lacking: list[str] = field(default_factory=list)  # a strict source: the variables it has no key for


# The checkpoint keys of training state (docs/collections.md, "Variable names"), which a restore never sets
# (mixed_float16's loss scale among them: `loss_scale/scale`, ...).
LOSS_SCALE = precision.KEYS[0].split("/")[0]
TRAINING_STATE = tuple(f"{root}/" for root in (keys.OPTIMIZERS, accumulate.ROOT, keys.METRICS, keys.PRUNING,
                                               LOSS_SCALE))


def _training_state(key: str) -> bool:
    return key == keys.STEP or key.startswith(TRAINING_STATE)


def _why_unused(key: str, entry: Entry, target: str, source: RestoreSource, targets: Targets) -> str:
    if entry.hint:
        return entry.hint
    base = ema_base(key)
    if base is not None and not source.ema_to_model and rename(base, source.map) in targets:
        return f"EMA shadow of '{rename(base, source.map)}'; restored only with ema_to_model: true"
    if target == key and key.startswith(f"{keys.PRUNING}/"):
        # Masks are the one training state a fine-tuning restore does set, into a spec that prunes (docs/pruning.md).
        weight = key.removeprefix(f"{keys.PRUNING}/")
        pruned = any(t.startswith(f"{keys.PRUNING}/") for t in targets)
        return (f"pruning mask of '{weight}': restored only into a spec that prunes that weight, and this one "
                f"{'does not prune it' if pruned else 'has no prune section'}")
    if target == key and _training_state(key):
        return "training state (the step, an optimizer's slots and counters, accumulators): a fine-tuning " \
               "restore sets model variables (and a pruning spec's masks) only; --resume continues a run with all of it"
    if target == key:
        return "no variable with this name here"
    return f"maps to '{target}', not a variable here{did_you_mean(target, targets)}"


RAW_WEIGHTS = "raw weights: the checkpoint holds no EMA shadows (ema_to_model)"


def plan_source(label: str, prefix: Path, entries: dict[str, Entry], source: RestoreSource,
                 targets: Targets) -> SourcePlan:
    out = SourcePlan()
    candidates: dict[str, list[tuple[str, bool]]] = {}  # target -> (key, is an EMA shadow)

    def unused(key: str, reason: str) -> None:
        out.unused.append(Unused(label, key, entries[key], reason, prefix))

    if source.ema_to_model:
        out.errors += _base_name_errors(label, entries, source)
    # ema_to_model on a checkpoint with no shadow at all (a run without train.ema): every variable falls back to its
    # raw weights, as a batch norm's statistics always do; said on each row, else nothing would show it.
    unshadowed = source.ema_to_model and not any(ema_base(key) is not None for key in entries)
    for key in entries:
        base = ema_base(key) if source.ema_to_model else None
        target = rename(key if base is None else base, source.map)
        excluded = next((p for p in source.exclude if fnmatch.fnmatchcase(target, p)), None)
        if target not in targets:
            unused(key, _why_unused(key, entries[key], target, source, targets))
        elif excluded is not None:
            out.excluded[target] = excluded
            unused(key, f"'{target}' is excluded by '{excluded}'")
        else:
            candidates.setdefault(target, []).append((key, base is not None))
    for target, found in candidates.items():
        shape, dtype = targets[target]
        emas = [k for k, ema in found if ema]
        pick = emas or [k for k, _ in found]
        if len(pick) > 1:
            out.sticky[target] = Row(target, "conflict", shape, dtype, label, pick[0],
                                     note=f"keys {', '.join(repr(k) for k in pick)} all map here")
            continue
        key, entry = pick[0], entries[pick[0]]
        for other in (k for k, _ in found if k != key):
            unused(other, f"superseded by the EMA shadow '{key}' (ema_to_model)")
        notes = ["EMA shadow (ema_to_model)"] if emas else [RAW_WEIGHTS] if unshadowed else []
        notes += ["shape differs"] if entry.shape != shape else []
        notes += [dtype_note(entry.dtype, dtype)] if entry.dtype != dtype else []
        fits = entry.shape == shape and (entry.dtype == dtype or widens(entry.dtype, dtype))
        status: Status = "restored" if fits else "mismatched"
        out.rows[target] = Row(target, status, shape, dtype, label, key, entry, "; ".join(notes), prefix)
    for named in (e for e in source.map if isinstance(e, RenameKey)):
        present = named.from_ in entries or (source.ema_to_model and any(ema_base(k) == named.from_ for k in entries))
        described = f"{label}: map entry {{from: {named.from_}, to: {named.to}}}"
        if named.to not in targets:
            out.errors.append(f"{described}: '{named.to}' is not a variable here{did_you_mean(named.to, targets)}")
        elif present and rename(named.from_, source.map) != named.to:
            out.errors.append(f"{described} never applies: an earlier map entry matches '{named.from_}' first")
        elif not present and not any(fnmatch.fnmatchcase(named.to, p) for p in source.exclude):
            shape, dtype = targets[named.to]
            out.sticky.setdefault(named.to, Row(named.to, "missing", shape, dtype, label, named.from_, note=(
                f"no key '{named.from_}' in the checkpoint{did_you_mean(named.from_, entries)}")))
    if source.strict:
        _strict(label, source, targets, out)
    return out


def _base_name_errors(label: str, entries: dict[str, Entry], source: RestoreSource) -> list[str]:
    """Under ema_to_model the map renames each EMA shadow by its base name (the shadow of X, under ema/, is read
    as X: `plan_source`), so an entry that matches a shadow's own key and none of the names the map sees never
    applies: refused, never a weight left silently at its initializer (an explicit entry reads as "this key goes
    there")."""
    seen = [ema_base(key) or key for key in entries]
    shadows = [key for key in entries if ema_base(key) is not None]
    errors = []
    for entry in source.map:
        hit = next((key for key in shadows if renamed(key, entry) is not None), None)
        if hit is not None and not any(renamed(name, entry) is not None for name in seen):
            base = ema_base(hit)
            errors.append(f"{label}: map entry {entry_text(entry)} never applies: with ema_to_model the map sees each "
                          f"EMA shadow by its base name ('{base}' for '{hit}'); write the entry for '{base}'")
    return errors


MAX_LISTED = 5  # variables a strict source's error names; the rest are counted


def _strict(label: str, source: RestoreSource, targets: Targets, out: SourcePlan) -> None:
    """A strict source (`strict: true`, what `specgen import keras` writes) has a key for every model variable its
    `exclude` does not name: one it lacks is an error, never a variable left at its random initial value. Pruning
    masks are training state, left to their own rule (all ones when no key maps to them)."""
    covered = out.rows.keys() | out.sticky.keys()
    out.lacking = [path for path in targets if path not in covered and not path.startswith(keys.mask(""))
                   and not any(fnmatch.fnmatchcase(path, p) for p in source.exclude)]
    if out.lacking:
        more = f" and {len(out.lacking) - MAX_LISTED} more" if len(out.lacking) > MAX_LISTED else ""
        named = ", ".join(f"'{p}'" for p in out.lacking[:MAX_LISTED])
        out.errors.append(f"{label} (strict): no key for {len(out.lacking)} of the model's variables ({named}{more}); "
                          "restore them from it, or name them in this entry's exclude to keep their initializers")


def combine(parts: Sequence[tuple[RestoreSource, SourcePlan]], targets: Targets, plan: RestorePlan) -> RestorePlan:
    """The sources' plans, in spec order, as one: a later source overrides an earlier one for the same variable
    (the earlier key becomes unused); a `missing` or `conflict` row stays whatever a later source says, since the
    spec itself is wrong; a variable no source restores is `initialized`, with why (excluded, a strict source).
    A file's key is unused when no entry restores it, listed once (`_unused_once`)."""
    final: dict[str, tuple[int, Row]] = {}  # variable -> (the entry's index, its row)
    sticky: dict[str, Row] = {}
    excluded: dict[str, str] = {}
    strict: dict[str, str] = {}  # variable -> the strict source that lacks it
    unused: list[tuple[int, Unused]] = []  # with the index of the entry that left it

    def drop(index: int, row: Row, reason: str) -> None:
        if row.found is not None:
            unused.append((index, Unused(row.source, row.key, row.found, reason, row.prefix)))

    for index, (source, part) in enumerate(parts):
        unused.extend((index, u) for u in part.unused)
        plan.errors += part.errors
        for target, row in part.rows.items():
            if target in final:
                drop(*final[target], f"superseded by {row.source}:{row.key}")
                row = replace(row, note="; ".join(filter(None, [row.note, f"overrides {final[target][1].source}"])))
            final[target] = (index, replace(row, entry=index))
        for target, row in part.sticky.items():
            sticky.setdefault(target, row)
        excluded |= {t: f"excluded by '{p}' in {source.from_}" for t, p in part.excluded.items()}
        strict.update(dict.fromkeys(part.lacking, f"strict: {source.from_} has no key for it"))
    for weight, (shape, dtype) in targets.items():
        if weight in sticky and weight in final:
            drop(*final.pop(weight), f"not restored: the row of '{weight}' is '{sticky[weight].status}'")
        chosen = sticky.get(weight) or (final[weight][1] if weight in final else None)
        if chosen is None:
            if weight not in strict and weight in excluded:
                plan.excluded.add(weight)
            chosen = Row(weight, "initialized", shape, dtype,
                         note=strict.get(weight) or excluded.get(weight, "no checkpoint key maps here"))
        plan.rows.append(chosen)
    plan.unused += _unused_once(unused, plan.rows)
    return plan


def _unused_once(found: Sequence[tuple[int, Unused]], rows: Sequence[Row]) -> list[Unused]:
    """The keys no entry restores, once per file (two entries may read one file: each leaves its own keys, and may
    restore a key the other left): a key a row takes is not unused. Where the entries that left a key give
    different reasons, each is said with the entries' places in `checkpoint.restore`."""
    taken = {(r.prefix, r.key) for r in rows if r.found is not None}
    first: dict[tuple[Path | None, str], Unused] = {}
    reasons: dict[tuple[Path | None, str], dict[str, list[int]]] = {}
    for index, item in found:
        if (at := (item.prefix, item.key)) not in taken:
            first.setdefault(at, item)
            reasons.setdefault(at, {}).setdefault(item.reason, []).append(index)
    return [replace(item, reason=_reasons(reasons[at])) for at, item in first.items()]


def _reasons(said: dict[str, list[int]]) -> str:
    if len(said) == 1:
        return next(iter(said))
    return ". ".join(f"{', '.join(f'restore[{i}]' for i in indexes)}: {reason}" for reason, indexes in said.items())


def target_copies(ir: ModelIR) -> dict[str, str]:
    """Target network variable -> the online variable it copies after a fine-tuning restore (docs/targets.md):
    what the generated trainer copies when it is built, so none for a spec that cannot train (no trainer)."""
    training = ir.training
    if training is None or not training.can_train:
        return {}
    return {target: online for entry in training.targets for online, target in entry.pairs}


def with_copies(plan: RestorePlan, copies: dict[str, str]) -> RestorePlan:
    """The plan with each target network variable (`copies`: target path -> online path) that no key restores
    marked `copied`: the run copies the online variable into it after the restore (the online value as restored,
    or as initialized), so its own initializer is never used. A target the restore fills itself stays `restored`."""
    plan.rows = [replace(row, status="copied", note=f"copied from '{copies[row.path]}' after the restore")
                 if row.status == "initialized" and row.path in copies else row for row in plan.rows]
    plan.excluded -= set(copies)
    return plan


def summary_line(plan: RestorePlan) -> str:
    copied = [f"copied {plan.count('copied')}"] if plan.count("copied") else []
    counts = [f"restored {plan.count('restored')}", *copied, f"initialized {plan.count('initialized')}",
              f"unused {len(plan.unused)}", f"mismatched {plan.count('mismatched')}"]
    extra = [(plan.count("missing"), "missing"), (plan.count("conflict"), "conflicts"), (len(plan.errors), "errors")]
    return ", ".join(counts + [f"{name} {n}" for n, name in extra if n])
