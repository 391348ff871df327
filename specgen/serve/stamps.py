"""What says a live repository's files changed (control.py), and when a change is complete enough to load.

A file's stamp is (inode, size, mtime_ns, ctime_ns). The ctime is there because a user tool can set the mtime
(`cp -p`, `touch -r`, a reproducible build's SOURCE_DATE_EPOCH) but not the ctime, which every write, rename
and chmod moves: a file replaced in place by one of the same size and mtime still changes its stamp. Triton's
core takes max(mtime, ctime) for the same reason.

A stamp that changed says a writer is at work, not that it is done: a model.onnx rewritten in place (`rsync
--inplace`, `dd conv=notrunc`, any r+b or mmap writer) keeps its size and passes, between two writes, through
files that mix old and new weights and still load. So a polled change is loaded only once the stamps held still
over one poll interval and at least SETTLE_SECONDS, and the files are stamped again after they were read: a load
that raced a writer is thrown away, nothing of it served or recorded, and tried again at the next poll.

No stat() can tell a writer that paused from one that finished: a writer pausing longer than the settle time
between two writes can still be read half-way. Writing the file under another name and renaming it into place
(what `specgen export --triton` does) is the only way that is never read half-written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specgen.serve.model_config import RepositoryError
from specgen.serve.repository import file_stamp, version_folders

Snapshot = tuple[Any, ...]
# A polled change is loaded once its stamps held still this long (and over one poll interval): a writer copying in
# chunks (rsync --inplace, dd, a download) pauses between writes, for far less than a second unless it stalls; a
# config.pbtxt written in two writes half a second apart was read half-way with a settle of one 0.1 s poll alone.
# The cost: a change is served up to this much later, next to the poll interval (15 s by default).
SETTLE_SECONDS = 1.0
# An explicit load stamps the model folder twice this far apart before reading it. Whoever wrote the files asks for
# it once they are written, so the wait only has to catch a writer still at work (chunks land well within it), and
# stays short next to onnxruntime's own load.
EXPLICIT_SETTLE_SECONDS = 0.2


__all__ = ["EXPLICIT_SETTLE_SECONDS", "SETTLE_SECONDS", "Snapshot", "file_stamp", "folder_stamp", "snapshot"]


def _files(folder: Path) -> tuple[tuple[str, Any], ...]:
    """Every file's name and stamp in `folder`, by name (OSError when it cannot be listed)."""
    return tuple(sorted((f.name, file_stamp(f)) for f in folder.iterdir()))


def folder_stamp(folder: Path) -> tuple[tuple[str, Any], ...] | None:
    """What says a version folder changed: its files (the model, and a precision variant's variant.json,
    sample.npz and model.fp32.onnx); None when it cannot be listed."""
    try:
        return _files(folder)
    except OSError:
        return None


def snapshot(folder: Path) -> Snapshot:
    """What says a model folder changed: config.pbtxt's and every version folder's files' stamps."""
    try:
        versions = [(number, _files(p)) for number, p in version_folders(folder).items()]
    except (OSError, RepositoryError):  # unreadable now: compared as such, and read (and refused) by the load
        return ()
    return file_stamp(folder / "config.pbtxt"), tuple(versions)
