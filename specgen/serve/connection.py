"""uvicorn's HTTP/1.1 protocol (httptools) with the memory of each connection bounded, whatever its client does.

uvicorn parses every byte it reads at once: a client that pipelines requests and never reads
the answers had each read of 256 KiB turned into ~14,000 parsed requests (~3 KB each: scope,
headers, an asyncio.Event) queued on the connection, and its responses' `receive()` calls resumed
reading after every answer, so a queue of 1.6 M requests (5 GB) built up in 45 s. httptools also
holds a header value until it ends, with no limit. Here, per connection:

- reads go into one 16 KiB buffer (`server.ReadBounded`, an `asyncio.BufferedProtocol` around the HTTP
  protocol: uvloop reads up to 256 KiB at a time for a plain `asyncio.Protocol`), so one read is at
  most 16 KiB;
- bytes are parsed in slices: header bytes 256 at a time, a body with Content-Length up to its
  end; after each slice, when `PIPELINE_DEPTH` requests wait behind the one being answered or their
  bodies hold more than `PIPELINE_BODY_BYTES`, parsing stops, the rest of the read is kept unparsed
  and reading pauses until the queue drains (a slice of 256 bytes holds at most 16 more requests);
- reading also pauses while the transport's write buffer is above `WRITE_HIGH_BYTES` (the client
  is not reading its answers), and a connection whose writes stay paused for `send_timeout`
  seconds is aborted (its buffer can never drain);
- a request's line and headers may take `max_header_bytes` and `max_headers` fields, counted as
  they arrive (before httptools has finished a header): past either, 431 and the connection closes.

uvicorn's own calls to resume reading (every `receive()` and response) go through `GatedFlow`
(adapters.py), which resumes only when none of these reasons to pause holds.

A response that closes the connection while the request's body is still arriving (413 for a body above
what the model accepts, 503 when the body budget is full) lingers before closing, as nginx's
`lingering_close` and Apache do: closing a socket with unread bytes makes the kernel answer RST, which
destroys the answer before a client that writes its whole body before reading (Python's http.client,
requests) can read it. So the answer is sent, then FIN, and the rest of the body is read and dropped
for at most `LINGER_SECONDS` and `LINGER_BYTES` (the body's declared length when smaller), then the
connection closes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, ClassVar, cast

import httptools
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from specgen.serve.adapters import ClosingTransport, GatedFlow
from specgen.serve.guard import Guard, Refused, raw_response

READ_BYTES = 16 << 10  # one read; also the most unparsed bytes a paused connection keeps
HEADER_SLICE = 256  # header bytes parsed at a time: the smallest request is 16 bytes, so <= 16 requests per slice
PIPELINE_DEPTH = 8  # requests parsed ahead, waiting behind the one being answered
PIPELINE_BODY_BYTES = 64 << 10  # body bytes those waiting requests may hold together
WRITE_HIGH_BYTES = 64 << 10  # the transport's write buffer above which reading (and the app's sends) pause
LINGER_SECONDS = 2.0  # a refused body may keep arriving this long after its answer: ~200 MB on a 1 Gbit/s link
LINGER_BYTES = 256 << 20  # and this many of its bytes are read and dropped, at most


class BoundedProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with bounded reads, parse-ahead, header bytes and stalled writes (`guard` set per server)."""

    guard: ClassVar[Guard]
    _stash = b""  # bytes read but not parsed while the connection is full
    _stash_scheduled = False
    _in_headers = False
    _header_bytes = _header_count = 0
    _content_length: int | None = None
    _body_left: int | None = None  # of a Content-Length body being parsed
    _send_timer: asyncio.TimerHandle | None = None
    _running: Any = None  # the RequestResponseCycle being answered
    _linger_left: int | None = None  # bytes of a refused body still to read and drop; None: not lingering
    stalled_since: float | None = None  # when its writes paused (the client stopped reading); None while they flow

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = GatedFlow(transport, self)
        transport.set_write_buffer_limits(high=WRITE_HIGH_BYTES)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
        self._stash = b""
        # uvicorn tells only its newest cycle, which may be a pipelined one queued behind the request being
        # answered: that one's handler watches for the disconnect too (client_watch.py `unless_gone`)
        self._abandon()
        super().connection_lost(exc)

    # Reading: bounded reads, parsed in slices, stopped when the connection holds enough

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._linger_left is not None:  # the rest of a refused body: dropped
            self._linger_left -= len(data)
            if self._linger_left <= 0:
                self.transport.close()
            return
        if self._stash:  # bytes wait unparsed (reading is paused): these come after them
            self._stash += data
            return
        self._feed(data)

    def _feed(self, data: bytes) -> None:
        view, offset = memoryview(data), 0
        while offset < len(data):
            if self._full():
                self._stash = bytes(view[offset:])
                self.flow.pause_reading()
                return
            size = self._slice(len(data) - offset)
            if not self._parse(view[offset:offset + size]):
                return
            offset += size

    def _slice(self, left: int) -> int:
        """How many bytes to parse next: a Content-Length body to its end, header bytes up to the header limit."""
        if self._body_left:
            return min(left, self._body_left)
        if self._in_headers:
            return min(left, HEADER_SLICE, max(self.guard.max_header_bytes - self._header_bytes, 1))
        return min(left, HEADER_SLICE)

    def _parse(self, piece: memoryview) -> bool:
        """Parse one slice; False when the connection was answered and closed (or upgraded away)."""
        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, Refused):
                refused = exc.__context__
                self.close_with(refused.reason, refused.status, refused.message)
                return False
            self._invalid()
            return False
        except httptools.HttpParserError:
            self._invalid()
            return False
        except httptools.HttpParserUpgrade:  # as uvicorn: no WebSocket support is configured (ws="none")
            self._unsupported_upgrade_warning()
            return False
        if self.transport.is_closing():
            return False
        if self._in_headers:  # counted as they arrive: httptools keeps an unfinished header value to itself
            self._header_bytes += len(piece)
            if self._header_bytes >= self.guard.max_header_bytes:
                self.close_with("header_too_large", b"431 Request Header Fields Too Large",
                                f"the request line and headers exceed {self.guard.max_header_bytes} bytes, "
                                "the most this server accepts")
                return False
        return True

    def _invalid(self) -> None:
        msg = "Invalid HTTP request received."
        self.logger.warning(msg)
        if self._idle():
            self.send_400_response(msg)
        else:  # a 400 now would come before the answer in progress: close instead, as close_with does
            self._abandon()
            self.transport.close()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        self._running = cycle  # uvicorn keeps only the newest cycle, which may be a queued one
        super()._start_asgi_task(cycle, app)

    def _abandon(self) -> None:
        """Tell the cycle being answered that its client is gone now, before it writes to a closed transport."""
        for cycle in (self._running, self.cycle):
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()

    def _full(self) -> bool:
        """Enough requests wait behind the one being answered: parse no more until they drain."""
        if not self.pipeline:
            return False
        waiting = sum(len(cycle.body) for cycle, _ in self.pipeline)
        return len(self.pipeline) >= PIPELINE_DEPTH or waiting > PIPELINE_BODY_BYTES

    def may_read(self) -> bool:
        return not self._stash and not self._full() and not self.flow.write_paused

    def _unblock(self) -> None:
        """After a response or a drained write buffer: parse what waits, then read again if nothing holds it."""
        if self._stash and not self._full() and not self._stash_scheduled:
            self._stash_scheduled = True
            self.loop.call_soon(self._feed_stash)  # outside the response's task, which is still in its send()
        else:
            self.flow.resume_reading()

    def _feed_stash(self) -> None:
        self._stash_scheduled = False
        if self.parser is None or self.transport.is_closing():
            return
        data, self._stash = self._stash, b""
        self._feed(data)
        self.flow.resume_reading()

    # Parser callbacks: header count and size, the Content-Length body's end

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers, self._header_bytes, self._header_count = True, 0, 0
        self._content_length = self._body_left = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.guard.max_headers:
            raise Refused("header_too_large", b"431 Request Header Fields Too Large",
                          f"the request has more than {self.guard.max_headers} header fields, the most this server "
                          "accepts")
        if name.lower() == b"content-length" and value.strip().isdigit():
            self._content_length = int(value)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._body_left = self._content_length or None
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycle.transport = cast(asyncio.Transport, ClosingTransport(self.transport, self))  # duck-typed

    def on_body(self, body: bytes) -> None:
        if self._body_left:
            self._body_left -= len(body)
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._body_left = None
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if self._linger_left is not None:  # that answer closes the connection: requests queued behind it go unanswered
            self.pipeline.clear()
        super().on_response_complete()
        if not self.transport.is_closing():
            self._unblock()

    # Writing: a client that does not read its answers

    def pause_writing(self) -> None:
        super().pause_writing()
        self.flow.pause_reading()
        if self._send_timer is None:
            self.stalled_since = time.monotonic()
            self._send_timer = self.loop.call_later(self.guard.send_timeout, self._send_late)

    def resume_writing(self) -> None:
        super().resume_writing()
        self.stalled_since = None
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        self._unblock()

    def _send_late(self) -> None:
        self._send_timer = None
        self.close_with("send_timeout", b"408 Request Timeout",
                        f"the client read none of its answers for {self.guard.send_timeout:g} s")

    # Closing

    def _idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def close_after_body(self) -> None:
        """Close, or, while the request's body is still arriving, linger (module docstring): the answer is written, FIN
        follows it, and the body's remaining bytes are read and dropped until they end or a bound is reached."""
        cycle = self.cycle
        if self.transport.is_closing() or self._linger_left is not None or cycle is None or not cycle.more_body:
            self.transport.close()
            return
        left = LINGER_BYTES if self._body_left is None else self._body_left - len(self._stash)  # None: chunked
        self._stash = b""
        if left <= 0:
            self.transport.close()
            return
        self._linger_left = min(left, LINGER_BYTES)
        self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)  # a no-op once the connection is closed
        FlowControl.resume_reading(self.flow)  # whatever paused reading, the dropped bytes must flow

    def close_with(self, reason: str, status: bytes, message: str) -> None:
        """Answer `status` when no request cycle owns the transport, then close; abort when writes cannot drain."""
        if self.transport.is_closing():
            return
        if self._linger_left is not None:  # answered, and FIN sent: nothing more may be written
            self.transport.close()
        elif self.flow.write_paused:  # the client reads nothing: close() would wait for ever to flush
            self._abandon()
            self.transport.abort()
        else:
            if self._idle():  # otherwise the app's read just ends, and its answer is not written
                self.transport.write(raw_response(status, message))
            else:
                self._abandon()
            self.transport.close()
        self.guard.closed(reason, self.client)



