"""TFRecord framing, read and written in one place: the frames of TFRecord shards and TensorBoard event files.

A file is a sequence of frames, each

    uint64 length | uint32 masked CRC-32C of those 8 bytes | length bytes of data | uint32 masked CRC-32C of the data

(little-endian). Three readers walk it, and differ only in what they do at a bad frame: the data sources
(runtime/sources/framing.py) refuse the shard before TensorFlow opens it, the run-folder reader
(pictures/events.py) skips a record whose data fails its CRC and stops at a length that fails its own, and the
sweep's follower (sweep/follow.py) reads a running trial's new records and leaves a frame still being written for
its next poll. The sweep's summary writer frames records with `frame`. The CRC is TensorBoard's pure-Python
implementation (the tensorboard package imports no TensorFlow).
"""

from __future__ import annotations

import functools
import struct
from typing import NamedTuple

HEADER = 12  # the length and its CRC
FOOTER = 4  # the data's CRC
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")


class Header(NamedTuple):
    """A frame's header: the data length it declares, and whether that length's CRC holds (when it does not, the
    length is noise and nothing after it can be found)."""

    length: int
    intact: bool


def header(raw: bytes) -> Header | None:
    """The header in the 12 bytes `raw`; None when fewer arrived (the file ends, or is still being written)."""
    if len(raw) < HEADER:
        return None
    return Header(_LENGTH.unpack_from(raw)[0], _length_crc(raw[:8]) == _CRC.unpack_from(raw, 8)[0])


def data_intact(data: bytes, footer: bytes) -> bool:
    """Whether `footer` (the 4 bytes after the data) is the masked CRC-32C of `data`."""
    return len(footer) == FOOTER and masked_crc32c(data) == _CRC.unpack(footer)[0]


def size(length: int) -> int:
    """The bytes a frame of `length` data bytes takes in the file."""
    return HEADER + length + FOOTER


def frame(data: bytes) -> bytes:
    """One record framed, as TensorFlow's writers write it."""
    length = _LENGTH.pack(len(data))
    return length + _CRC.pack(_length_crc(length)) + data + _CRC.pack(masked_crc32c(data))


@functools.lru_cache(maxsize=4096)  # records of one size share a header: most files check a handful of lengths
def _length_crc(length: bytes) -> int:
    """The CRC of a header's 8 length bytes, cached (never the data's: a record may be megabytes)."""
    return masked_crc32c(length)


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (the checksum TensorFlow writes): TensorBoard's implementation, pure Python."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as masked

    return int(masked(data))
