"""Checkpoints keyed by spec path, written so that a crash never loses a complete one.

Layout of a run's checkpoint folder:

    ckpt-00000100/variables.{index,data-*}  every saved variable under its spec path
                                            (the TF name-based format: tf.train.load_checkpoint reads it)
    ckpt-00000100/data.{index,data-*}       the training data iterator's position
    ckpt-00000100/data-w{i}.{index,data-*}  instead, under multi_worker with file-sharded data: worker i's
                                            position, one per worker (meta.json's `data_workers` says how many)
    ckpt-00000100/meta.json                 step, spec name, save serial, --set overrides, data settings,
                                            and with `targets:` each target variable's online variable
    latest                                  the name of the newest complete checkpoint
    checkpoint                              TensorFlow's state file (relative paths to the kept
                                            ckpt-*/variables prefixes), so tf.train.latest_checkpoint(run)
                                            and tf.train.load_checkpoint(run) work; specgen itself reads `latest`

A checkpoint is written into a temporary folder, fsynced and renamed to a name that is not
taken (an existing checkpoint is never replaced or removed to make room), and only then is
`latest` replaced (write_atomic); after pruning, `checkpoint` is rewritten (write_atomic) to
name the kept ones. Pruning renames a folder out of the `ckpt-*` names before
deleting it, and goes by save order (meta.json's serial), never by name: a run resumed from an
older checkpoint saves lower step numbers than the ones it abandoned.

With file-sharded data every worker's iterator differs and each saves its own (runtime/placement/positions.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from specgen.atomic import fsync_folder, write_atomic
from specgen.diagnostics import Diagnostic, SpecError
from specgen.paths import shown
from specgen.runtime.disk import WRITE_ERRORS, os_error
from specgen.runtime.integrity import (
    META,
    READ_ERRORS,
    Saved,
    Unreadable,
    describe,
    reader_failure,
    saved,
    unreadable_error,
)
from specgen.runtime.keras_weights import is_keras_file
from specgen.runtime.placement.positions import Positions, fsync_files, gather

LATEST = "latest"
STATE = "checkpoint"  # TensorFlow's CheckpointState file name (tf.train.latest_checkpoint reads it)
TEMPORARY = re.compile(r"^\.(ckpt-.*|latest\..*|checkpoint\..*)\.tmp$")  # ours: save folders, prunes, write_atomic's files


class CheckpointFolder:
    def __init__(self, directory: Path, keep: int, positions: Positions | None = None):
        """`positions`: set when every worker's data position is saved (file-sharded data), None for one."""
        self.directory, self.keep, self.positions = directory, keep, positions

    def saved(self) -> list[Saved]:
        """Every ckpt-* folder with a readable meta.json, oldest first in save order."""
        if not self.directory.is_dir():
            return []
        found = [s for p in self.directory.glob("ckpt-*") if p.is_dir() and (s := saved(p))]
        return sorted(found, key=lambda s: s.order)

    def holds_checkpoints(self) -> list[str]:
        """Names of what a new run would collide with: ckpt-* folders (whole or not) and `latest`."""
        if not self.directory.is_dir():
            return []
        return sorted(p.name for p in self.directory.iterdir() if p.name.startswith("ckpt-") or p.name in (LATEST, STATE))

    def pointer(self) -> tuple[str | None, str]:
        """What `latest` names, or None and why not: missing, empty, or damaged (bytes that are not a checkpoint's
        name: a garbled file is told apart from a missing one, the two call for different looks at the disk)."""
        try:
            raw = (self.directory / LATEST).read_bytes()
        except FileNotFoundError:
            return None, "is missing"
        except OSError as exc:
            return None, f"is unreadable ({exc.strerror or exc})"
        try:
            name = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            return None, "is damaged (not text)"
        if not name:
            return None, "is empty"
        if not _is_ckpt_name(name) or not name.isprintable():
            return None, f"is damaged (it holds {name[:40]!r}, not a ckpt-* name)"
        return name, ""

    def newest(self) -> tuple[Path | None, str]:
        """The checkpoint to continue from, the newest in save order, and a note when `latest` says otherwise.

        A folder `latest` names that has no readable meta.json is returned as it is: reading it
        fails with the damage named, rather than a silent step back to an older checkpoint
        (and `damaged_after` finds one that `latest` does not name).
        """
        (name, broken), found = self.pointer(), self.saved()
        named = self.directory / name if name is not None else None
        named = named if named is not None and named.is_dir() else None
        if named is not None and named not in [s.path for s in found]:
            return named, ""
        if not found or named == found[-1].path:
            return (found[-1].path if found else None), ""
        newest = found[-1].path
        why = (broken if name is None else f"names '{name}', which does not exist" if named is None
               else f"names {name}, saved before {newest.name}")
        return newest, f"{shown(self.directory / LATEST)} {why}; using {newest.name}, the newest checkpoint there"

    def damaged_after(self, chosen: Path | None) -> Path | None:
        """A ckpt-* folder without a readable meta.json that may be newer than `chosen` (by the step and count in
        its name: its save order is what cannot be read), the newest such; None when there is none.

        Continuing from `chosen` past it would silently step back from the run's newest checkpoint, so --resume
        refuses, naming it (finding 7 of the faults check: `latest` gone and the newest meta.json damaged).
        """
        readable = {s.path for s in self.saved()}
        after = (-1, 0) if chosen is None else _name_order(chosen.name)
        damaged = [p for p in self.directory.glob("ckpt-*") if p.is_dir() and p not in readable
                   and _name_order(p.name) > after]
        return max(damaged, key=lambda p: _name_order(p.name)) if damaged else None

    def remove_temporaries(self) -> list[str]:
        """Remove what an interrupted save or prune left (`.ckpt-*.tmp`, `.latest.*.tmp`); their names.

        Whatever pid a name holds, it is a dead process's: this runs under the run folder's lock (run_lock.py), so
        no other `specgen train` is writing here."""
        if not self.directory.is_dir():
            return []
        removed = []
        for path in sorted(self.directory.iterdir()):
            if not TEMPORARY.match(path.name):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path.name)
        return removed

    def _free_name(self, step: int) -> Path:
        """ckpt-<step>, or ckpt-<step>-<n> when a checkpoint of that step (from an abandoned branch) exists."""
        final, count = self.directory / f"ckpt-{step:08d}", 1
        while final.exists():
            count += 1
            final = self.directory / f"ckpt-{step:08d}-{count}"
        return final

    def save(self, step: int, variables: dict[str, tf.Variable], iterator: Any, meta: dict[str, Any]) -> Path:
        """Write, fsync, publish by rename. A failed write (a full disk) removes the unpublished folder and
        raises OSError, TensorFlow's file errors included (`os_error`): the checkpoints before it are untouched."""
        self.directory.mkdir(parents=True, exist_ok=True)
        serial = max((s.order[0] for s in self.saved()), default=0) + 1
        final = self._free_name(step)
        temp = self.directory / f".{final.name}.{os.getpid()}.tmp"
        shutil.rmtree(temp, ignore_errors=True)
        try:
            self._write(temp, variables, iterator, {**meta, "step": step, "serial": serial})
            if self.positions is not None:
                gather(self.positions, temp, step, iterator)
            os.rename(temp, final)  # `final` is free: nothing is replaced
        except (OSError, tf.errors.OpError) as exc:
            shutil.rmtree(temp, ignore_errors=True)  # gives the space back; `remove_temporaries` would, later
            raise (os_error(exc) or exc) from None
        fsync_folder(self.directory)
        write_atomic(self.directory / LATEST, final.name + "\n")
        self.prune()
        self.write_state(final)
        return final

    def _write(self, temp: Path, variables: dict[str, tf.Variable], iterator: Any, meta: dict[str, Any]) -> None:
        temp.mkdir()
        names = list(variables)
        tf.raw_ops.SaveV2(prefix=str(temp / "variables"), tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=[variables[n].read_value() for n in names])
        if self.positions is not None:
            meta = {**meta, "data_workers": self.positions.workers}
        elif iterator is not None:
            tf.train.Checkpoint(iterator=iterator).write(str(temp / "data"))
        write_atomic(temp / META, json.dumps(meta, indent=2, sort_keys=True) + "\n")
        fsync_files(temp)  # the rename must not publish files whose bytes are still in flight

    def write_state(self, newest: Path) -> None:
        """TensorFlow's `checkpoint` file: `newest` and the kept checkpoints (oldest first, as TF lists them).

        Paths are relative to the run folder (TF joins them to the folder it reads), so a moved or
        copied run folder still resolves; specgen's own choice of checkpoint never reads this file.
        """
        kept = [s.path.name for s in self.saved() if s.path.name != newest.name] + [newest.name]
        lines = [f"model_checkpoint_path: {_quote(newest.name + '/variables')}"]
        lines += [f"all_model_checkpoint_paths: {_quote(name + '/variables')}" for name in kept]
        write_atomic(self.directory / STATE, "\n".join(lines) + "\n")

    def prune(self) -> None:
        """Keep the newest `keep` in save order; each other one leaves the ckpt-* names by rename first."""
        for old in self.saved()[: -self.keep]:
            doomed = self.directory / f".{old.path.name}.{os.getpid()}.pruned.tmp"
            os.rename(old.path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)

    def move_aside(self) -> tuple[Path, list[str]]:
        """--fresh: move everything in the folder but earlier `previous-*` into a new `previous-<n>`."""
        count = 1
        while (self.directory / f"previous-{count}").exists():
            count += 1
        target = self.directory / f"previous-{count}"
        moved = sorted(p.name for p in self.directory.iterdir() if not p.name.startswith("previous-"))
        target.mkdir()
        for name in moved:
            os.rename(self.directory / name, target / name)
        fsync_folder(self.directory)
        return target, moved


def write_failure(error: OSError, folder: Path, what: str) -> SpecError:
    """One line for a run that could not write `what`: why, and the checkpoint --resume continues from."""
    newest, _ = CheckpointFolder(folder, 1).newest()
    kept = (f"the newest checkpoint, {newest.name}, is intact. {{}}, then continue from it with --resume" if newest
            else "no checkpoint was written yet. {}, then train again")
    remedy = WRITE_ERRORS.get(error.errno or 0, "make the run folder writable")
    reason = (error.strerror or type(error).__name__).lower()
    return SpecError([Diagnostic(shown(folder), None, f"{reason} while writing {what}; "
                                 + kept.format(remedy.capitalize()))])


def _quote(text: str) -> str:
    """A protobuf text-format string (the names are ckpt-<digits>, but the format is kept honest)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _is_ckpt_name(name: str) -> bool:
    """A name `latest` may hold: one ckpt-* entry of the folder itself, never a path elsewhere."""
    return name.startswith("ckpt-") and "/" not in name and "\\" not in name


def _name_order(name: str) -> tuple[int, int]:
    """(step, count) of `ckpt-<step>` or `ckpt-<step>-<count>`; (-1, 0) for another name."""
    found = re.fullmatch(r"ckpt-(\d+)(?:-(\d+))?", name)
    return (int(found.group(1)), int(found.group(2) or 1)) if found else (-1, 0)


def _use_elsewhere(path: Path) -> str:
    return f"pass --checkpoint {shown(path)} (export, restore-plan) or --resume-from {shown(path)} (train)"


def _variables(folder: Path) -> Path:
    if not (folder / "variables.index").is_file():
        raise Unreadable(folder / "variables.index", "the file is missing")
    return folder / "variables"


def _from_run_folder(path: Path) -> Path:
    """The variables prefix of a run folder's newest checkpoint (saying so when `latest` names another)."""
    newest, note = CheckpointFolder(path, 1).newest()
    if newest is None:
        raise ValueError(f"folder {shown(path)} holds no checkpoint (no whole ckpt-* folder, no TensorFlow 'checkpoint' file)")
    if note:
        print(f"note: {note}", file=sys.stderr)
    return _variables(newest)


def resolve_prefix(path: Path) -> Path:
    """The checkpoint prefix for a prefix, its .index/.data file, a run folder (its newest ckpt-*, normally the
    one `latest` names), a ckpt-* folder or a folder with a TensorFlow `checkpoint` state file; ValueError otherwise
    (a Keras weight file too: only restore maps read those, keras_weights.py)."""
    if is_keras_file(path):
        raise ValueError(f"{shown(path)} is a Keras weight file, not a TensorFlow checkpoint: name it in "
                         "checkpoint.restore (or pass it to `specgen restore-plan --from`); `specgen export` "
                         "without --checkpoint exports the spec's restore plan")
    try:
        if path.is_dir():
            if (path / LATEST).is_file() or any(p.is_dir() for p in path.glob("ckpt-*")):  # ours, not TF2's files
                return _from_run_folder(path)
            if (path / "variables.index").is_file() or (path / META).is_file():
                return _variables(path)
            latest = tf.train.latest_checkpoint(str(path)) if (path / "checkpoint").is_file() else None
            if latest is None:
                raise ValueError(f"folder {shown(path)} holds no checkpoint (no 'latest' file, no TensorFlow 'checkpoint' file)")
            return Path(latest)
    except Unreadable as exc:
        raise ValueError(f"{shown(exc.file)}: " + describe(exc, exc.file.parent, _use_elsewhere, "train again", False)) from None
    prefix = Path(re.sub(r"\.(index|data-\d+-of-\d+)$", "", str(path)))
    if not Path(f"{prefix}.index").is_file():
        raise ValueError(f"checkpoint {shown(path)} not found: expected a checkpoint prefix (with {prefix.name}.index "
                         "beside it), a run folder with a 'latest' file or a folder with a TensorFlow 'checkpoint' file")
    return prefix


def checkpoint_prefix(path: Path) -> Path:
    """`resolve_prefix`, with its problem as a SpecError naming the path."""
    try:
        return resolve_prefix(path)
    except ValueError as exc:
        raise SpecError([Diagnostic(shown(path), None, str(exc))]) from None


def _reader(prefix: Path) -> Any:
    try:
        return tf.train.load_checkpoint(str(prefix))
    except READ_ERRORS as exc:
        raise _read_failure(prefix, exc) from None


def _read_failure(prefix: Path, exc: Exception) -> SpecError:
    """A reader error as one line naming the damaged file; for a ckpt-* folder, the intact one beside it."""
    damage = reader_failure(prefix, exc)
    if prefix.parent.name.startswith("ckpt-"):
        return unreadable_error(damage, prefix.parent, _use_elsewhere, "train again", False)
    return SpecError([Diagnostic(shown(damage.file), None, f"checkpoint {shown(prefix)} is unreadable: {damage.problem}")])


def read_arrays(prefix: Path, expected: dict[str, tuple[tuple[int, ...], str]]) -> dict[str, np.ndarray]:
    """Values for checkpoint keys, each checked for presence, shape and dtype before any is returned."""
    reader = _reader(prefix)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    problems = []
    for key, (shape, dtype) in expected.items():
        if key not in shapes:
            problems.append(f"'{key}' is missing")
        elif tuple(shapes[key]) != tuple(shape) or dtypes[key].name != dtype:
            problems.append(f"'{key}' is {dtypes[key].name}{list(shapes[key])} in the checkpoint but "
                            f"{dtype}{list(shape)} here")
    if problems:
        raise SpecError([Diagnostic(shown(prefix), None, "cannot read the checkpoint: " + "; ".join(problems[:10])
                                    + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
                                    + ". Nothing was changed.")])
    try:
        return {key: reader.get_tensor(key) for key in expected}
    except READ_ERRORS as exc:
        raise _read_failure(prefix, exc) from None


def checkpoint_keys(prefix: Path) -> set[str]:
    """Every key a checkpoint holds."""
    return set(_reader(prefix).get_variable_to_shape_map())


def key_shapes(prefix: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every key a checkpoint holds, with its shape and dtype name."""
    reader = _reader(prefix)
    dtypes = reader.get_variable_to_dtype_map()
    return {key: (tuple(shape), dtypes[key].name) for key, shape in reader.get_variable_to_shape_map().items()}


def read_values(prefix: Path, variables: dict[str, tf.Variable]) -> dict[str, np.ndarray]:
    """Every variable's value from a checkpoint, checked for presence, shape and dtype first."""
    return read_arrays(prefix, {name: (tuple(v.shape), v.dtype.name) for name, v in variables.items()})
