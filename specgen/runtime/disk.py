"""TensorFlow's file errors as the OSError they were: what a full disk looks like to specgen's one-line reports.

TensorFlow maps errno to its own error codes (ENOSPC and EDQUOT to ResourceExhaustedError, EFBIG to
OutOfRangeError, ENOENT to NotFoundError, EACCES to PermissionDeniedError, ENOTDIR to FailedPreconditionError) and
keeps only strerror at the end of its message ("<path>; No space left on device"); `os_error` reads the errno and
the path back from that text.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import tensorflow as tf

# Errors only a write gives, each with what frees the writer: TensorFlow maps errno to its own error codes
# and ends its message with strerror ("<path>; No space left on device"), which is all that is left of it.
WRITE_ERRORS = {errno.ENOSPC: "free space", errno.EDQUOT: "free space or raise the disk quota",
                errno.EFBIG: "raise the file-size limit (ulimit -f)", errno.EROFS: "make the file system writable"}
# Errors a write into a folder specgen writes gives when that folder changed under it (a file or folder removed or
# replaced, its permissions changed, a network file system's handle gone stale), with what to do. A read gives them
# too (a data file removed mid-run), so they count as a write's only for a path inside the folder being written.
FOLDER_ERRORS = {errno.ENOENT: "leave the run folder's files alone while it trains (something removed one)",
                 errno.ENOTDIR: "leave the run folder's files alone while it trains (something replaced a folder)",
                 errno.EACCES: "make the run folder writable", errno.EPERM: "make the run folder writable",
                 errno.ESTALE: "check the network file system the run folder is on (its file handle went stale)",
                 errno.EIO: "check the disk the run folder is on (an input/output error)"}


def os_error(exc: BaseException, within: Path | None = None) -> OSError | None:
    """`exc` as an OSError: itself, or a TensorFlow file error that names one of WRITE_ERRORS (or, for a path
    inside the folder `within`, one of FOLDER_ERRORS); None otherwise."""
    if isinstance(exc, OSError):
        return exc
    if not isinstance(exc, tf.errors.OpError):
        return None
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", exc.message)
    numbers = [*WRITE_ERRORS, *(FOLDER_ERRORS if within is not None else ())]
    for number in numbers:
        found = re.search(rf"^(.*?); {re.escape(os.strerror(number))}", text, re.MULTILINE)
        if found and (number in WRITE_ERRORS or _inside(found.group(1).strip(), within)):
            return OSError(number, os.strerror(number), found.group(1).strip())
    return None


def _inside(path: str, folder: Path | None) -> bool:
    """Whether `path` (as TensorFlow printed it) lies in `folder` or is it."""
    if folder is None or not path:
        return False
    return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(folder))


def remedy(error: OSError, default: str) -> str:
    """What frees a writer that got `error`: WRITE_ERRORS', FOLDER_ERRORS', else `default`."""
    number = error.errno or 0
    return WRITE_ERRORS.get(number) or FOLDER_ERRORS.get(number) or default
