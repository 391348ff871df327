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
from pathlib import Path
from typing import Any

import tensorflow as tf

from specgen.atomic import fsync_folder, write_atomic
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
from specgen.runtime.disk import WRITE_ERRORS, os_error
from specgen.runtime.integrity import META
from specgen.runtime.placement.positions import Positions, fsync_files, gather

# The reading side lives in checkpoint_read.py; its names stay importable from here.
__all__ = ["LATEST", "STATE", "CheckpointFolder", "RunFolder", "checkpoint_keys", "checkpoint_prefix", "key_shapes",
           "read_arrays", "read_values", "resolve_prefix", "write_failure"]

TEMPORARY = re.compile(r"^\.(ckpt-.*|latest\..*|checkpoint\..*)\.tmp$")  # ours: save folders, prunes, write_atomic's files


class CheckpointFolder(RunFolder):
    """A run folder that is written: saves published by rename, `latest` and `checkpoint` rewritten, pruning."""

    def __init__(self, directory: Path, keep: int, positions: Positions | None = None):
        """`positions`: set when every worker's data position is saved (file-sharded data), None for one."""
        super().__init__(directory)
        self.keep, self.positions = keep, positions

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


