"""Where each tensor of a TensorFlow checkpoint lies: its shard, offset and size, read from the `.index` file.

TensorFlow's reader opens a data shard only when a tensor is read, so a plan that reads the index alone
(shapes, dtypes) would call a truncated shard restorable. The index records every tensor's byte range
(BundleEntryProto: shard_id, offset, size); a shard shorter than the end of a range it must hold is refused
at plan time without reading a byte of data. The `.index` is a LevelDB-format table that TensorFlow writes
without compression: a 48-byte footer points at the index block, whose entries point at the data blocks,
whose entries are key -> serialized proto (the "" key holds the header: the number of shards).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError
from tensorflow.core.protobuf import tensor_bundle_pb2

from specgen.errors import SpecgenError
from specgen.runtime.integrity import Unreadable, read_small

MAGIC = 0xDB4775248B80FB57  # LevelDB's table magic number, the footer's last 8 bytes
FOOTER = 48
INDEX_LIMIT = 1 << 30  # an index lists keys and byte ranges: 1 GiB is millions of tensors


class IndexFormat(SpecgenError, ValueError):
    """An index this reader does not follow (compressed blocks, a layout of another version): caught here, the size
    check is then skipped and TensorFlow's reader judges the shard when the values are read."""


@dataclass(frozen=True)
class Extent:
    shard: Path
    end: int  # the byte the tensor's range ends at


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise IndexFormat("a varint runs past its block")
        byte = data[at]
        value, at, shift = value | (byte & 0x7F) << shift, at + 1, shift + 7
        if not byte & 0x80:
            return value, at


def _block(data: bytes, handle: bytes, at: int = 0) -> list[tuple[bytes, bytes]]:
    """The entries of the block a handle points at (keys rebuilt from their shared prefixes)."""
    offset, at = _varint(handle, at)
    size, _ = _varint(handle, at)
    if offset + size + 5 > len(data):
        raise IndexFormat("a block handle points past the end of the file")
    if data[offset + size] != 0:
        raise IndexFormat(f"block compression {data[offset + size]} (only uncompressed tables are read)")
    block = data[offset:offset + size]
    restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end, at, key, entries = len(block) - 4 - 4 * restarts, 0, b"", []
    while at < end:
        shared, at = _varint(block, at)
        unshared, at = _varint(block, at)
        length, at = _varint(block, at)
        key = key[:shared] + block[at:at + unshared]
        entries.append((key, block[at + unshared:at + unshared + length]))
        at += unshared + length
    return entries


def extents(prefix: Path, keys: set[str]) -> list[tuple[str, Extent]]:
    """(key, where its bytes end) for each of `keys` the index of `prefix` lists; IndexFormat when the index is
    laid out in a way this reader does not follow, Unreadable (integrity.py) when it is no regular file."""
    data = read_small(Path(f"{prefix}.index"), INDEX_LIMIT)
    if len(data) < FOOTER or struct.unpack_from("<Q", data, len(data) - 8)[0] != MAGIC:
        raise IndexFormat("not a LevelDB table")
    footer = data[-FOOTER:]
    _, at = _varint(footer, 0)
    _, at = _varint(footer, at)  # skip the metaindex handle
    shards, found = 1, []
    for _, handle in _block(data, footer, at):
        for key, value in _block(data, handle):
            if key == b"":
                shards = tensor_bundle_pb2.BundleHeaderProto.FromString(value).num_shards
                continue
            name = key.decode("utf-8", "replace")
            if name in keys:
                found.append((name, tensor_bundle_pb2.BundleEntryProto.FromString(value)))
    return [(name, Extent(Path(f"{prefix}.data-{entry.shard_id:05d}-of-{shards:05d}"), entry.offset + entry.size))
            for name, entry in found if not entry.slices]


def short_shard(prefix: Path, keys: set[str]) -> str | None:
    """Why the data shards cannot hold the bytes of `keys` (a truncated shard), or None when they can; a layout
    this reader does not follow is left to TensorFlow's reader at restore time."""
    try:
        found = extents(prefix, keys)
    except (IndexFormat, IndexError, struct.error, DecodeError, Unreadable):
        return None
    needed: dict[Path, tuple[int, str]] = {}
    for key, extent in found:
        if extent.end > needed.get(extent.shard, (-1, ""))[0]:
            needed[extent.shard] = (extent.end, key)
    for shard, (end, key) in sorted(needed.items()):
        try:
            size = shard.stat().st_size
        except OSError:
            continue  # a missing shard: TensorFlow's reader names it
        if size < end:
            return (f"{shard.name} is truncated: it holds {size} bytes, but the index places '{key}' up to byte "
                    f"{end} (a copy that stopped early?)")
    return None
