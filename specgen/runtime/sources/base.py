"""What every reader shares: its result (`Source`), its error type, and how values are shown in messages."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from specgen import text
from specgen.errors import SpecgenError

if TYPE_CHECKING:
    import tensorflow as tf

FLOAT_KINDS = "f"
INT_KINDS = "iu"

# Where an element came from in its file, for messages: (spec name, its index, flat index within the example).
Locate = Callable[[str, tuple[int, ...], int], str]


class DataError(SpecgenError, ValueError):
    """A data file that cannot be used; the message says what is wrong and what to do."""


REGULAR, MISSING = "a regular file", "missing"  # what file_kind says of a readable file, of nothing there
_NOT_REGULAR = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def file_kind(path: str | os.PathLike[str]) -> str:
    """What `path` is, links followed, found without opening it: REGULAR, MISSING (a dangling link too), or what
    it is as a message says it ('a FIFO (named pipe)', 'a character device', 'a directory', ...). Only a regular
    file is data: opening a FIFO blocks until something writes to it, and /dev/zero never ends."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return MISSING
    except OSError as exc:  # a folder on the way that may not be searched, a loop of links
        return "a symbolic link loop" if exc.errno == errno.ELOOP else f"a path that cannot be examined ({exc.strerror})"
    return _what(mode)


def open_regular(path: str | os.PathLike[str], buffering: int = -1) -> IO[bytes]:
    """`path` open for reading, or DataError saying what it is when it is not a regular file. The open does not
    block on a FIFO (O_NONBLOCK; put there after a `file_kind` check, say) and what was opened is checked
    (fstat) before a byte is read; O_NONBLOCK changes nothing for a regular file's reads."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise DataError(f"cannot read the file: {exc.strerror}") from None
    what = _what(os.fstat(fd).st_mode)
    if what != REGULAR:
        os.close(fd)
        raise DataError(f"the path is {what}, not a regular file")
    return os.fdopen(fd, "rb", buffering=buffering)


def _what(mode: int) -> str:
    if stat.S_ISREG(mode):
        return REGULAR
    return next((what for test, what in _NOT_REGULAR if test(mode)), "not a regular file")


@dataclass
class Source:
    """One stage's data: a dataset of (features, labels) examples and its size."""

    dataset: tf.data.Dataset
    examples: int
    files: tuple[Path, ...] = ()  # the files it streams, where it streams several (`specgen data` lists them)
    # (class name, examples) in class-id order, where the reader knows them without reading every example
    # (a class folder); otherwise `specgen data` counts the labels (runtime/commands/data.py).
    classes: tuple[tuple[str, int], ...] | None = None
    # data.train's augmentation over repeated batches (specgen/runtime/augment); None: none declared
    augment: Callable[[tf.data.Dataset], tf.data.Dataset] | None = None
    # Worker `index` of `workers` under multi_worker: its share of the files (runtime/data.py's for_worker);
    # None for a source that is one file (every worker reads it all and keeps its replicas' slices).
    split: Callable[[int, int], WorkerShare] | None = None
    # The updates each pass holds where that is not this source's own count: a multi_worker share's passes are cut
    # to the whole set's (runtime/data.py's for_worker), so that an epoch is one pass on every worker. None: its own.
    pass_updates: int | None = None


@dataclass(frozen=True)
class WorkerShare:
    """One worker's disjoint share of a sharded source: its files (balanced by their record counts, runtime/sources/
    tfrecord.py's `assign`), with the facts that decide whether it matches the one-process order and how evenly the
    workers' shares hold the records. Worked out from the shards' counts alone: its dataset is built (`build`: a file
    cache filled) only once runtime/data.py's for_worker has decided the shares stand, not for a fallback."""

    examples: int
    files: tuple[Path, ...]
    shards: int  # of the whole source
    cycle: int  # shards the whole source reads at once (min(cycle_length, shards))
    equal: bool  # every shard of the whole source holds the same number of records
    shares: tuple[int, ...]  # the examples of every worker's share under the same assignment, worker 0 first
    # Every worker's shards as places in the whole source's `files`, in the order it reads them, worker 0 first:
    # what a saved data position belongs to (a checkpoint's `data_shares`, runtime/placement/positions.py).
    layout: tuple[tuple[int, ...], ...]
    build: Callable[[], tf.data.Dataset]  # this worker's shards streamed as the whole source streams


SHOWN_ENTRIES = 3  # paths of a list that a source's name shows; the rest are counted


def source_text(loaded: Any, source: Any, show: Callable[[Path], str] = str) -> str:
    """A stage's source as messages and `specgen data` name it: its path (`show`n), or the list a source gives as a
    list (a `tfrecord:` list: `[a.tfrecord, b.tfrecord]`, `[a, b, c, ... (2 more)]`), never the list's first entry
    alone; a message about one file of it names that file itself. `loaded`: the LoadedSpec; `source`: the stage's
    DataSourceIR (its `path` is a list's first entry)."""
    given = getattr(getattr(loaded.spec.data, source.stage, None), source.kind, None)
    if not isinstance(given, list) or len(given) < 2:
        return show(source.path)
    names = [show(loaded.folder / entry) for entry in given[:SHOWN_ENTRIES]]
    more = [f"... ({len(given) - SHOWN_ENTRIES} more)"] if len(given) > SHOWN_ENTRIES else []
    return f"[{', '.join(names + more)}]"


@dataclass(frozen=True)
class Wanted:
    """What the spec expects of one feature or label."""

    shape: tuple[int | str | None, ...]  # one example's shape; a str: a named dynamic dimension
    kind: str  # 'float' or 'int'
    bound: int | None = None  # integers must be in [0, bound)
    why: str = ""  # what sets the bound, for messages
    # 'int': the integer dtype every value must fit exactly (an int32 input's; labels and uint8 pixels, whose
    # bound is tighter, read as int64): a value outside is an error, never wrapped by a cast
    dtype: str = "int64"


def shape_text(shape: tuple[int | str | None, ...]) -> str:
    return text.shape(shape, unknown="N")


def first(mask: np.ndarray) -> tuple[tuple[int, ...], int]:
    """Index of the first True element of `mask` ([rows, ...]) and its flat index within its example."""
    index = tuple(int(i) for i in np.argwhere(mask)[0])
    flat = int(np.ravel_multi_index(index[1:], mask.shape[1:])) if mask.ndim > 1 else 0
    return index, flat


def dtype_text(dtype: np.dtype) -> str:
    """A dtype as a message shows it, with what it holds when numpy's name does not say: <U32 (text)."""
    word = {"U": "text", "S": "bytes", "b": "booleans", "c": "complex numbers", "V": "records", "M": "dates",
            "m": "time spans"}.get(dtype.kind)
    return f"{dtype} ({word})" if word else str(dtype)


def describe(value: Any) -> str:
    """A value as a message shows it: NaN, infinite, -infinite, 12, 0.5."""
    if isinstance(value, (float, np.floating)):
        if np.isnan(value):
            return "NaN"
        if np.isinf(value):
            return "infinite" if value > 0 else "-infinite"
        return f"{float(value):g}"
    return str(value)


def lossy_cast(raw: np.ndarray, dtype: np.dtype | type) -> tuple[int, ...] | None:
    """The index of the first value of `raw` that casting to `dtype` would change, or None when every value survives.

    numpy's `can_cast(..., 'same_kind')` allows int64 -> float32 although float32 holds integers exactly only up
    to 2**24 (16777217 becomes 16777216; uint64 2**64-1 becomes 2**64), and bool -> anything: a value is checked by
    casting it there and back. Booleans are not numbers here: the caller refuses their dtype first."""
    target = np.dtype(dtype)
    if raw.dtype.kind not in INT_KINDS or target.kind not in FLOAT_KINDS or not raw.size:
        return None
    if raw.dtype.itemsize * 8 <= np.finfo(target).nmant + 1:  # int8/int16 into float32: always exact
        return None
    with np.errstate(invalid="ignore", over="ignore"):  # out-of-range casts back are what we look for
        lost = raw.astype(target).astype(raw.dtype) != raw
    if not lost.any():
        return None
    return tuple(int(i) for i in np.argwhere(lost)[0])
