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
`latest` replaced (write_atomic); then `checkpoint` is rewritten (write_atomic) to name it and the
ones pruning keeps, and only then are the others pruned, so a kill during pruning leaves a state
file that lists no removed checkpoint. Pruning renames a folder out of the `ckpt-*` names before
deleting it, and goes by save order (meta.json's serial), never by name: a run resumed from an
older checkpoint saves lower step numbers than the ones it abandoned. It removes only checkpoints
whose meta.json reads (an unreadable one's order is unknown: integrity.read_meta), never the new
one nor the one `latest` names. A kill between `latest` and `checkpoint` leaves the state file
naming the checkpoint before: `repair_state` rewrites it when the next run opens the folder.

With file-sharded data every worker's iterator differs and each saves its own (runtime/placement/positions.py).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tensorflow as tf

from specgen.atomic import PROBE_NAME, STALE_AFTER, TEMP_NAME, UnsafePathError, fsync_folder, pid_alive, write_atomic
from specgen.diagnostics import Diagnostic, SpecError
from specgen.paths import shown
from specgen.runtime.checkpoint_read import (
    LATEST,
    STATE,
    RunFolder,
    checkpoint_keys,
    checkpoint_prefix,
    key_shapes,
    read_arrays,
    read_values,
    resolve_prefix,
)
from specgen.runtime.disk import os_error, remedy
from specgen.runtime.integrity import META, Unreadable, read_small
from specgen.runtime.placement.positions import Positions, fsync_files, gather
from specgen.runtime.run_lock import RunLock

# The reading side lives in checkpoint_read.py; its names stay importable from here.
__all__ = ["LATEST", "STATE", "CheckpointFolder", "RunFolder", "checkpoint_keys", "checkpoint_prefix", "folder_gone",
           "key_shapes", "read_arrays", "read_values", "resolve_prefix", "write_failure"]

TEMPORARY = re.compile(r"^\.(ckpt-.*|latest\..*|checkpoint\..*)\.tmp$")  # ours: save folders, prunes, write_atomic's files
# Where `specgen train` writes files of its own (write_atomic's `.NAME.<pid>.<hex>.tmp`): the run folder (`latest`,
# `checkpoint`, spec.resolved.yaml, provenance.json, mlflow.json) and code/; tensorboard/ for the write probe.
WRITTEN = ("", "code", "tensorboard", "tensorboard/train", "tensorboard/eval")
GONE_WAIT = 0.2  # seconds a save that lost a file waits before it looks whether the whole run folder went


def aside_folder(directory: Path) -> Path:
    """The `previous-<n>` folder --fresh would move the run in `directory` to: the first free n from 1."""
    count = 1
    while (directory / f"previous-{count}").exists():
        count += 1
    return directory / f"previous-{count}"


class CheckpointFolder(RunFolder):
    """A run folder that is written: saves published by rename, `latest` and `checkpoint` rewritten, pruning."""

    def __init__(self, directory: Path, keep: int, positions: Positions | None = None, lock: RunLock | None = None):
        """`positions`: set when every worker's data position is saved (file-sharded data), None for one.
        `lock`: the run folder's (run_lock.py), held by this process: each save checks the folder is still there."""
        super().__init__(directory)
        self.keep, self.positions, self.lock = keep, positions, lock

    def remove_temporaries(self, locked: bool = True) -> list[str]:
        """Remove what an interrupted save, prune or write left; their paths in the run folder, as printed.

        A save's or prune's folder (`.ckpt-*.tmp`), write_atomic's temporary of any file `specgen train` writes
        here (`.spec.resolved.yaml.<pid>.<hex>.tmp`, `code/.model.py.<pid>.<hex>.tmp`, ...) and the write probe.
        Whatever pid a name holds, it is a dead process's: this runs under the run folder's lock (run_lock.py), so
        no other `specgen train` is writing here, and write_atomic's age rule (atomic.STALE_AFTER, for a folder
        other machines write too) does not apply. `locked` False (flock unsupported, a network file system): the
        temporaries of other files (spec.resolved.yaml, code/...) go only by that rule, since another machine's live
        writer may own them; a save's folder and `latest`'s and `checkpoint`'s temporaries are removed as before.
        The run folder may be a link (runs/x -> /scratch/x); its subfolders are not followed when they are."""
        removed = []
        for sub in WRITTEN:
            folder = self.directory / sub
            if not folder.is_dir() or (sub and folder.is_symlink()):  # the run folder itself may be a link
                continue
            for path in sorted(folder.iterdir()):
                if self._leftover(path, sub, locked):
                    _remove(path)
                    removed.append(str(Path(sub) / path.name))
        return removed

    @staticmethod
    def _leftover(path: Path, sub: str, locked: bool) -> bool:
        if PROBE_NAME.match(path.name):
            return True
        if sub == "" and TEMPORARY.match(path.name):
            return True
        found = TEMP_NAME.fullmatch(path.name)
        if found is None or path.is_dir():
            return False
        return locked or (not pid_alive(int(found["pid"])) and time.time() - path.lstat().st_mtime > STALE_AFTER)

    def _free_name(self, step: int) -> Path:
        """ckpt-<step>, or ckpt-<step>-<n> when a checkpoint of that step (from an abandoned branch) exists."""
        final, count = self.directory / f"ckpt-{step:08d}", 1
        while final.exists():
            count += 1
            final = self.directory / f"ckpt-{step:08d}-{count}"
        return final

    def save(self, step: int, variables: dict[str, tf.Variable], iterator: Any, meta: dict[str, Any]) -> Path:
        """Write, fsync, publish by rename. A failed write (a full disk) removes the unpublished folder and
        raises OSError, TensorFlow's file errors included (`os_error`): the checkpoints before it are untouched.
        A run folder moved or deleted before or during the save (the lock's `fate`) stops the run with one line
        (SpecError, `folder_gone`) instead: a save by path would make a new, unlocked folder there."""
        self._in_place(step, "before")
        if self.lock is None or not self.lock.held:  # a locked run folder is never made again here (open_run_folder made it)
            self.directory.mkdir(parents=True, exist_ok=True)
        final = self._free_name(step)
        temp = self.directory / f".{final.name}.{os.getpid()}.tmp"
        try:
            return self._publish(step, final, temp, variables, iterator, meta)
        except (OSError, tf.errors.OpError) as exc:
            error = os_error(exc, self.directory)
            if error is not None and error.errno in (errno.ENOENT, errno.ENOTDIR):  # a file gone: `rm -rf run`
                time.sleep(GONE_WAIT)  # empties the folder before it removes it: its end is what to report
            self._in_place(step, "while", temp)  # then the cause is the folder's fate, not the errno its path gave
            shutil.rmtree(temp, ignore_errors=True)  # gives the space back; `remove_temporaries` would, later
            raise (error or exc) from None

    def _publish(self, step: int, final: Path, temp: Path, variables: dict[str, tf.Variable], iterator: Any,
                 meta: dict[str, Any]) -> Path:
        serial = max((s.order[0] for s in self.saved()), default=0) + 1
        shutil.rmtree(temp, ignore_errors=True)
        self._write(temp, variables, iterator, {**meta, "step": step, "serial": serial})
        if self.positions is not None:
            gather(self.positions, temp, step, iterator)
        # TensorFlow's Checkpoint.write and write_atomic make missing folders: a folder moved meanwhile was made
        # again at its path, holding this save alone; it is not published there
        self._in_place(step, "while", temp)
        os.rename(temp, final)  # `final` is free: nothing is replaced
        fsync_folder(self.directory)
        self._in_place(step, "while")  # before each write by path: write_atomic, too, makes a missing folder
        write_atomic(self.directory / LATEST, final.name + "\n")
        doomed = self._doomed(final)
        self._in_place(step, "while")
        self.write_state(final, leaving=doomed)  # first: a kill while pruning leaves no removed checkpoint listed
        self.prune(doomed)
        self._in_place(step, "while")  # moved during the last writes: said now, not at the next save
        return final

    def _in_place(self, step: int, when: str, temp: Path | None = None) -> None:
        """Raise `folder_gone` when the locked run folder is no longer at its path; first undo what this save made
        at the path after the move (`temp`, this save's folder; `latest`, `checkpoint`): TensorFlow's
        Checkpoint.write and write_atomic make a missing folder again, and a move between a check and a write
        lands there."""
        fate = self.lock.fate() if self.lock is not None else None
        if fate is None:
            return
        if when == "while":
            self._undo_remade(temp)
        raise folder_gone(self.directory, step, when, fate)

    def _undo_remade(self, temp: Path | None) -> None:
        """Remove the folder at the path when it holds only what this save wrote there (nothing of anyone else's)."""
        ours = {LATEST, STATE, *([temp.name] if temp is not None else [])}
        mine = f".{os.getpid()}."
        try:
            entries = os.listdir(self.directory)
        except OSError:  # nothing there
            return
        if not all(n in ours or (TEMPORARY.match(n) and mine in n) for n in entries):
            return
        for name in entries:
            _remove(self.directory / name)
        try:
            self.directory.rmdir()
        except OSError:  # something came meanwhile: left alone
            pass

    def _write(self, temp: Path, variables: dict[str, tf.Variable], iterator: Any, meta: dict[str, Any]) -> None:
        temp.mkdir()
        names = list(variables)
        tf.raw_ops.SaveV2(prefix=str(temp / "variables"), tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=[variables[n].read_value() for n in names])
        if self.positions is not None:
            meta = {**meta, "data_workers": self.positions.workers, "data_shares": list(self.positions.shares)}
        elif iterator is not None:
            tf.train.Checkpoint(iterator=iterator).write(str(temp / "data"))
        write_atomic(temp / META, json.dumps(meta, indent=2, sort_keys=True) + "\n")
        fsync_files(temp)  # the rename must not publish files whose bytes are still in flight

    def write_state(self, newest: Path, leaving: Sequence[Path] = ()) -> None:
        """TensorFlow's `checkpoint` file: `newest` and the kept checkpoints (oldest first, as TF lists them),
        without those `leaving` (about to be pruned).

        Paths are relative to the run folder (TF joins them to the folder it reads), so a moved or
        copied run folder still resolves; specgen's own choice of checkpoint never reads this file.
        """
        write_atomic(self.directory / STATE, self._state(newest, leaving))

    def _state(self, newest: Path, leaving: Sequence[Path] = ()) -> str:
        kept = [s.path.name for s in self.saved() if s.path.name != newest.name and s.path not in leaving]
        lines = [f"model_checkpoint_path: {_quote(newest.name + '/variables')}"]
        lines += [f"all_model_checkpoint_paths: {_quote(name + '/variables')}" for name in [*kept, newest.name]]
        return "\n".join(lines) + "\n"

    def repair_state(self) -> str | None:
        """Rewrite `checkpoint` when it is not what the last save would have left (a kill between `latest` and it
        left it naming the checkpoint before, or listing a pruned one); what it named before, as a note. Nothing is
        written when the newest checkpoint cannot be read (--resume refuses that run folder) or none is there."""
        newest, _ = self.newest()
        if newest is None or newest not in [s.path for s in self.saved()]:
            return None
        path = self.directory / STATE
        wanted = self._state(newest)
        try:
            found = read_small(path, len(wanted.encode()) + 1024)
        except Unreadable:  # missing, or not a regular file: write_atomic refuses what is no file, saying so
            found = b""
        if found == wanted.encode():
            return None
        write_atomic(path, wanted)
        named = re.search(rb'^model_checkpoint_path: "([^"/]*)/', found, re.M)
        if named and named[1].decode(errors="replace") == newest.name:  # the right newest, a stale list of the kept
            return f"rewrote {shown(path)}, TensorFlow's state file, whose list of checkpoints was not the folder's"
        before = f"named {named[1].decode(errors='replace')}" if named else "was missing or unreadable"
        return f"rewrote {shown(path)}, TensorFlow's state file, which {before}, to name {newest.name}"

    def _doomed(self, final: Path) -> list[Path]:
        """What pruning removes once `final` is saved: the readable checkpoints before the newest `keep` in save
        order. Never `final` or the one `latest` names; never one whose meta.json does not read (not in `saved()`:
        its save order is unknown, it may be the newest of all)."""
        named = self.pointer()[0]
        return [s.path for s in self.saved()[: -self.keep] if s.path != final and s.path.name != named]

    def prune(self, doomed: Sequence[Path]) -> None:
        """Remove `doomed` (`_doomed`); each leaves the ckpt-* names by rename first."""
        for old in doomed:
            moved = self.directory / f".{old.name}.{os.getpid()}.pruned.tmp"
            os.rename(old, moved)
            shutil.rmtree(moved, ignore_errors=True)

    def move_aside(self) -> tuple[Path, list[str]]:
        """--fresh: move everything in the folder but earlier `previous-*` into a new `previous-<n>`."""
        target = aside_folder(self.directory)
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
    if isinstance(error, UnsafePathError) and error.path is not None:  # no errno: what is in the way, said
        # (a folder or a link where `latest` goes, made during the run: resume.check_rewritten refuses it up front)
        return SpecError([Diagnostic(shown(folder), None, f"cannot write {what}: {shown(error.path)} {error.what}; "
                                     + kept.format(f"Remove {shown(error.path)}"))])
    advice = remedy(error, "make the run folder writable")
    reason = error.strerror.lower() if error.strerror else str(error) or type(error).__name__
    return SpecError([Diagnostic(shown(folder), None, f"{reason} while writing {what}; "
                                 + kept.format(advice[0].upper() + advice[1:]))])


def folder_gone(folder: Path, step: int, when: str, fate: str) -> SpecError:
    """One line for a run whose folder was moved or deleted `when` ("before"/"while") checkpoint `step` was written
    (`fate`: RunLock.fate's words): training stops, so nothing more is written at the path or beside the moved run."""
    name = f"checkpoint ckpt-{step:08d} (step {step})"
    if fate == "deleted":
        advice = "Its checkpoints went with it: train again"
    else:
        where = "it" if fate.startswith("moved or") else fate.removeprefix("moved to ")
        advice = f"Move {where} back to {shown(folder)}, then continue with --resume"
        if os.path.lexists(folder):
            advice += f" (something else is at {shown(folder)} now: move that away first)"
    return SpecError([Diagnostic(shown(folder), None, f"the run folder disappeared {when} {name} was written "
                                 f"({fate}); training stopped there, and nothing more was written. {advice}")])


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _quote(text: str) -> str:
    """A protobuf text-format string (the names are ckpt-<digits>, but the format is kept honest)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


