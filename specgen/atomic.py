"""The one way specgen writes a file: a temporary file beside it, fsync, then a rename.

Every command that writes (build, schema, train, export, the Triton repository, infer
--output) goes through `write_atomic`, so a crash, a full disk or a kill -9 leaves either
the old file or the new one, never half of either. The fsync is what a power loss needs as well;
writers of derived files that the next run recreates (`build`'s generated code: render/build.py
NO_FSYNC, pictures, reports) pass fsync=False and rely on the rename alone. The target must not be a symlink or any
other non-regular file: specgen never writes through a link (a link in `generated/` would
otherwise let a spec overwrite files elsewhere), and it says which path is the link.

Given a `root`, every folder between the root and the file is checked too: the root is
resolved once (it may sit below symlinked folders the user chose), and below it each
component must be a real folder, never a link. `read_regular` is the matching reader: it
never follows a link and never reads a device, pipe or /proc file.

Errors raised while writing keep their type (PermissionError, ...) but remember the file
they were writing, so `describe` can turn any of them into one line for the user.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specgen.errors import SpecgenError

DEFAULT_REMEDY = "remove it (or choose another path) and run again"


class UnsafePathError(SpecgenError, OSError):
    """A path specgen refuses to write, delete or read through (a symlink or a non-regular file).

    `UnsafePathError(path, what, remedy)`: str() is "<path> <what>; <remedy>". The old
    one-argument form (a whole message) still works.
    """

    def __init__(self, path: Path | str, what: str | None = None, remedy: str = DEFAULT_REMEDY) -> None:
        message = str(path) if what is None else f"{path} {what}; {remedy}"
        super().__init__(message)
        self.path = Path(path) if what is not None else None
        self.what = what
        self.remedy = remedy


def _link_error(path: Path, shown: Path | None = None) -> UnsafePathError:
    try:
        to = f" (to {os.readlink(path)})"
    except OSError:
        to = ""
    return UnsafePathError(shown or path, f"is a symbolic link{to}, and specgen never writes, deletes or "
                           "reads through a link", "remove the link (or choose another path) and run again")


def kind(path: Path, shown: Path | None = None) -> str | None:
    """'file', 'folder' or None (missing), by lstat; UnsafePathError for a link or anything else.

    `shown` is how messages name the path (the user's spelling rather than the resolved one).
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        raise _link_error(path, shown)
    if stat.S_ISDIR(info.st_mode):
        return "folder"
    if stat.S_ISREG(info.st_mode):
        return "file"
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):  # /dev/null, a disk: never advise removing it
        raise UnsafePathError(shown or path, "is a device, not a regular file; specgen reads and writes only "
                              "regular files", "choose a regular file path and run again")
    raise UnsafePathError(shown or path, "is a device, pipe or socket, not a regular file; specgen reads and "
                          "writes only regular files")


def refuse_links(path: Path, shown: Path | None = None) -> None:
    """Raise UnsafePathError if `path` exists and is a symlink or anything but a regular file."""
    if kind(Path(path), shown) == "folder":
        raise UnsafePathError(shown or path, "is a folder; specgen writes a file there",
                              "give a file path and run again")


def read_regular(path: Path, shown: Path | None = None) -> bytes | None:
    """The bytes of a regular file, None if it is missing; never through a link, never a device or pipe.

    O_NOFOLLOW refuses a link even if one appears after any earlier check; O_NONBLOCK keeps a
    FIFO from blocking the open; fstat then checks what was actually opened.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_error(Path(path), shown) from None
        raise
    # fstat before fdopen: fdopen refuses a folder itself, with an error that names the descriptor, not the path.
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        if kind(Path(path), shown) == "folder":  # a device or pipe raises there, naming what it is
            raise UnsafePathError(shown or path, "is a folder, not a regular file; specgen reads a file there",
                                  "give a file path and run again")
        raise UnsafePathError(shown or path, "is not a regular file; specgen reads only regular files")
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def checked_folder(root: Path, folder: Path, *, create: bool) -> Path:
    """`folder` (below `root`) on the resolved root, every component below the root checked by lstat.

    Each existing component must be a real folder (UnsafePathError names the first that is a
    link or a file). With `create`, missing folders are made one at a time with os.mkdir, which
    never follows a link; without it, checking stops at the first missing one.
    """
    real = Path(os.path.realpath(root))
    relative = Path(folder).relative_to(root)
    if create:
        real.mkdir(parents=True, exist_ok=True)
    elif kind(real, Path(root)) not in ("folder", None):
        raise UnsafePathError(root, "is a file, not a folder", "remove it or choose another folder, then run again")
    current, shown = real, Path(root)
    for part in relative.parts:
        current, shown = current / part, shown / part
        found = kind(current, shown)
        if found == "file":
            raise UnsafePathError(shown, "is a file where specgen needs a folder",
                                  "remove it (or choose another path) and run again")
        if found is None:
            if not create:
                break
            os.mkdir(current)
            kind(current, shown)  # still a folder, not a link raced into its place
    return real / relative


@contextmanager
def writing(target: Path) -> Iterator[None]:
    """Mark an OSError raised inside as a failure to write `target` (for `describe`), then re-raise it.

    The outermost mark wins: a caller that writes on a resolved path names the file as the user
    spelled it.
    """
    try:
        yield
    except OSError as exc:
        exc.specgen_target = Path(target)  # type: ignore[attr-defined]
        raise


def write_atomic(target: Path, content: bytes | str, *, mode: int = 0o666, fsync: bool = True,
                 root: Path | None = None) -> None:
    """Replace `target` with `content` atomically (temporary file, fsync, rename).

    `mode` is filtered by the umask like any new file (not mkstemp's 0600): generated files
    and exports are ordinary files. The parent folder is created if needed. With `root`,
    `target` must lie below it and no folder between them may be a link (checked_folder).
    """
    data = content.encode() if isinstance(content, str) else content
    target = Path(target)
    with writing(target):
        if root is None:
            target.parent.mkdir(parents=True, exist_ok=True)
            real = target
        else:
            real = checked_folder(Path(root), target.parent, create=True) / target.name
        refuse_links(real, target)
        _replace(real, data, mode, fsync)


def _replace(target: Path, data: bytes, mode: int, fsync: bool) -> None:
    temp = staged(target, data, mode, fsync)
    try:
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if fsync:
        fsync_folder(target.parent)


def staged(target: Path, data: bytes, mode: int, fsync: bool = True) -> Path:
    """`data` in a new temporary file beside `target` (`.NAME.<pid>.<8 hex>.tmp`, fsynced unless told not to), for
    the caller to rename into place; stale temporaries of `target` removed first. Nothing is left on a failure."""
    remove_stale_temps(target)
    temp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return temp


# A temporary file is `.NAME.<pid>.<8 hex>.tmp`; one left by a killed writer is removed by the next write of NAME
# once its writer is gone and it has not changed for STALE_AFTER seconds. The age is for a folder that several
# machines share (NFS): a pid that is not alive here may be a live writer there, still appending to its file.
# A folder whose only writer holds a lock (a run folder: runtime/checkpoint.py) removes them all at once.
STALE_AFTER = 60.0
TEMP_NAME = re.compile(r"\.(?P<target>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp")  # `staged`'s names, any target


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove the temporary files of `target` that a writer killed between create and rename left (kill -9,
    OOM, power loss); returns them. Only files of exactly this target's pattern, not changed for STALE_AFTER
    seconds, whose pid is not a live process, and only regular files (never through a link)."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(\d+)\.[0-9a-f]{{8}}\.tmp")
    removed: list[Path] = []
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        found = pattern.fullmatch(entry.name)
        if found is None or pid_alive(int(found.group(1))):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and now - info.st_mtime > STALE_AFTER:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:  # gone already (another writer cleaned it), or not ours to remove
            continue
    return removed


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a running process here (signal 0 checks without sending anything)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    except (OverflowError, ValueError):  # a number no process here can have
        return False
    return True


PROBE_NAME = re.compile(r"^\.specgen-write-check\.\d+$")  # `probe_writable`'s file, left only by a kill


def probe_writable(folder: Path, keep_times: bool = False) -> None:
    """Create and remove `.specgen-write-check.<pid>` in `folder`, or raise the OSError that says why not: the one
    check, before any expensive work, that a command will be able to write there (train's run folder, export's
    output). A file a killed process left is removed by the next probe of its pid here, and by a run folder's
    leftover sweep (runtime/checkpoint.py matches PROBE_NAME). With `keep_times`, the folder's access and
    modification times are set back, so that a check leaves no trace (where the user may set them: its owner)."""
    before = os.stat(folder) if keep_times else None
    probe = folder / f".specgen-write-check.{os.getpid()}"
    probe.unlink(missing_ok=True)  # a killed process's of the same pid: O_EXCL below would refuse it
    os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
    probe.unlink()
    if before is not None:
        # Only the folder's owner (or root) may set its times; for anyone else its modification time shows the probe.
        with contextlib.suppress(OSError):
            os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns))


def fsync_folder(folder: Path) -> None:
    """Make a rename in `folder` durable (best effort: some file systems refuse fsync on folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# The second half of the one-line message, by errno: what the user can do about it.
REMEDIES = {
    errno.EACCES: "check its permissions, or choose another path",
    errno.EPERM: "the system does not allow it (an immutable file or a protected folder); choose another path",
    errno.EROFS: "the file system is read-only; choose a path on a writable one",
    errno.ENOSPC: "the disk is full; free some space and run again",
    errno.EDQUOT: "the disk quota is used up; free some space or raise the quota and run again",
    errno.EFBIG: "the file is larger than the file size limit allows; raise the limit and run again",
    errno.ENOTDIR: "remove that file or choose another path",
    errno.EEXIST: "remove that file or choose another path",
    errno.EISDIR: "give a file path",
    errno.ENOENT: "create the folder or choose another path",
    errno.ELOOP: "remove the link or choose another path",
    errno.ENAMETOOLONG: "choose a shorter path",
}
# Reasons clearer than strerror's for the cases users meet ("file exists" from a mkdir, say).
REASONS = {
    errno.ENOTDIR: "a part of its path is a file, not a folder",
    errno.EEXIST: "a part of its path is a file, not a folder",
    errno.EISDIR: "it is a folder",
    errno.ENOENT: "a folder on its path does not exist",
    errno.ELOOP: "a symbolic link is in the way",
}
# Errors that strike mid-write: the temporary file is removed, so say that nothing was half-written.
MID_WRITE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def describe(exc: OSError) -> str:
    """One line for an environment problem: 'cannot write <file>: <reason>; <what to do>'."""
    if isinstance(exc, UnsafePathError):
        if exc.path is None:
            return f"cannot write: {exc}"
        return f"cannot write {exc.path}: it {exc.what}; {exc.remedy}"
    code = exc.errno or 0
    strerror = exc.strerror or ""
    reason = REASONS.get(code, strerror[:1].lower() + strerror[1:] if strerror else str(exc))
    remedy = REMEDIES.get(code, "check the path and run again")
    target = getattr(exc, "specgen_target", None)
    if target is not None:
        kept = " (the old file, if any, is unchanged)" if code in MID_WRITE else ""
        return f"cannot write {target}: {reason}; {remedy}{kept}"
    if exc.filename is not None:
        return f"{exc.filename}: {reason}; {remedy}"
    return reason  # not about a path (a port in use, say): the system's words are the best we have
