"""Reading a spec file's text: a regular file, at most MAX_FILE_BYTES, UTF-8, read without blocking.

The bound holds before the work it limits: `stat` then `read_text` would read `/dev/zero` until memory
runs out and block forever on a FIFO.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from specgen.diagnostics import Diagnostic, Position, SpecError
from specgen.spec.yaml_compose import MAX_FILE_BYTES


def read_spec_text(path: Path, shown: str) -> str:
    """The text of a regular file of at most MAX_FILE_BYTES, or SpecError.

    `stat` then `read_text` would read `/dev/zero` until memory runs out and block forever on a
    FIFO: open without blocking, require a regular file on the open descriptor (no race with a
    rename), and read at most one byte past the limit whatever the file claims its size is.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        if os.path.islink(path):  # "No such file or directory" for a path that is there: its target is not
            raise _file_error(shown, f"the spec path is a dangling symbolic link (to {os.readlink(path)}, which does "
                                     "not exist); fix its target or remove it") from None
        raise _file_error(shown, f"cannot read the spec: {exc.strerror}") from None
    except OSError as exc:
        raise _file_error(shown, _unopened(path, exc)) from None
    try:
        info = os.fstat(fd)
        kind = _file_kind(info.st_mode)
        if kind is not None:
            raise _file_error(shown, f"the spec path is {kind}, not a regular file")
        data = _read_at_most(fd, MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise _file_error(shown, f"cannot read the spec: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise _file_error(shown, f"the file is {max(info.st_size, len(data))} bytes; specs are limited to "
                          f"{MAX_FILE_BYTES} bytes (is this really a spec?)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError([Diagnostic(shown, _byte_position(data, exc.start), f"the file is not UTF-8 text: "
                                    f"{exc.reason} (byte 0x{data[exc.start]:02x}); save it as UTF-8")]) from None
    # Universal newlines, as `read_text` gave: values never hold a '\r' from Windows line ends.
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _unopened(path: Path, exc: OSError) -> str:
    """Why `path` did not open: what it is when it is no file at all (a socket: ENXIO), else the system's words."""
    try:
        kind = _file_kind(os.stat(path).st_mode)
    except OSError:
        kind = None
    return f"the spec path is {kind}, not a regular file" if kind else f"cannot read the spec: {exc.strerror}"


def _byte_position(data: bytes, offset: int) -> Position:
    """line:col of the first byte that is not UTF-8, counted as the text's would be (columns in characters)."""
    before = data[:offset].decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    return Position(before.count("\n") + 1, len(before) - before.rfind("\n"))


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _file_kind(mode: int) -> str | None:
    """None for a regular file, else what the path is, for the message."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _file_error(shown: str, message: str) -> SpecError:
    return SpecError([Diagnostic(shown, None, message)])
