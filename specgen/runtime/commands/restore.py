"""Restore maps and restore plans: fine-tuning from checkpoints that someone else wrote.

A plan says, before anything is assigned, where every target variable comes from:
`restored` (checkpoint and key), `initialized` (left to its initializer), `mismatched`
(shape or dtype differ), `missing` (an explicit `{from, to}` rename whose key is absent)
or `conflict` (two keys of one checkpoint land on the same variable), and lists the
checkpoint keys that nothing used. A source is a TensorFlow checkpoint or a Keras weight
file (keras_weights.py: `<layer>/<weight>` keys), told apart by suffix and content. Per
source, in spec order: each key goes through the first `map` entry that matches it (no
match keeps the name); `exclude` globs drop target paths; with `ema_to_model`,
`X/ExponentialMovingAverage` (TF1) or `ema/X` (specgen) feeds X instead of the raw key. A
later source overrides an earlier one for the same variable; a `missing` or `conflict` row
stays, since the spec itself is wrong.
"""

from __future__ import annotations

import fnmatch
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tensorflow as tf

from specgen import text
from specgen.diagnostics import Diagnostic, Position, SpecError, did_you_mean
from specgen.ir.resolve import build_ir
from specgen.ir.training import keys
from specgen.ir.training.build import checkpoint_of
from specgen.paths import shown
from specgen.runtime.commands.restore_sources import Entry, list_checkpoint, open_reader, read_source
from specgen.runtime.pruning_state import restore_targets
from specgen.spec import regex
from specgen.spec.io import RenameKey, RenamePattern, RenamePrefix, RestoreSource
from specgen.spec.load import LoadedSpec, load_spec

__all__ = ["Entry", "RestorePlan", "Row", "Unused", "apply_plan", "format_plan", "list_checkpoint", "plan_restore",
           "run_restore_plan", "summary_line"]

Status = Literal["restored", "initialized", "mismatched", "missing", "conflict"]
Targets = dict[str, tuple[tuple[int, ...], str]]
EMA_SUFFIX, EMA_PREFIX = "/ExponentialMovingAverage", keys.ema("")


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


@dataclass(frozen=True)
class Unused:
    """A checkpoint key that restores nothing, and why."""

    source: str
    key: str
    found: Entry
    reason: str


@dataclass
class RestorePlan:
    rows: list[Row]
    unused: list[Unused] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # map entries that name no variable here
    display: str = "<spec>"
    position: Position | None = None

    @property
    def ok(self) -> bool:
        return not self.errors and all(r.status in ("restored", "initialized") for r in self.rows)

    def count(self, status: Status) -> int:
        return sum(r.status == status for r in self.rows)


def _rename(name: str, entries: Sequence[RenameKey | RenamePattern | RenamePrefix]) -> str:
    """The first matching map entry's target for `name`; `name` itself when none matches."""
    for entry in entries:
        if isinstance(entry, RenameKey):
            if name == entry.from_:
                return entry.to
        elif isinstance(entry, RenamePattern):
            try:  # RE2: linear in the key whatever the pattern (spec/regex.py)
                target = regex.rename(entry.pattern, entry.to, name)
            except ValueError as exc:  # only for entries built without validation (model_construct)
                raise ValueError(f"map entry {{pattern: {entry.pattern}, to: {entry.to}}}: {exc}") from None
            if target is not None:
                return target
        elif entry.strip_prefix is None or name.startswith(entry.strip_prefix):
            return (entry.add_prefix or "") + name[len(entry.strip_prefix or ""):]
    return name


def _ema_base(key: str) -> str | None:
    if key.endswith(EMA_SUFFIX):
        return key.removesuffix(EMA_SUFFIX)
    return key.removeprefix(EMA_PREFIX) if key.startswith(EMA_PREFIX) else None


def _shape(shape: tuple[int, ...], dtype: str) -> str:
    return f"{dtype}{text.shape(shape)}"


@dataclass
class _SourcePlan:
    rows: dict[str, Row] = field(default_factory=dict)  # restored or mismatched
    sticky: dict[str, Row] = field(default_factory=dict)  # missing or conflict
    unused: list[Unused] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _why_unused(key: str, entry: Entry, target: str, source: RestoreSource, targets: Targets) -> str:
    if entry.hint:
        return entry.hint
    base = _ema_base(key)
    if base is not None and not source.ema_to_model and _rename(base, source.map) in targets:
        return f"EMA shadow of '{_rename(base, source.map)}'; restored only with ema_to_model: true"
    if target == key:
        return "no variable with this name here"
    return f"maps to '{target}', not a variable here{did_you_mean(target, targets)}"


def _plan_source(label: str, prefix: Path, entries: dict[str, Entry], source: RestoreSource,
                 targets: Targets) -> _SourcePlan:
    out = _SourcePlan()
    candidates: dict[str, list[tuple[str, bool]]] = {}  # target -> (key, is an EMA shadow)

    def unused(key: str, reason: str) -> None:
        out.unused.append(Unused(label, key, entries[key], reason))

    for key in entries:
        base = _ema_base(key) if source.ema_to_model else None
        target = _rename(key if base is None else base, source.map)
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
        notes = ["EMA shadow (ema_to_model)"] if emas else []
        notes += [n for n, bad in (("shape differs", entry.shape != shape), ("dtype differs", entry.dtype != dtype)) if bad]
        status: Status = "mismatched" if (entry.shape, entry.dtype) != (shape, dtype) else "restored"
        out.rows[target] = Row(target, status, shape, dtype, label, key, entry, "; ".join(notes), prefix)
    for rename in (e for e in source.map if isinstance(e, RenameKey)):
        present = rename.from_ in entries or (source.ema_to_model and any(_ema_base(k) == rename.from_ for k in entries))
        entry = f"{label}: map entry {{from: {rename.from_}, to: {rename.to}}}"
        if rename.to not in targets:
            out.errors.append(f"{entry}: '{rename.to}' is not a variable here{did_you_mean(rename.to, targets)}")
        elif present and _rename(rename.from_, source.map) != rename.to:
            out.errors.append(f"{entry} never applies: an earlier map entry matches '{rename.from_}' first")
        elif not present and not any(fnmatch.fnmatchcase(rename.to, p) for p in source.exclude):
            shape, dtype = targets[rename.to]
            out.sticky.setdefault(rename.to, Row(rename.to, "missing", shape, dtype, label, rename.from_, note=(
                f"no key '{rename.from_}' in the checkpoint{did_you_mean(rename.from_, entries)}")))
    return out


def _source_error(loaded: LoadedSpec, index: int | None, path: Path, message: str) -> SpecError:
    if index is None:
        return SpecError([Diagnostic(shown(path), None, message)])
    return SpecError([loaded.diagnostic(("checkpoint", "restore", index, "from"), f"checkpoint.restore[{index}]: {message}")])


def plan_restore(loaded: LoadedSpec, targets: Targets, sources: list[tuple[Path, RestoreSource]] | None = None
                 ) -> RestorePlan:
    """Where each target variable comes from; sources default to the spec's `checkpoint.restore`."""
    spec_sources = sources is None
    if sources is None:
        sources = [(r.path, r.source) for r in checkpoint_of(loaded).restore]
    final: dict[str, Row] = {}
    sticky: dict[str, Row] = {}
    excluded: dict[str, str] = {}
    plan = RestorePlan([], display=loaded.display,
                       position=loaded.position("checkpoint", "restore") if spec_sources else None)

    def drop(row: Row, reason: str) -> None:
        if row.found is not None:
            plan.unused.append(Unused(row.source, row.key, row.found, reason))

    declared = sum(int(np.prod(shape)) * tf.as_dtype(dtype).size for shape, dtype in targets.values())
    for i, (path, source) in enumerate(sources):
        try:
            prefix, entries = read_source(path, declared)
            part = _plan_source(source.from_, prefix, entries, source, targets)
        except ValueError as exc:
            raise _source_error(loaded, i if spec_sources else None, path, str(exc)) from None
        plan.unused += part.unused
        plan.errors += part.errors
        for target, row in part.rows.items():
            if target in final:
                drop(final[target], f"superseded by {row.source}:{row.key}")
                row = replace(row, note="; ".join(filter(None, [row.note, f"overrides {final[target].source}"])))
            final[target] = row
        for target, row in part.sticky.items():
            sticky.setdefault(target, row)
        excluded |= {t: f"excluded by '{p}' in {source.from_}" for t, p in part.excluded.items()}
    for path, (shape, dtype) in targets.items():
        if path in sticky and path in final:
            drop(final.pop(path), f"not restored: the row of '{path}' is '{sticky[path].status}'")
        note = excluded.get(path, "no checkpoint key maps here")
        plan.rows.append(sticky.get(path) or final.get(path) or Row(path, "initialized", shape, dtype, note=note))
    return plan


def summary_line(plan: RestorePlan) -> str:
    counts = [f"restored {plan.count('restored')}", f"initialized {plan.count('initialized')}",
              f"unused {len(plan.unused)}", f"mismatched {plan.count('mismatched')}"]
    extra = [(plan.count("missing"), "missing"), (plan.count("conflict"), "conflicts"), (len(plan.errors), "errors")]
    return ", ".join(counts + [f"{name} {n}" for n, name in extra if n])


def _cells(row: Row) -> list[str]:
    source = f"{row.source}:{row.key}" if row.key else ""
    shape = _shape(row.shape, row.dtype)
    if row.status == "mismatched" and row.found is not None:
        shape = f"{shape} here, {_shape(row.found.shape, row.found.dtype)} in the checkpoint"
    return [row.path, row.status, source, shape, row.note]


def format_plan(plan: RestorePlan) -> str:
    """A plain-text table of the plan, then unused keys, errors and the summary line."""
    lines = text.table_lines(["variable", "status", "source (checkpoint:key)", "shape/dtype", "note"],
                             [_cells(row) for row in plan.rows])
    if plan.unused:
        lines += ["", f"unused keys ({len(plan.unused)}):"]
        lines += [f"  {u.source}:{u.key}  {_shape(u.found.shape, u.found.dtype)}  {u.reason}" for u in plan.unused]
    if plan.errors:
        lines += ["", "errors:"] + [f"  {e}" for e in plan.errors]
    return "\n".join([*lines, "", summary_line(plan)])


def _read_restored(plan: RestorePlan, variables: dict[str, tf.Variable], stack: ExitStack
                   ) -> tuple[dict[str, np.ndarray], list[str]]:
    """Every restored row's value, checked against its variable; and the problems found."""
    readers: dict[Path, Any] = {}
    declared = sum(v.shape.num_elements() * v.dtype.size for v in variables.values())  # bounds a .keras' inflation
    values: dict[str, np.ndarray] = {}
    problems: list[str] = []
    for row in (r for r in plan.rows if r.status == "restored"):
        assert row.prefix is not None and row.found is not None
        if (var := variables.get(row.path)) is None:
            problems.append(f"'{row.path}' is not among the variables to restore into")
            continue
        try:
            if row.prefix not in readers:
                readers[row.prefix] = open_reader(row.prefix, stack, declared)
            value = np.asarray(readers[row.prefix].get_tensor(row.found.raw_key))
        except (tf.errors.OpError, ValueError, IndexError) as exc:  # IndexError: a truncated data file
            problems.append(f"cannot read '{row.key}' from {row.source}: {str(exc).splitlines()[0]}")
            continue
        if value.shape != tuple(var.shape) or tf.as_dtype(value.dtype) != var.dtype:
            problems.append(f"'{row.path}' is {_shape(value.shape, tf.as_dtype(value.dtype).name)} in {row.source} "
                            f"but {_shape(tuple(var.shape), var.dtype.name)} here")
        values[row.path] = value
    return values, problems


def refuse_problems(plan: RestorePlan) -> None:
    """A SpecError when the plan cannot apply (`specgen train` checks this before it writes anything)."""
    if not plan.ok:  # the table goes to stderr as it is; diagnostics are one line each
        print(format_plan(plan), file=sys.stderr)
        raise SpecError([Diagnostic(plan.display, plan.position, f"the restore plan above has problems "
                                    f"({summary_line(plan)}); nothing was restored")])


def apply_plan(plan: RestorePlan, variables: dict[str, tf.Variable]) -> None:
    """Read and check every restored value, then assign them all; assign nothing when anything is wrong."""
    refuse_problems(plan)
    with ExitStack() as stack:  # Keras files stay open while their values are read, then close
        values, problems = _read_restored(plan, variables, stack)
    if problems:
        raise SpecError([Diagnostic(plan.display, plan.position, "cannot restore: " + "; ".join(problems)
                                    + ". Nothing was restored.")])
    for path, value in values.items():
        variables[path].assign(value)


def run_restore_plan(spec_path: Path, checkpoint: Path | None) -> int:
    """`specgen restore-plan SPEC [--from CKPT]`: print the plan for the model variables (and pruning masks);
    1 when it cannot apply."""
    loaded = load_spec(spec_path)
    ir = build_ir(loaded)
    targets = restore_targets(ir)
    sources = None
    if checkpoint is not None:
        sources = [(checkpoint, RestoreSource.model_construct(from_=str(checkpoint)))]
    elif not checkpoint_of(loaded).restore:
        raise SpecError([Diagnostic(loaded.display, None, "nothing to restore from: the spec has no "
                                    "'checkpoint.restore' section; pass --from CHECKPOINT")])
    plan = plan_restore(loaded, targets, sources)
    print(format_plan(plan))
    return 0 if plan.ok else 1
