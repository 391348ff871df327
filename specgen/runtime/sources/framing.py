"""A TFRecord file's framing walked in Python before TensorFlow reads it.

A TFRecord file is a sequence of frames: a uint64 length, a uint32 masked CRC-32C of those 8 bytes, the
record's bytes, a uint32 masked CRC-32C of the record (little-endian). TensorFlow's reader sizes its buffer
from the length before it reads the record, so a header that declares 2^40 or 2^62 bytes (with a right
checksum: anyone can compute one) ends the process with a signal instead of an error. `walk` reads only the
headers (12 bytes each, the records themselves are skipped over with a seek) and checks that each length's
checksum matches and that the record it declares fits in the bytes left in the file; only a file that passes
reaches TensorFlow, so no buffer is larger than the file.

The records' own checksums are not checked here: TensorFlow's reader checks each one as it reads the record
(the checking pass reads every record right after this walk; a mismatch is its one-line "corrupted record"),
and a bad record checksum cannot make it allocate more than the length, now known to fit. Checking them here
would read every byte twice, the second time in pure Python (about 0.3 us a byte: a second a 4 MB record).
A framing error is never skipped (`skip_bad`): after a length that is wrong there is no telling where the
next frame starts, so nothing after it can be read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from specgen import framing
from specgen.runtime.sources.base import DataError, open_regular

READ_BUFFER = 1 << 20  # bytes read at once: the headers of small records come in together, large ones are seeked over


class FramingError(DataError):
    """A frame that does not read (the file is damaged or not a TFRecord file): the record, counted from 0, the
    byte its frame starts at, and why."""

    def __init__(self, index: int, offset: int, reason: str):
        super().__init__(f"cannot read record {index} (at byte {offset:,}): {reason}")
        self.index, self.offset, self.reason = index, offset, reason


@dataclass(frozen=True)
class Frames:
    """What the walk found: how many records, and the largest record's bytes (what a read of one may hold)."""

    records: int
    largest: int


def walk(path: str | os.PathLike[str]) -> Frames:
    """Every frame of the file at `path` checked (a length's checksum, the length within the bytes left), or
    FramingError at the first that is not; DataError for a path that is not a regular file (never read as one:
    a FIFO would block, a device never end)."""
    records = largest = 0
    for _, length in _frames(path):
        records, largest = records + 1, max(largest, length)
    return Frames(records, largest)


def offset_of(path: str | os.PathLike[str], index: int) -> int | None:
    """The byte at which record `index` starts (for a message); None when the frames no longer reach it."""
    try:
        return next((offset for i, (offset, _) in enumerate(_frames(path)) if i == index), None)
    except DataError:  # changed since `walk` passed it
        return None


def _frames(path: str | os.PathLike[str]) -> Iterator[tuple[int, int]]:
    """Each frame's (offset, record length), its header checked; the records themselves are seeked over."""
    with open_regular(path, READ_BUFFER) as file:
        size = os.fstat(file.fileno()).st_size
        offset = index = 0
        while offset < size:
            length = _length(file.read(framing.HEADER), index, offset, size)
            yield offset, length
            file.seek(length + framing.FOOTER, os.SEEK_CUR)
            offset, index = offset + framing.size(length), index + 1


def _length(raw: bytes, index: int, offset: int, size: int) -> int:
    """The record length a frame's header declares, or FramingError when it cannot be the length."""
    header = framing.header(raw)
    if header is None:
        raise FramingError(index, offset, f"the file ends inside its 12-byte header ({len(raw)} bytes)")
    if not header.intact:
        raise FramingError(index, offset, "the checksum of its length does not match")
    after = size - offset - framing.HEADER
    if header.length + framing.FOOTER > after:
        raise FramingError(index, offset, f"it declares {header.length:,} bytes, but the file has {after:,} after "
                           "its header, fewer than the record and its 4-byte checksum")
    return header.length
