"""Reading a run folder and restore sources: which checkpoint `latest` names, and a checkpoint's prefix and values.

Every small file read here (`latest`, meta.json) goes through integrity.read_small: a regular file, read to a
bound, or one line saying what it is (a FIFO is never waited on, /dev/zero behind a link never read). The files
TensorFlow's reader opens itself (`.index`, `.data-*`) are checked for their kind first (restore_sources.py).
The writing side, saves and pruning, is checkpoint.py's `CheckpointFolder`, which extends `RunFolder`.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from specgen.diagnostics import Diagnostic, SpecError
from specgen.paths import shown
from specgen.runtime.integrity import (
    META,
    READ_ERRORS,
    Saved,
    Unreadable,
    describe,
    file_problem,
    meta_damage,
    read_small,
    reader_failure,
    saved,
    unreadable_error,
)
from specgen.runtime.weight_files import not_a_checkpoint

LATEST = "latest"
STATE = "checkpoint"  # TensorFlow's CheckpointState file name (tf.train.latest_checkpoint reads it)
POINTER_LIMIT = 256  # `latest` holds one ckpt-<step>[-<n>] name and a newline


class RunFolder:
    """A run folder's checkpoints as found on disk: read only (checkpoint.py's CheckpointFolder writes)."""

    def __init__(self, directory: Path):
        self.directory = directory

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
        latest = self.directory / LATEST
        if (problem := file_problem(latest)) is not None:  # a FIFO, a device, a folder: never opened
            return None, problem
        try:
            raw = read_small(latest, POINTER_LIMIT)
        except Unreadable as exc:
            return None, exc.problem.removeprefix("the file ")
        if len(raw) > POINTER_LIMIT:
            return None, f"is damaged (over {POINTER_LIMIT} bytes, not a ckpt-* name)"
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

    def unreadable(self) -> list[Path]:
        """The ckpt-* folders whose meta.json does not read (or holds a `step` or `serial` specgen never writes):
        their save order is unknown, so they are never chosen by order, stepped past silently, or pruned."""
        if not self.directory.is_dir():
            return []
        readable = {s.path for s in self.saved()}
        return sorted(p for p in self.directory.glob("ckpt-*") if p.is_dir() and p not in readable)

    def damaged_after(self, chosen: Path | None) -> Path | None:
        """A ckpt-* folder without a readable meta.json that may be newer than `chosen` (by the step and count in
        its name: its save order is what cannot be read), the newest such; None when there is none.

        Continuing from `chosen` past it would silently step back from the run's newest checkpoint, so --resume
        and export refuse, naming it (finding 7 of the faults check: `latest` gone and the newest meta.json damaged).
        """
        after = (-1, 0) if chosen is None else _name_order(chosen.name)
        damaged = [p for p in self.unreadable() if _name_order(p.name) > after]
        return max(damaged, key=lambda p: _name_order(p.name)) if damaged else None

    def choose(self) -> tuple[Path | None, str]:
        """`newest()`, for a command that reads it (--resume, export): Unreadable, naming the file and key, when
        its meta.json does not read or a damaged folder newer by its name could be the newest (never a silent step
        back). A checkpoint's `meta.json` orders the run (integrity.read_meta): one that `latest` names but whose
        order cannot be read is refused too, rather than trusted or passed over."""
        newest, note = self.newest()
        for folder in (self.damaged_after(newest), newest):
            if folder is not None and (damage := meta_damage(folder)) is not None:
                raise damage
        return newest, note


def _is_ckpt_name(name: str) -> bool:
    """A name `latest` may hold: one ckpt-* entry of the folder itself, never a path elsewhere."""
    return name.startswith("ckpt-") and "/" not in name and "\\" not in name


def _name_order(name: str) -> tuple[int, int]:
    """(step, count) of `ckpt-<step>` or `ckpt-<step>-<count>`; (-1, 0) for another name."""
    found = re.fullmatch(r"ckpt-(\d+)(?:-(\d+))?", name)
    return (int(found.group(1)), int(found.group(2) or 1)) if found else (-1, 0)


def tidy(path: Path) -> Path:
    """`path` without `.` and `..` parts (`ft/../runs/src` as `runs/src`, how specgen prints paths) when that names
    the same file: lexical normalization reads `a/..` as nothing, which is wrong when `a` is a symbolic link, so
    the path is kept as given unless both resolve alike. The tidy path is also the one read, so every message (the
    reader's own included) names the file that was read."""
    normal = Path(os.path.normpath(path))
    if normal == path:
        return path
    try:
        return normal if os.path.realpath(normal) == os.path.realpath(path) else path
    except (OSError, ValueError):  # a loop of links, a NUL byte: the reader reports the path as given
        return path


def _use_elsewhere(path: Path) -> str:
    return f"pass --checkpoint {shown(path)} (export, restore-plan) or --resume-from {shown(path)} (train)"


def _not_regular(path: Path) -> str | None:
    """What `path` is when something other than a regular file is there (None when regular or missing)."""
    problem = file_problem(path)
    return None if problem in (None, "is missing") else problem


def _variables(folder: Path) -> Path:
    """A ckpt-* folder's variables prefix: its index a regular file, its meta.json one too when present."""
    if (problem := _not_regular(folder / META)) is not None:
        raise Unreadable(folder / META, f"the file {problem}")
    if (problem := file_problem(folder / "variables.index")) is not None:
        raise Unreadable(folder / "variables.index", f"the file {problem}")
    return folder / "variables"


def _from_run_folder(path: Path) -> Path:
    """The variables prefix of a run folder's newest checkpoint (saying so when `latest` names another). A `latest`
    that is no regular file is refused, not stepped past: it was put there, it is not a save cut short."""
    if (problem := _not_regular(path / LATEST)) is not None:
        raise ValueError(f"{shown(path / LATEST)} {problem}; a run folder's 'latest' names its newest checkpoint")
    newest, note = RunFolder(path).choose()
    if newest is None:
        raise ValueError(f"folder {shown(path)} holds no checkpoint (no whole ckpt-* folder, no TensorFlow 'checkpoint' file)")
    if note:
        print(f"note: {note}", file=sys.stderr)
    return _variables(newest)


def resolve_prefix(path: Path) -> Path:
    """The checkpoint prefix for a prefix, its .index/.data file, a run folder (its newest ckpt-*, normally the
    one `latest` names), a ckpt-* folder or a folder with a TensorFlow `checkpoint` state file; ValueError otherwise
    (a Keras weight file too: only restore maps read those, keras_weights.py). Every file read on the way is a
    regular file, or the ValueError says what it is."""
    path = tidy(path)
    if (what := not_a_checkpoint(path)) is not None:  # a Keras weight file, a zip (.npz) or another HDF5 file
        raise ValueError(what)
    try:
        if path.is_dir():
            if file_problem(path / LATEST) != "is missing" or any(p.is_dir() for p in path.glob("ckpt-*")):
                return _from_run_folder(path)  # ours, not TF2's files
            if file_problem(path / "variables.index") != "is missing" or file_problem(path / META) != "is missing":
                return _variables(path)
            if (problem := _not_regular(path / STATE)) is not None:  # tf.train.latest_checkpoint would wait on a FIFO
                raise ValueError(f"{shown(path / STATE)} {problem}; TensorFlow's 'checkpoint' file names a prefix")
            latest = tf.train.latest_checkpoint(str(path)) if (path / STATE).is_file() else None
            if latest is None:
                raise ValueError(f"folder {shown(path)} holds no checkpoint (no 'latest' file, no TensorFlow 'checkpoint' file)")
            return Path(latest)
    except Unreadable as exc:
        at = f":{exc.position.line}:{exc.position.col}" if exc.position else ""  # the key of a malformed meta.json
        raise ValueError(f"{shown(exc.file)}{at}: " + describe(exc, exc.file.parent, _use_elsewhere, "train again",
                                                            False)) from None
    prefix = Path(re.sub(r"\.(index|data-\d+-of-\d+)$", "", str(path)))
    if (problem := _not_regular(Path(f"{prefix}.index"))) is not None:
        raise ValueError(f"cannot read checkpoint {shown(prefix)}: {shown(Path(f'{prefix}.index'))} {problem}")
    if not Path(f"{prefix}.index").is_file():
        raise ValueError(f"checkpoint {shown(path)} not found: expected a checkpoint prefix (with {prefix.name}.index "
                         "beside it), a run folder with a 'latest' file or a folder with a TensorFlow 'checkpoint' file")
    return prefix


def checkpoint_prefix(path: Path) -> Path:
    """`resolve_prefix`, with its problem as a SpecError naming the path."""
    try:
        return resolve_prefix(path)
    except ValueError as exc:
        raise SpecError([Diagnostic(shown(tidy(path)), None, str(exc))]) from None


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
