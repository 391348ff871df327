"""A run folder's TensorBoard event files, read as untrusted input: the framing by hand, scalars only.

An event file is TFRecord framing around serialized `tensorboard.Event` protos; each record is

    uint64 length | uint32 masked CRC-32C of those 8 bytes | length bytes of data | uint32 masked CRC-32C of the data

Neither TensorFlow's nor TensorBoard's reader is used: both stop without a word at a bad CRC, and a declared
length is only found to be a lie once it has been asked for. Here every length is checked against the bytes
left in the file before anything is read, a record over MAX_RECORD is stepped over unread, a record whose data
fails its CRC is skipped (its length passed its own CRC, so the next record is still found) and a length that
fails its CRC ends the file; each of these is said, naming the file, the record (counted from 0) and its byte
offset. The protos and the CRC come from the tensorboard package, which imports no TensorFlow.

A scalar is taken from a summary value's `simple_value`, or from a tensor whose declared shape holds exactly
one element and whose one number sits in the typed field (or `tensor_content`) of its dtype. The shape is read
before any content and nothing is ever allocated from it (TensorBoard's `make_ndarray` fills the declared
shape: 2**29 elements declared in a 56-byte file took 2 GB). Everything else (images, histograms, text,
tensors of more or fewer elements) is skipped and counted.
"""

from __future__ import annotations

import functools
import os
import stat
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from specgen import framing
from specgen.framing import FOOTER, HEADER
from specgen.paths import shown

if TYPE_CHECKING:
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.proto.tensor_pb2 import TensorProto

# A scalar event is about 100 bytes; TF1's merged summaries put a step's images beside its scalars in one
# record, so a few MiB stay readable. A larger record is stepped over unread: at most this much is held.
MAX_RECORD = 4 * 2**20
MAX_TAG = 256  # characters; a longer tag's values are skipped (each tag is a panel title or a legend entry)

# Why something was skipped, as the run's note line counts it.
NOT_EVENT = ("record", "not an Event")
OVERSIZED = ("record", f"over {MAX_RECORD // 2**20} MiB, not read")
NOT_SCALAR = "not one number: a tensor of another shape or type, an image, a histogram or audio"
LONG_TAG = f"a tag over {MAX_TAG} characters"


@dataclass
class FileReading:
    """What reading one event file found besides its records."""

    path: Path
    records: int = 0  # framed records seen, read or not
    bad_crc: list[tuple[int, int]] = field(default_factory=list)  # (record, offset) of each skipped one
    oversized: int = 0
    stopped: str | None = None  # why reading ended before the end of the file

    def notes(self) -> list[tuple[str, str]]:
        """(the file as shown, what happened): a damaged or cut file says where."""
        where = shown(self.path)
        notes = []
        if self.bad_crc:
            record, offset = self.bad_crc[0]
            count = len(self.bad_crc)
            notes.append((where, f"skipped {count} record{'s' * (count > 1)} whose data fails its CRC (the first: "
                          f"record {record} at byte {offset:,}); the records after {'them' if count > 1 else 'it'} "
                          "are read"))
        if self.stopped:
            notes.append((where, self.stopped))
        return notes


def frames(path: Path, reading: FileReading) -> Iterator[bytes]:
    """The data of each record of `path` whose framing and CRCs hold; `reading` collects the rest.

    The size is taken once at opening: a run still writing may add records, which are left for the next read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: a FIFO named like an event file does not hang
    info = os.fstat(fd)  # of what was opened, not of the name: it cannot be swapped in between
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        reading.stopped = "not a regular file: not read"
        return
    with os.fdopen(fd, "rb") as file:
        offset, size = 0, info.st_size
        while offset < size:
            data, step = _frame(file, offset, size - offset, reading)
            if step == 0:
                return
            if data is not None:
                yield data
            offset += step
            reading.records += 1


def _frame(file: BinaryIO, offset: int, left: int, reading: FileReading) -> tuple[bytes | None, int]:
    """One record at `offset`: (its data or None when skipped, the bytes it takes); 0 bytes ends the file."""
    where = f"record {reading.records} at byte {offset:,}"
    raw = file.read(HEADER)
    header = framing.header(raw)
    if header is None:
        return _stop(reading, f"ends early: {where} has {len(raw)} of a record's {HEADER} header bytes")
    if not header.intact:
        return _stop(reading, f"{where}: its length fails its CRC (the file is damaged): the {left:,} bytes from "
                     "there are not read")
    length = header.length
    if length > left - HEADER - FOOTER:
        return _stop(reading, f"ends early: {where} declares {length:,} bytes of data and a 4-byte CRC, "
                     f"{left - HEADER:,} bytes are left")
    if length > MAX_RECORD:
        file.seek(length + FOOTER, os.SEEK_CUR)
        reading.oversized += 1
        return None, framing.size(length)
    data, footer = file.read(length), file.read(FOOTER)
    if len(data) < length or len(footer) < FOOTER:  # the file shrank while it was read
        return _stop(reading, f"ends early: {where} was cut short while it was read")
    if not framing.data_intact(data, footer):
        reading.bad_crc.append((reading.records, offset))
        return None, framing.size(length)
    return data, framing.size(length)


def _stop(reading: FileReading, why: str) -> tuple[None, int]:
    count = reading.records
    reading.stopped = f"{why}; the {count} record{'s' * (count != 1)} before it {'are' if count != 1 else 'is'} read"
    return None, 0


@dataclass
class Scalars:
    """tag -> step -> value over one stage's files; `skipped` counts what is not a scalar, by reason. `written`
and `starts` say which file wrote each kept value, and when, and where each file began: a run resumed from an
older checkpoint starts a new file at an earlier step, and what the older files logged from there on is an
abandoned continuation (pictures/curves.py leaves it out)."""

    points: dict[str, dict[int, float]] = field(default_factory=dict)
    written: dict[str, dict[int, tuple[int, float]]] = field(default_factory=dict)  # (file index, wall time)
    starts: list[tuple[float, int] | None] = field(default_factory=list)  # per file: its first scalar's wall time, step
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)  # (record or summary value, why)
    values: int = 0  # scalar values read


def read_scalars(path: Path, into: Scalars, reading: FileReading) -> Iterator[tuple[str, int]]:
    """Adds the scalars of one event file to `into` (a later value of a step replaces an earlier one);
    yields (tag, step) for each point it adds (so the caller can bound them as they come)."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event

    file = len(into.starts)
    into.starts.append(None)
    for data in frames(path, reading):
        try:
            event = Event.FromString(data)
        except DecodeError:  # also a tag that is not UTF-8: proto3 strings are checked while parsing
            into.skipped[NOT_EVENT] += 1
            continue
        for value in event.summary.value:
            number = scalar(value)
            if isinstance(number, str):
                into.skipped["summary value", number] += 1
                continue
            steps = into.points.setdefault(value.tag, {})
            into.values += 1
            if into.starts[file] is None:
                into.starts[file] = (event.wall_time, event.step)
            if event.step not in steps:
                yield value.tag, event.step
            steps[event.step] = number
            into.written.setdefault(value.tag, {})[event.step] = (file, event.wall_time)
    if reading.oversized:
        into.skipped[OVERSIZED] += reading.oversized


def scalar(value: Summary.Value) -> float | str:
    """The one number of a summary value, or why it is skipped."""
    if len(value.tag) > MAX_TAG:
        return LONG_TAG
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind != "tensor":
        return NOT_SCALAR
    return _tensor_scalar(value.tensor)


@functools.cache
def _dtypes() -> dict[int, tuple[str, str]]:
    """dtype -> (its typed field, the struct format of one element in tensor_content)."""
    from tensorboard.compat.proto import types_pb2 as t

    return {t.DT_FLOAT: ("float_val", "<f"), t.DT_DOUBLE: ("double_val", "<d"), t.DT_HALF: ("half_val", "<e"),
            t.DT_BFLOAT16: ("half_val", "bf16"), t.DT_INT32: ("int_val", "<i"), t.DT_INT64: ("int64_val", "<q")}


def _tensor_scalar(tensor: TensorProto) -> float | str:
    """The number of a one-element tensor, read from its field of exactly one element; nothing is allocated
    from the declared shape (its element count is 1 only when every size is 1, checked without a product)."""
    shape = tensor.tensor_shape
    if shape.unknown_rank or any(dim.size != 1 for dim in shape.dim):
        return NOT_SCALAR
    found = _dtypes().get(tensor.dtype)
    if found is None:
        return NOT_SCALAR
    name, fmt = found
    content = tensor.tensor_content
    if content:
        width = 2 if fmt == "bf16" else struct.calcsize(fmt)
        if len(content) != width:
            return NOT_SCALAR
        return _unpack(fmt, content)
    values = getattr(tensor, name)
    if len(values) != 1:
        return NOT_SCALAR
    if fmt in ("<e", "bf16"):  # half_val holds each element's 16 bits in an int32
        return _unpack(fmt, struct.pack("<H", values[0] & 0xFFFF))
    return float(values[0])


def _unpack(fmt: str, raw: bytes) -> float:
    if fmt == "bf16":  # bfloat16 is the upper half of a float32
        return float(struct.unpack("<f", b"\0\0" + raw)[0])
    return float(struct.unpack(fmt, raw)[0])
