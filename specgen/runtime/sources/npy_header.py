"""An .npz member's .npy header, read and checked before numpy allocates or reads anything.

numpy's own reader allocates the array the header declares before it reads a byte of data (a 308-byte file
declaring shape (2**40, 8, 8, 1) asks for 256 TiB) and lets its header parser's exceptions through (a header
that is not a closed literal is a `tokenize.TokenError`). Here the header is parsed alone, any exception of
the parser is a "damaged" line, and the declared size must fit both what the member holds (the zip
directory's uncompressed size, which zipfile also stops inflating at) and MEMORY_LIMIT.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from specgen.runtime.sources.base import DataError

CHUNK = 1 << 24  # bytes read at a time: a member is never held twice in memory
_HEADER_READERS: dict[tuple[int, int], Callable[..., Any]] = {
    (1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def memory_limit() -> int:
    """The bound on the bytes the arrays read from one .npz may declare together: the memory this process may use
    (the machine's physical memory, or the container's cgroup limit when lower). An array larger than that can
    never be held, and the model's float32 copy of it needs as much again; refusing it from the header costs a
    few bytes of reading, where numpy would allocate first and fail (or be killed) later."""
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system
        limit = 64 << 30
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as handle:  # cgroup v2; "max" when unlimited
            text = handle.read(64).strip()
        limit = min(limit, int(text)) if text.isdigit() else limit
    except OSError:
        pass
    return int(limit)


@dataclass(frozen=True)
class NpyHeader:
    name: str  # the array's name in the archive, for messages
    shape: tuple[int, ...]
    fortran: bool
    dtype: np.dtype
    offset: int  # where the data starts in the member (magic and header before it)
    nbytes: int  # what the header declares

    def read(self, member: IO[bytes]) -> np.ndarray:
        """The declared bytes after the header (the member positioned there), as an array of the declared shape."""
        if self.dtype.itemsize == 0:  # no bytes to read (np.dtype('V0'), '<U0'): nothing to view either
            return np.empty(self.shape, self.dtype)
        array = np.empty(self.nbytes, np.uint8)
        view, done = memoryview(array.data), 0
        while done < self.nbytes:
            chunk = member.read(min(CHUNK, self.nbytes - done))
            if not chunk:
                raise DataError(f"array '{self.name}' is damaged or truncated (its data ends after {done} of the "
                                f"{self.nbytes} bytes its header declares); write the file again with numpy.savez")
            view[done:done + len(chunk)] = chunk
            done += len(chunk)
        return array.view(self.dtype).reshape(self.shape, order="F" if self.fortran else "C")


def read_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str) -> NpyHeader:
    """The member's header, checked: a .npy header numpy can parse, no Python objects, no negative dimension, and
    a declared size within what the member holds and within memory_limit(). DataError naming the array otherwise."""
    try:
        with archive.open(info) as member:
            version = np.lib.format.read_magic(member)
            reader = _HEADER_READERS.get(version)
            if reader is None:
                raise ValueError(f".npy format version {version[0]}.{version[1]}, which specgen does not read")
            shape, fortran, dtype = reader(member)
            offset = member.tell()
    except DataError:
        raise
    except Exception as exc:  # numpy's parser raises ValueError, SyntaxError, tokenize.TokenError...
        raise _damaged(name, f"its .npy header cannot be read: {_first_line(exc)}") from None
    if dtype.hasobject:
        raise DataError(f"array '{name}' holds Python objects (dtype object), which specgen does not load "
                        "(unpickling can run code); save it as a numeric array")
    if any(d < 0 for d in shape):
        raise _damaged(name, "negative dimensions are not allowed")
    nbytes = math.prod(shape) * dtype.itemsize  # Python integers: numpy's own product can overflow int64
    header = NpyHeader(name, tuple(shape), bool(fortran), dtype, offset, nbytes)
    held = info.file_size - offset if info.compress_type != zipfile.ZIP_STORED else min(
        info.file_size, info.compress_size) - offset
    if nbytes > held:
        raise _damaged(name, f"its header declares {_size(nbytes)} of data, shape {list(shape)} of {dtype}, but the "
                       f"member holds {_size(max(held, 0))}")
    check_total([header])
    return header


def check_total(headers: list[NpyHeader]) -> None:
    """The arrays to be read fit in memory together (memory_limit), or DataError naming the largest."""
    total, limit = sum(h.nbytes for h in headers), memory_limit()
    if total <= limit or not headers:
        return
    largest = max(headers, key=lambda h: h.nbytes)
    together = f"; the {len(headers)} arrays read declare {_size(total)} together" if len(headers) > 1 else ""
    raise DataError(f"array '{largest.name}' declares shape {list(largest.shape)} of {largest.dtype} "
                    f"({_size(largest.nbytes)}){together}, more than the {_size(limit)} of memory this process "
                    "may use; use a smaller file (or split the data)")


def _damaged(name: str, why: str) -> DataError:
    return DataError(f"array '{name}' is damaged or truncated ({why}); write the file again with numpy.savez")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def _size(nbytes: int) -> str:
    """Bytes as a person reads them: 308 bytes, 1.5 MiB, 256 TiB (a header may declare any integer)."""
    if nbytes.bit_length() > 80:
        return f"about 2**{nbytes.bit_length() - 1} bytes"
    value, unit = float(nbytes), "bytes"
    for larger in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger
    return f"{nbytes} bytes" if unit == "bytes" else f"{value:.3g} {unit}"
