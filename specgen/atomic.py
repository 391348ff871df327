"""The one way specgen writes a file: a temporary file beside it, fsync, then a rename.

Every command that writes (build, schema, train, export, the Triton repository) goes through
`write_atomic`, so a crash, a full disk or a kill -9 leaves either the old file or the new
one, never half of either. The target must not be a symlink or any other non-regular file:
specgen never writes through a link (a link in `generated/` would otherwise let a spec
overwrite files elsewhere), and it says which path is the link.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


class UnsafePathError(OSError):
    """A path specgen refuses to write, delete or read through (a symlink or a non-regular file)."""


def refuse_links(path: Path) -> None:
    """Raise UnsafePathError if `path` exists and is a symlink or anything but a regular file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePathError(f"{path} is a symbolic link; specgen does not write through links. Remove it "
                              "(or replace it with a regular file) and run again.")
    if not stat.S_ISREG(info.st_mode):
        raise UnsafePathError(f"{path} exists and is not a regular file; specgen writes only regular files there.")


def write_atomic(target: Path, content: bytes | str, *, mode: int = 0o666, fsync: bool = True) -> None:
    """Replace `target` with `content` atomically (temporary file, fsync, rename).

    `mode` is filtered by the umask like any new file (not mkstemp's 0600): generated files
    and exports are ordinary files. The parent folder is created if needed.
    """
    data = content.encode() if isinstance(content, str) else content
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    refuse_links(target)
    temp = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if fsync:
        fsync_folder(target.parent)


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
