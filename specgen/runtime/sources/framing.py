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

A GZIP- or ZLIB-compressed file (the source's `compression`) is walked the same way over its inflated data,
inflated a chunk at a time and never held (a bomb costs time, not memory); the bytes left after a header are
then known only by reading on, so a length is checked by skipping that many inflated bytes. A file read with
`compression: none` whose first frame does not read but which starts with the gzip or zlib header is said to
be compressed (`compressed_as`), with the key to set.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from specgen import framing
from specgen.runtime.sources.base import DataError, open_regular

READ_BUFFER = 1 << 20  # bytes read at once: the headers of small records come in together, large ones are seeked over
INFLATE_INPUT = 1 << 16  # compressed bytes fed to zlib at once (its output is bounded by READ_BUFFER)
# zlib's window bits for each compression TensorFlow's TFRecord reader takes: gzip's header, zlib's header.
WBITS = {"gzip": zlib.MAX_WBITS | 16, "zlib": zlib.MAX_WBITS}
# TFRecordDataset's compression_type for each value of the source's `compression` key.
COMPRESSION_TYPE = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}


class FramingError(DataError):
    """A frame that does not read (the file is damaged or not a TFRecord file): the record, counted from 0, the
    byte its frame starts at, and why."""

    def __init__(self, index: int, offset: int, reason: str, inflated: bool = False):
        where = f"byte {offset:,} of the inflated data" if inflated else f"byte {offset:,}"
        super().__init__(f"cannot read record {index} (at {where}): {reason}")
        self.index, self.offset, self.reason = index, offset, reason


@dataclass(frozen=True)
class Frames:
    """What the walk found: how many records, and the largest record's bytes (what a read of one may hold)."""

    records: int
    largest: int


def walk(path: str | os.PathLike[str], compression: str = "none") -> Frames:
    """Every frame of the file at `path` checked (a length's checksum, the length within the bytes left), or
    FramingError at the first that is not; DataError for a path that is not a regular file (never read as one:
    a FIFO would block, a device never end) and for compressed data that does not inflate."""
    records = largest = 0
    for _, length in _frames(path, compression):
        records, largest = records + 1, max(largest, length)
    return Frames(records, largest)


def offset_of(path: str | os.PathLike[str], index: int, compression: str = "none") -> int | None:
    """The byte at which record `index` starts (for a message); None when the frames no longer reach it."""
    try:
        return next((offset for i, (offset, _) in enumerate(_frames(path, compression)) if i == index), None)
    except DataError:  # changed since `walk` passed it
        return None


def compressed_as(path: str | os.PathLike[str]) -> str | None:
    """'gzip' or 'zlib' when the file starts with that format's header, else None. Asked only once a first frame
    failed to read: a plain TFRecord file's first length can begin with those bytes too."""
    try:
        with open_regular(path) as file:
            return _magic(file.read(2))
    except DataError:
        return None


def _magic(head: bytes) -> str | None:
    """gzip's magic 1f 8b; zlib's method byte x8 (window up to 7) with the header checksum (a multiple of 31)."""
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0:
        return "zlib"
    return None


def _frames(path: str | os.PathLike[str], compression: str) -> Iterator[tuple[int, int]]:
    """Each frame's (offset, record length), its header checked; the records themselves are skipped over."""
    with open_regular(path, READ_BUFFER) as file:
        if compression == "none":
            yield from _plain_frames(file)
        else:
            yield from _inflated_frames(Inflated(file, compression))


def _plain_frames(file: IO[bytes]) -> Iterator[tuple[int, int]]:
    """An uncompressed file's frames: each length checked against the file's size, the records seeked over."""
    size = os.fstat(file.fileno()).st_size
    offset = index = 0
    while offset < size:
        length = _length(file.read(framing.HEADER), index, offset, size)
        yield offset, length
        file.seek(length + framing.FOOTER, os.SEEK_CUR)
        offset, index = offset + framing.size(length), index + 1


def _inflated_frames(stream: Inflated) -> Iterator[tuple[int, int]]:
    """A compressed file's frames, over its inflated data: each length checked by skipping that many bytes."""
    offset = index = 0
    while raw := stream.read(framing.HEADER):
        header = framing.header(raw)
        if header is None:
            raise FramingError(index, offset, f"the data ends inside its 12-byte header ({len(raw)} bytes)", True)
        if not header.intact:
            raise FramingError(index, offset, "the checksum of its length does not match", True)
        after = stream.skip(header.length + framing.FOOTER)
        if after < header.length + framing.FOOTER:
            raise FramingError(index, offset, f"it declares {header.length:,} bytes, but the inflated data has "
                               f"{after:,} after its header, fewer than the record and its 4-byte checksum", True)
        yield offset, header.length
        offset, index = offset + framing.size(header.length), index + 1


class Inflated:
    """A GZIP or ZLIB file's inflated bytes as a stream that is read or skipped, never held: zlib gives at most
    READ_BUFFER bytes a call. Members that follow one another (concatenated gzip files) read as one stream, as
    TensorFlow's reader reads them."""

    def __init__(self, file: IO[bytes], compression: str):
        self.file, self.compression, self.wbits = file, compression, WBITS[compression]
        self.inflate = zlib.decompressobj(self.wbits)
        self.pending, self.at = b"", 0  # inflated bytes, and how many of them are used (no copy per read)
        self.input, self.fed = b"", False  # compressed bytes not yet inflated; whether a stream is open

    def read(self, count: int) -> bytes:
        """Up to `count` inflated bytes (fewer only at the end of the data)."""
        parts = []
        while count and self._available():
            part = self.pending[self.at:self.at + count]
            self.at, count = self.at + len(part), count - len(part)
            parts.append(part)
        return b"".join(parts)

    def skip(self, count: int) -> int:
        """`count` inflated bytes passed over; how many there were (fewer only at the end of the data)."""
        skipped = 0
        while skipped < count and self._available():
            step = min(count - skipped, len(self.pending) - self.at)
            self.at, skipped = self.at + step, skipped + step
        return skipped

    def _available(self) -> bool:
        """Whether inflated bytes are left to use, inflating more when none are; False at the data's clean end."""
        name = self.compression.upper()
        while self.at == len(self.pending):
            self.input = self.input or self.file.read(INFLATE_INPUT)
            if not self.input and not self.fed:
                return False
            ended = not self.input  # the file is read whole: only what zlib still holds can come out
            try:
                self.pending, self.at = self.inflate.decompress(self.input, READ_BUFFER), 0
            except zlib.error as exc:
                raise DataError(_not_inflating(self.file, name, exc)) from None
            self.input, self.fed = self.inflate.unconsumed_tail, True
            if self.inflate.eof:  # a member ended: what follows may be another one
                self.input, self.fed = self.inflate.unused_data + self.input, False
                self.inflate = zlib.decompressobj(self.wbits)
            elif ended and not self.pending:  # inside a stream whose end never came
                raise DataError(f"the file ends inside its {name} stream (it is cut short)")
        return True


def _not_inflating(file: IO[bytes], name: str, exc: zlib.error) -> str:
    """Why compressed data does not inflate, with the fix when the file is plainly something else: a plain
    TFRecord file, or the other compression."""
    if file.tell() <= INFLATE_INPUT:  # the first chunk: the file may not be compressed this way at all
        file.seek(0)
        head = file.read(framing.HEADER)
        header = framing.header(head)
        if header is not None and header.intact:
            return (f"the file is not {name}-compressed (it starts with a TFRecord frame); set `compression: none` "
                    "on the source")
        if (found := _magic(head)) is not None and found.upper() != name:
            return (f"the file is {found.upper()}-compressed, not {name} (it starts with the {found} header); set "
                    f"`compression: {found}` on the source")
    return f"its {name} data does not inflate ({exc}); the file is damaged or not {name}-compressed"


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
