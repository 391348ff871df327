"""What an inference request body may cost the server: its size per model, buffered bytes, decodes at once.

The body of a request to a model is bounded by what that model can accept, not by one
server-wide size: JSON data may take `JSON_NUMBER_BYTES` per element plus `NESTING_BYTES` per
element and dimension (brackets, separators, indentation) for the model's largest request
(max_batch_size x the elements of one example, over all inputs), plus `ENVELOPE_BYTES` for names,
id, parameters and outputs. Binary tensor data is bounded exactly (elements x item size) after
a JSON header held to the JSON bound. A model with a variable dimension other than the batch
has no such bound and gets the server-wide cap (`max_body_bytes`) alone.

Bodies are read against that bound (Content-Length first, before any byte of the body; chunked
bodies up to the bound) within a deadline, into one buffer. The bytes of every body being read
or decoded count against one server-wide budget (refused with 503 when full), and large bodies
are decoded in a thread, a few at a time, so the event loop keeps answering small requests.
"""

from __future__ import annotations

import asyncio
import math
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from specgen.serve.errors import ProtocolError
from specgen.serve.model_config import DATATYPES, ModelConfig

JSON_NUMBER_BYTES = 32  # the longest float64 literal (24 characters) with its separator, and some room
NESTING_BYTES = 16  # per element and dimension: brackets, ", " and pretty-printing indentation
ENVELOPE_BYTES = 64 << 10  # names, id, parameters, requested outputs
INLINE_DECODE_BYTES = 64 << 10  # bodies above this are decoded in a thread (json.loads holds the GIL for ~1 ms)
T = TypeVar("T")


@dataclass(frozen=True)
class BodyLimit:
    """The largest body a model can accept: JSON (`json_bytes`) and binary tensor data (`binary_bytes`, exact)."""

    json_bytes: int
    binary_bytes: int

    def bound(self, binary: bool) -> int:
        """The whole body: JSON alone, or a JSON header and the binary data after it."""
        return self.json_bytes + self.binary_bytes if binary else self.json_bytes


def body_limit(config: ModelConfig, cap: int) -> BodyLimit:
    """What `config`'s largest valid request can take, each figure at most `cap`."""
    json_bytes, binary_bytes = ENVELOPE_BYTES, 0
    for tensor in config.inputs:
        if any(d < 0 for d in tensor.dims):  # a variable dimension: nothing bounds the count but the cap
            return BodyLimit(cap, cap)
        elements = max(config.max_batch_size, 1) * math.prod(tensor.dims)
        rank = len(tensor.dims) + config.batched
        json_bytes += elements * (JSON_NUMBER_BYTES + NESTING_BYTES * rank)
        binary_bytes += elements * np.dtype(DATATYPES[tensor.datatype]).itemsize
    return BodyLimit(min(json_bytes, cap), min(binary_bytes, cap))


class ByteBudget:
    """Bytes of request bodies held at once (read, buffered, decoded), server-wide; over it: 503 at once."""

    def __init__(self, total: int):
        self.total, self.held = total, 0

    @asynccontextmanager
    async def hold(self, size: int) -> AsyncIterator[None]:
        if self.held + size > self.total:
            raise ProtocolError(f"the server is holding {self.held} bytes of request bodies (budget {self.total}); "
                                f"a body of up to {size} bytes does not fit: retry later", 503, close=True)
        self.held += size
        try:
            yield
        finally:
            self.held -= size


def declared_length(value: str | None) -> int | None:
    """Content-Length as an int; None when absent (chunked). uvicorn refuses malformed ones before the app."""
    return int(value) if value is not None and value.isdigit() else None


def check_declared(declared: int | None, header_length: str | None, limit: BodyLimit) -> int:
    """The bound for this body, refusing (413) a declared length or JSON header above it before reading."""
    bound = limit.bound(header_length is not None)
    if declared is not None and declared > bound:
        kind = "with binary tensor data " if header_length is not None else ""
        raise ProtocolError(f"the request body has {declared} bytes; this model accepts at most {bound} {kind}"
                            "(its largest batch)", 413, close=True)
    if header_length is not None and header_length.strip().isdigit() and int(header_length) > limit.json_bytes:
        raise ProtocolError(f"header Inference-Header-Content-Length: received {header_length.strip()[:20]}; the JSON "
                            f"header may take at most {limit.json_bytes} bytes for this model", 413, close=True)
    return bound


async def read_body(chunks: AsyncIterator[bytes], bound: int, taker: str = "this model") -> bytes | bytearray:
    """The body in one buffer, refusing (413) at the first chunk past `bound` (chunked bodies stop there); `taker`
    names what the bound is for in the message."""
    buffer: bytearray | None = None
    first = b""
    async for chunk in chunks:
        if buffer is None and not first:
            first = chunk  # the common case, a body in one chunk, is not copied
            if len(first) > bound:
                raise ProtocolError(f"the request body exceeds {bound} bytes, the most {taker} accepts", 413, close=True)
            continue
        if buffer is None:
            buffer = bytearray(first)
        if len(buffer) + len(chunk) > bound:
            raise ProtocolError(f"the request body exceeds {bound} bytes, the most {taker} accepts", 413, close=True)
        buffer += chunk
    return first if buffer is None else buffer


# Content-Encoding's codings and their zlib window bits; x-gzip is gzip (RFC 9110 8.4.1.3)
CODINGS = {"gzip": 31, "x-gzip": 31, "deflate": 15}
# Codings undone one after another (`gzip, gzip`): each inflates up to the model's bound, so a long list would cost
# that many times the work of one body for the header's few bytes
MAX_CODINGS = 2


def codings(encoding: str) -> list[str]:
    """Content-Encoding's codings in the order they were applied (a list: empty elements and `identity` skipped;
    lowercase, as codings are case-insensitive); a 415 ProtocolError for one not served or too many."""
    listed = [c.strip() for c in encoding.lower().split(",")]
    applied = [c for c in listed if c not in ("", "identity")]
    for coding in applied:
        if coding not in CODINGS:
            raise ProtocolError(f"Content-Encoding: received '{coding[:40]}', expected gzip, deflate or none", 415)
    if len(applied) > MAX_CODINGS:
        raise ProtocolError(f"Content-Encoding: received '{encoding[:80]}', {len(applied)} layered codings; this server "
                            f"undoes at most {MAX_CODINGS} (such as 'gzip, gzip'): expected one coding, or two", 415)
    return applied


def decompress(body: bytes | bytearray, encoding: str, limit: int) -> bytes | bytearray:
    """The body with its Content-Encoding undone, last applied first (gzip, x-gzip, deflate), each step inflating
    to at most `limit` bytes; each coding one stream, nothing after it."""
    applied = codings(encoding)
    for index, coding in enumerate(reversed(applied)):
        layer = "" if len(applied) == 1 else f" (coding {len(applied) - index} of {len(applied)} in Content-Encoding)"
        body = _inflate(body, coding, layer, limit)
    return body


def _inflate(body: bytes | bytearray, coding: str, layer: str, limit: int) -> bytes | bytearray:
    inflater = zlib.decompressobj(wbits=CODINGS[coding])
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ProtocolError(f"the body is not valid {coding} data{layer}: {exc}") from None
    if len(data) > limit:
        raise ProtocolError(f"the decompressed body exceeds {limit} bytes, the most this model accepts", 413)
    if not inflater.eof:
        raise ProtocolError(f"the {coding} body{layer} is truncated")
    if inflater.unused_data:  # a second gzip member, or junk: proxies may read it, so one reading is enforced
        raise ProtocolError(f"the {coding} body{layer} has {len(inflater.unused_data)} bytes after the end of its "
                            f"compressed data (a second member or trailing bytes); expected exactly one {coding} stream")
    return data


class DecodeGate:
    """Large bodies decode in a thread, at most `slots` at once; small ones inline (cheaper than a thread hop)."""

    def __init__(self, slots: int):
        self.slots = asyncio.Semaphore(slots)

    async def run(self, size: int, decode: Callable[..., T], *args: Any) -> T:
        if size <= INLINE_DECODE_BYTES:
            return decode(*args)
        async with self.slots:
            return await asyncio.to_thread(decode, *args)
