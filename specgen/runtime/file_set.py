"""Several files of one folder replaced as one set: the export folder, a Triton version folder.

`write_atomic` replaces one file atomically; a folder whose files describe each other (export.json names the
checkpoint and the parity of model.onnx; a version folder's variant.json the SHA-256 of its model.onnx) needs
more: a kill between two renames must not leave a new file beside an old one that claims to describe it.

`write_set` gives three outcomes after a kill, a full disk or any error at any point: the whole old set, the
whole new set, or a set without its `last` file (export.json, or a version's model.onnx), which readers refuse
(`specgen report` and MLflow read export.json; a version folder without model.onnx is no version). Every new
file is written and fsynced as a temporary first, so a full disk changes nothing; then `last` is removed, the
others renamed into place, and `last` renamed in at the end.

Temporaries are named as write_atomic names its own (`.NAME.<pid>.<hex>.tmp`), so one a kill leaves behind is
removed by the next write of that file (specgen.atomic.remove_stale_temps).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from specgen.atomic import checked_folder, fsync_folder, refuse_links, staged, writing


def write_set(folder: Path, files: Mapping[str, bytes], last: str, *, root: Path | None = None,
              mode: int = 0o666) -> None:
    """Replace `files` (name -> bytes) in `folder` as one set, `last` (one of them) renamed in last.

    With `root`, `folder` lies below it and no folder between them may be a link (atomic.checked_folder)."""
    if last not in files:
        raise ValueError(f"'{last}' is not one of the files {sorted(files)}")
    folder = Path(folder)
    with writing(folder / last):
        real = _real_folder(folder, root)
        for name in files:  # a link, a folder or a device where a file goes: refused before anything is written
            refuse_links(real / name, folder / name)
    staged: list[tuple[str, Path]] = []
    try:
        for name, data in files.items():  # every byte on disk before anything is replaced: a full disk changes nothing
            with writing(folder / name):
                staged.append((name, _stage(real / name, data, mode)))
        with writing(folder / last):
            (real / last).unlink(missing_ok=True)  # from here until the end, readers find no description: they refuse
            fsync_folder(real)
        for name, temp in sorted(staged, key=lambda item: item[0] == last):  # `last` renamed in at the end
            with writing(folder / name):
                os.replace(temp, real / name)
        fsync_folder(real)
    finally:
        for _, temp in staged:  # after a failure: no temporary left (a renamed one is gone already)
            temp.unlink(missing_ok=True)


def _real_folder(folder: Path, root: Path | None) -> Path:
    if root is not None:
        return checked_folder(Path(root), folder, create=True)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _stage(target: Path, data: bytes, mode: int) -> Path:
    """`data` in a new temporary file beside `target`, fsynced; its path (atomic.py's temporaries and their cleanup)."""
    return staged(target, data, mode)
