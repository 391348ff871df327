"""Restore maps and restore plans: fine-tuning from checkpoints that someone else wrote.

A plan says, before anything is assigned, where every target variable comes from:
`restored` (checkpoint and key; a float16 or bfloat16 value widens exactly into a float32
variable, as Keras' load_weights does), `copied` (a target network's variable, copied from its
online variable after the restore), `initialized` (left to its initializer), `mismatched`
(shape differs, or a dtype that does not widen exactly), `missing` (an explicit `{from, to}` rename whose key is absent)
or `conflict` (two keys of one checkpoint land on the same variable), and lists the
checkpoint keys that nothing used. A source is a TensorFlow checkpoint or a Keras weight
file (keras_weights.py: `<layer>/<weight>` keys), told apart by suffix and content. Per
source, in spec order: each key goes through the first `map` entry that matches it (no
match keeps the name); `exclude` globs drop target paths; with `ema_to_model`,
`X/ExponentialMovingAverage` (TF1) or `ema/X` (specgen) feeds X instead of the raw key, and the
map sees it as X (an entry matching only `ema/X` is an error). A later source overrides an earlier
one for the same variable; a `missing` or `conflict` row stays, since the spec itself is wrong. A
key is unused when no source restores it, listed once per file. A `strict` source lacking a key for a model variable is
an error of the plan (ir/restore_rules.py), never a variable left at its random initial value.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from specgen import text
from specgen.diagnostics import Diagnostic, SpecError
from specgen.ir.resolve import build_ir
from specgen.ir.restore_rules import (
    Entry,
    RestorePlan,
    Row,
    Targets,
    Unused,
    combine,
    plan_source,
    summary_line,
    target_copies,
    widens,
    with_copies,
)
from specgen.ir.restore_rules import shape_text as _shape
from specgen.ir.restore_targets import restore_targets
from specgen.ir.training.build import checkpoint_of
from specgen.paths import shown
from specgen.runtime.commands.restore_sources import list_checkpoint, open_reader, read_source, require_restorable
from specgen.spec.io import RestoreSource
from specgen.spec.load import LoadedSpec, load_spec

__all__ = ["Entry", "RestorePlan", "Row", "Unused", "apply_plan", "format_plan", "list_checkpoint", "plan_restore",
           "read_plan", "run_restore_plan", "summary_line"]

def _source_error(loaded: LoadedSpec, index: int | None, path: Path, message: str) -> SpecError:
    if index is None:
        return SpecError([Diagnostic(shown(path), None, message)])
    return SpecError([loaded.diagnostic(("checkpoint", "restore", index, "from"), f"checkpoint.restore[{index}]: {message}")])


def plan_restore(loaded: LoadedSpec, targets: Targets, sources: list[tuple[Path, RestoreSource]] | None = None,
                 copies: dict[str, str] | None = None) -> RestorePlan:
    """Where each target variable comes from; sources default to the spec's `checkpoint.restore`. `copies`:
    target network variable -> its online variable (restore_rules.target_copies), which the run copies after the
    restore where no key restores the copy itself."""
    spec_sources = sources is None
    if sources is None:
        sources = [(r.path, r.source) for r in checkpoint_of(loaded).restore]
    declared = sum(int(np.prod(shape)) * tf.as_dtype(dtype).size for shape, dtype in targets.values())
    parts, read = [], []
    for i, (path, source) in enumerate(sources):
        try:
            prefix, entries = read_source(path, declared)
            read.append((source.from_, prefix))
            part = plan_source(source.from_, prefix, entries, source, targets)
            # the bytes of what it restores are there (the index's byte ranges against the shards' sizes)
            require_restorable(prefix, {r.found.raw_key for r in part.rows.values() if r.status == "restored"
                                        and r.found is not None})
            parts.append((source, part))
        except ValueError as exc:
            raise _source_error(loaded, i if spec_sources else None, path, str(exc)) from None
    # the sources' plans joined by the rules `specgen diff` runs too (ir/restore_rules.py)
    # Where the plan's problems are reported: `checkpoint.restore` in the spec, or the `--set` that wrote it.
    where = loaded.diagnostic(("checkpoint", "restore"), "")
    plan = combine(parts, targets, RestorePlan([], display=where.path if spec_sources else loaded.display,
                                               position=where.position if spec_sources else None, read=read))
    return with_copies(plan, copies or {})


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


Expected = dict[str, tuple[tuple[int, ...], str]]  # variable path -> (shape, dtype name) a value must have


def _read_restored(plan: RestorePlan, expected: Expected, stack: ExitStack) -> tuple[dict[str, np.ndarray], list[str]]:
    """Every restored row's value, checked against what its variable holds; and the problems found, one per
    source that cannot be read (its first failure and how many keys it would have given), one per bad value."""
    readers: dict[Path, Any] = {}
    declared = sum(int(np.prod(shape)) * tf.as_dtype(dtype).size for shape, dtype in expected.values())  # bounds a .keras
    values: dict[str, np.ndarray] = {}
    problems: list[str] = []
    failed: dict[Path, list[Any]] = {}  # prefix -> [problem index, keys it failed for]
    for row in (r for r in plan.rows if r.status == "restored"):
        assert row.prefix is not None and row.found is not None
        if (want := expected.get(row.path)) is None:
            problems.append(f"'{row.path}' is not among the variables to restore into")
            continue
        if row.prefix in failed:  # the same reason again for every key: said once, counted
            failed[row.prefix][1] += 1
            continue
        try:
            if row.prefix not in readers:
                readers[row.prefix] = open_reader(row.prefix, stack, declared)
            value = _widened(np.asarray(readers[row.prefix].get_tensor(row.found.raw_key)), want[1])
        except (tf.errors.OpError, ValueError, IndexError) as exc:  # IndexError: a truncated data file
            failed[row.prefix] = [len(problems), 1]
            problems.append(f"cannot read '{row.key}' from {row.source}: {str(exc).splitlines()[0]}")
            continue
        if value.shape != tuple(want[0]) or tf.as_dtype(value.dtype).name != want[1]:
            problems.append(f"'{row.path}' is {_shape(value.shape, tf.as_dtype(value.dtype).name)} in {row.source} "
                            f"but {_shape(tuple(want[0]), want[1])} here")
        values[row.path] = value
    for at, count in failed.values():
        if count > 1:
            problems[at] += f" (and {count - 1} more {'key' if count == 2 else 'keys'} from it)"
    return values, problems


def _widened(value: np.ndarray, dtype: str) -> np.ndarray:
    """A float16 or bfloat16 value as the float32 (or float64) its variable holds: exact (restore_rules.widens),
    what Keras' load_weights does with such a file; any other value as read, for the caller's check."""
    stored = tf.as_dtype(value.dtype).name
    return value.astype(tf.as_dtype(dtype).as_numpy_dtype) if stored != dtype and widens(stored, dtype) else value


def refuse_problems(plan: RestorePlan) -> None:
    """A SpecError when the plan cannot apply (`specgen train` checks this before it writes anything)."""
    if not plan.ok:  # the table goes to stderr as it is; diagnostics are one line each
        print(format_plan(plan), file=sys.stderr)
        raise SpecError([Diagnostic(plan.display, plan.position, f"the restore plan above has problems "
                                    f"({summary_line(plan)}); nothing was restored")])


def read_plan(plan: RestorePlan) -> dict[str, np.ndarray]:
    """Every restored value, read and checked against the plan's own shapes: `specgen train` can read them before
    its first write to the run folder, so that a source that fails only now (changed since the plan) leaves nothing
    behind; `apply_plan(plan, variables, values)` then assigns them."""
    refuse_problems(plan)
    with ExitStack() as stack:  # Keras files stay open while their values are read, then close
        values, problems = _read_restored(plan, {r.path: (r.shape, r.dtype) for r in plan.rows}, stack)
    _refuse_reads(plan, problems)
    return values


def _refuse_reads(plan: RestorePlan, problems: list[str]) -> None:
    if problems:
        raise SpecError([Diagnostic(plan.display, plan.position, "cannot restore: " + "; ".join(problems)
                                    + ". Nothing was restored.")])


def apply_plan(plan: RestorePlan, variables: dict[str, tf.Variable], values: dict[str, np.ndarray] | None = None
               ) -> None:
    """Read and check every restored value (or take those `read_plan` read), then assign them all; assign nothing
    when anything is wrong."""
    refuse_problems(plan)
    expected = {path: (tuple(v.shape), v.dtype.name) for path, v in variables.items()}
    if values is None:
        with ExitStack() as stack:
            values, problems = _read_restored(plan, expected, stack)
    else:
        problems = [f"'{path}' is not among the variables to restore into" if path not in expected else
                    f"'{path}' is {_shape(value.shape, tf.as_dtype(value.dtype).name)} as read but "
                    f"{_shape(*expected[path])} here" for path, value in values.items()
                    if path not in expected or (value.shape, tf.as_dtype(value.dtype).name) != expected[path]]
    _refuse_reads(plan, problems)
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
    plan = plan_restore(loaded, targets, sources, target_copies(ir))
    print(format_plan(plan))
    return 0 if plan.ok else 1
