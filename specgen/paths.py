"""How the CLI prints a path: relative to the working directory when it lies under it.

Run folders and checkpoints are resolved to absolute paths (a spec's relative paths count
from the spec's folder, not the working directory), so without this every message would
carry the machine's own prefix (`/home/me/project/runs/x/ckpt-00000066`). A path outside
the working directory, or one given relative, is printed as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from specgen.text import printable


def plain_name(name: str) -> bool:
    """Whether `name` is one path component on every OS, so a folder joined with it stays that folder's child: not
    empty, not `.` or `..`, no `/`, `\\` or NUL (a model folder, a version folder's file, a file beside a model)."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")


def _bases() -> list[Path]:
    """The working directory as the shell names it and with links resolved (run folders are resolved)."""
    try:
        cwd = Path.cwd()
    except OSError:  # the working directory was removed
        return []
    resolved = cwd.resolve()
    return [cwd] if resolved == cwd else [cwd, resolved]


def shown(path: str | os.PathLike[str] | bytes) -> str:
    """`path` as printed: `runs/x/ckpt-00000066` for `/cwd/runs/x/ckpt-00000066`; `.` for the working
    directory itself; anything relative or outside the working directory unchanged but for escaping:
    control characters, bidi overrides and undecodable bytes print as escapes (`text.printable`),
    because a file name can hold anything and a message stays one line that the terminal only shows."""
    return printable(_relative(os.fsdecode(path)))


def _relative(text: str) -> str:
    if not os.path.isabs(text):
        return text
    normal = Path(os.path.normpath(text))
    for base in _bases():
        if normal.is_relative_to(base):
            return str(normal.relative_to(base)) or "."
    return text
