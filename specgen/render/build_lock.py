"""One `specgen build` at a time writes an output folder: an fcntl.flock on `<out>/.specgen-build.lock`.

Two builds into one folder at once (a save hook and a branch switch) would otherwise each write the files they
found changed and leave the folder a mix of both spec sets, both exiting 0. `build --check` takes no lock (it writes
nothing). Moved out of render/build.py, which renders and writes; this module only orders the writers.
`specgen export` orders its writers of one output folder the same way (`locked(out, "export")`:
`<out>/.specgen-export.lock`), since its Triton repository's next version is chosen by listing that folder.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specgen.atomic import UnsafePathError, kind, writing
from specgen.errors import SpecgenError
from specgen.paths import shown

LOCK_NAME = ".specgen-build.lock"
LOCK_WAIT = 60.0  # seconds a build waits for another build writing the same folder; a build takes a few seconds
LOCK_POLL = 0.05
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)  # the lock file cannot be made: nobody here writes the folder
_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def resolved_root(root: Path) -> str:
    """The output root resolved once (links above and at it are the user's choice); a folder or missing."""
    real = os.path.realpath(root)
    if kind(Path(real), root) == "file":
        raise UnsafePathError(root, "is a file, not a folder", "remove it or choose another output folder")
    return real


@contextmanager
def locked(root: Path, command: str = "build") -> Iterator[None]:
    """Hold `<root>/.specgen-build.lock` while this build surveys, writes and prunes `root` (`command` "export":
    `.specgen-export.lock`, held while an export chooses its files and writes them, words saying export).

    The second build waits (one line on stderr) until the first is done, then surveys what the first wrote, so the
    folder ends as the last build's; after LOCK_WAIT seconds it stops with one line naming the other build's pid
    (written in the lock file). The kernel drops a killed build's lock. The file is removed before the lock is let
    go, so a checked-in output folder keeps no trace; a waiter then holds a removed file, sees that and takes the
    new one (`_lock`)."""
    with writing(root):
        real = resolved_root(root)
        try:
            os.makedirs(real, exist_ok=True)
            fd, path = _lock(root, os.path.join(real, _name(command)), command)
        except OSError as exc:
            if not _unwritable(real, exc):
                raise
            fd, path = -1, ""
    if fd < 0:
        # A folder this user cannot write: no build of theirs can write it either, so there is nothing to order.
        # The build goes on (outside `writing(root)`, so that a write error names its own file): an up-to-date
        # read-only checkout passes (0 files changed), and a file it would have to change is refused by the write.
        yield
        return
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        try:
            os.unlink(path)
        except OSError:  # gone or not ours to remove: the lock itself is what matters
            pass
        os.close(fd)


def _unwritable(real: str, exc: OSError) -> bool:
    """Whether the lock file could not be made because the folder cannot be written (a read-only file system, a
    folder without write permission), not because of the lock file itself (another user's, left by a killed build:
    that stays an error naming it, as two builds would otherwise write unordered)."""
    if exc.errno == errno.EROFS:
        return True
    folder = real if os.path.isdir(real) else os.path.dirname(real)
    return exc.errno in UNWRITABLE and not os.access(folder, os.W_OK)


def _name(command: str) -> str:
    return LOCK_NAME if command == "build" else f".specgen-{command}.lock"


def _lock(root: Path, path: str, command: str = "build") -> tuple[int, str]:
    """An open descriptor of the lock file at `path` holding its exclusive lock, waiting up to LOCK_WAIT."""
    deadline, told = time.monotonic() + LOCK_WAIT, False
    while True:
        kind(Path(path), root / _name(command))  # a link or a folder there: one line naming it, never followed
        fd = os.open(path, _FLAGS, 0o666)
        try:
            holder = _attempt(fd, path)
        except BaseException:  # flock unsupported, a stat refused, Ctrl-C: the descriptor goes with the error
            os.close(fd)
            raise
        if holder is None:
            return fd, path
        os.close(fd)
        if not holder:
            continue  # the holder removed the file as we waited: lock the file that is there now
        if time.monotonic() >= deadline:
            raise SpecgenError(f"another specgen {command} ({holder}) is writing {shown(root)}, and it did not finish "
                               f"within {LOCK_WAIT:g} s; run this {command} again once it has (or stop it)")
        if not told:
            print(f"specgen {command}: waiting for another specgen {command} ({holder}) to finish writing {shown(root)}",
                  file=sys.stderr, flush=True)
            told = True
        time.sleep(LOCK_POLL)


def _attempt(fd: int, path: str) -> str | None:
    """One try for the lock through `fd`: None when it holds the lock of the file still at `path`; else the
    holder (`pid 1234`), or "" when the file was removed meanwhile (its holder finished)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise
        return _holder(fd)
    return None if _still_there(fd, path) else ""


def _holder(fd: int) -> str:
    """`pid 1234` of the build holding the lock, from the lock file (empty for a moment after it is created)."""
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return f"pid {text}" if text.isdigit() else "pid not known yet"


def _still_there(fd: int, path: str) -> bool:
    """Whether the locked file is still the one at `path` (a finished build removes it while holding the lock)."""
    try:
        return os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False
