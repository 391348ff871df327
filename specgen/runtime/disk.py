"""TensorFlow's file errors as the OSError they were: what a full disk looks like to specgen's one-line reports.

TensorFlow maps errno to its own error codes (ENOSPC and EDQUOT to ResourceExhaustedError, EFBIG to
OutOfRangeError) and keeps only strerror at the end of its message ("<path>; No space left on device");
`os_error` reads the errno and the path back from that text.
"""

from __future__ import annotations

import errno
import os
import re

import tensorflow as tf

# Errors only a write gives, each with what frees the writer: TensorFlow maps errno to its own error codes
# and ends its message with strerror ("<path>; No space left on device"), which is all that is left of it.
WRITE_ERRORS = {errno.ENOSPC: "free space", errno.EDQUOT: "free space or raise the disk quota",
                errno.EFBIG: "raise the file-size limit (ulimit -f)", errno.EROFS: "make the file system writable"}


def os_error(exc: BaseException) -> OSError | None:
    """`exc` as an OSError: itself, or a TensorFlow file error that names one of WRITE_ERRORS; None otherwise."""
    if isinstance(exc, OSError):
        return exc
    if not isinstance(exc, tf.errors.OpError):
        return None
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", exc.message)
    for number in WRITE_ERRORS:
        if found := re.search(rf"^(.*?); {re.escape(os.strerror(number))}", text, re.MULTILINE):
            return OSError(number, os.strerror(number), found.group(1).strip())
    return None
