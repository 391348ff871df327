"""One `specgen train` per run folder: an exclusive, non-blocking flock on the folder, held for the whole run.

Two runs writing one folder (a retried job while the first attempt still runs, a second terminal, two sweep trials
sharing `checkpoint.dir`) prune each other's checkpoints, flip `latest` between two branches and remove each
other's in-flight save folders; nothing on disk tells them apart afterwards. So the second one is refused at once.

Why the folder itself and not a lock file inside it (the pattern of specgen/tracking/mlflow.py `_store_lock`, which
locks the MLflow store's folder for the same reason): a refused start must leave the run folder byte for byte as
it was (docs/training.md, "Bad input changes nothing on disk"), and a lock file would be a new entry that the
refused command itself created in a folder an older specgen wrote. A directory opened read-only takes a flock
like a file, and `--fresh` moves the folder's content, never the folder, so the lock stays on the run. The lock is
the folder's, not its path's: a folder moved or deleted during the run is noticed before each save (`fate`), and
the run stops there rather than make a new, unlocked folder at the path.
`_store_lock` waits for its holder and lets go after MLflow opened the store; here the second run must not wait
(it would then resume a checkpoint the first one is about to prune) and the lock lives as long as the run, so
the helper is not reused, only its rule: where flock is missing (another OS, some network file systems) the run
goes on unlocked, as before.

The holder's pid is read from /proc/locks (Linux), so no pid file is written either; elsewhere the refusal
names no pid.
"""

from __future__ import annotations

import os
from pathlib import Path

from specgen.diagnostics import Diagnostic, SpecError
from specgen.paths import shown

try:
    import fcntl
except ImportError:  # not POSIX: runs go unlocked, as before
    fcntl = None  # type: ignore[assignment]


class RunLock:
    """The lock of one run folder. `acquire` takes it when the folder exists (again after the folder is made);
    `release` (or the object's end) lets it go."""

    def __init__(self, folder: Path):
        self.folder, self.fd = folder, -1

    @property
    def held(self) -> bool:
        return self.fd >= 0

    def acquire(self) -> None:
        """Take the lock; SpecError (one line, nothing written) when another process holds it. A folder that does
        not exist yet is locked by the call after it was made (resume.open_run_folder)."""
        if self.held or fcntl is None or not self.folder.is_dir():
            return
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._in_use() from None
        except OSError:  # flock unsupported here (some network file systems): unlocked, as before
            os.close(fd)
            return
        self.fd = fd

    def release(self) -> None:
        if self.held:
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = -1

    def __del__(self) -> None:
        self.release()

    def fate(self) -> str | None:
        """None while the folder at the locked path is the folder locked (or nothing is locked); else what became
        of it: `moved to PATH`, `deleted`, or `moved or deleted?` where /proc cannot tell.

        The lock is on the folder, not on its path: a run folder moved (`mv run run.old`) or deleted while training
        keeps this lock, and a folder made again at the path is unlocked, so a second `specgen train --resume` could
        lock it and write beside this run. A save checks this first (checkpoint.CheckpointFolder.save) and stops."""
        if not self.held:
            return None
        locked = os.fstat(self.fd)
        try:
            there = os.stat(self.folder)
        except OSError:  # nothing there any more (or no way to it)
            there = None
        if there is not None and (there.st_dev, there.st_ino) == (locked.st_dev, locked.st_ino):
            return None
        if locked.st_nlink == 0:  # a removed folder keeps no link; Linux shows 0
            return "deleted"
        return _moved_to(self.fd, locked)

    def _in_use(self) -> SpecError:
        pid = holder(self.folder)
        who = f"another specgen train (pid {pid})" if pid else "another specgen train"
        return SpecError([Diagnostic(shown(self.folder), None, f"the run folder is in use by {who}; wait for it to "
                                     "end, or train into another folder with --set checkpoint.dir=PATH. "
                                     "Nothing was changed.")])


def _moved_to(fd: int, locked: os.stat_result) -> str:
    """`moved to PATH` for the open folder `fd`, from /proc/self/fd (Linux); `moved or deleted?` elsewhere."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
        now = os.stat(path)
    except OSError:
        return "moved or deleted?"
    if (now.st_dev, now.st_ino) != (locked.st_dev, locked.st_ino):  # " (deleted)" appended, or a race
        return "moved or deleted?"
    return f"moved to {shown(path)}"


def holder(folder: Path) -> int | None:
    """The pid holding a flock on `folder`, from /proc/locks (`1: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<inode>
    0 EOF`); None where it cannot be told (no /proc, another pid namespace shows 0)."""
    try:
        status = os.stat(folder)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    device = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    for line in lines:
        fields = line.split()
        if "FLOCK" in fields and "->" not in fields and len(fields) >= 6 and fields[5] == device:
            return int(fields[4]) if fields[4].isdigit() and int(fields[4]) > 0 else None
    return None
