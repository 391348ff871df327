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

Bytes that are not HTTP/1.1 (a chunk size that is not hex, two Content-Lengths) get a 400 with the JSON error body
every refusal has, after the answers to the requests before them, and the connection closes (`_invalid`).

Transfer-Encoding is checked here, not only by llhttp, which decodes `chunked` and ignores any coding before it:
`gzip, chunked` was read as a plain body, another body than a proxy that applies the gzip sees. A coding other
than chunked gets 501 (RFC 9112 6.1: a transfer coding the server does not understand), and Transfer-Encoding in an
HTTP/1.0 request 400 (RFC 9112 6.1: its framing is faulty); either closes the connection (`_check_codings`). A last
coding other than chunked, or chunked twice, llhttp refuses itself (400).

Closing (a lingering close for a body still arriving, and every close bounded in time) is closing.py's.

At shutdown (`shutdown`), a request whose body is still arriving gets 503 at once, with a lingering close: uvicorn
would wait for the body, so one client that sent headers and part of a body held every shutdown for body_timeout
(30 s), past a Kubernetes pod's default grace period. A request received whole is answered as before, within
graceful_timeout.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import httptools

from specgen.serve.adapters import ClosingTransport, GatedFlow
from specgen.serve.closing import LingeringClose
from specgen.serve.errors import MALFORMED, SHUT_DOWN, SHUT_DOWN_MESSAGE
from specgen.serve.guard import Refused, raw_response

READ_BYTES = 16 << 10  # one read; also the most unparsed bytes a paused connection keeps
HEADER_SLICE = 256  # header bytes parsed at a time: the smallest request is 16 bytes, so <= 16 requests per slice
PIPELINE_DEPTH = 8  # requests parsed ahead, waiting behind the one being answered
PIPELINE_BODY_BYTES = 64 << 10  # body bytes those waiting requests may hold together
WRITE_HIGH_BYTES = 64 << 10  # the transport's write buffer above which reading (and the app's sends) pause


class BoundedProtocol(LingeringClose):
    """HttpToolsProtocol with bounded reads, parse-ahead, header bytes and stalled writes (`guard` set per server)."""

    _stash_scheduled = False
    _in_headers = False
    _header_bytes = _header_count = 0
    _content_length: int | None = None
    _codings: tuple[str, ...] = ()  # the request's Transfer-Encoding list, all its header fields together
    stalled_since: float | None = None  # when its writes paused (the client stopped reading); None while they flow
    _malformed: str | None = None  # why bytes after a request being answered are no HTTP: its 400 follows the answers

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = GatedFlow(transport, self)
        transport.set_write_buffer_limits(high=WRITE_HIGH_BYTES)

    def connection_lost(self, exc: Exception | None) -> None:
        self.cancel_timers()
        self._stash = b""
        # uvicorn tells only its newest cycle, which may be a pipelined one queued behind the request being
        # answered: that one's handler watches for the disconnect too (client_watch.py `unless_gone`)
        self._abandon()
        super().connection_lost(exc)

    # Reading: bounded reads, parsed in slices, stopped when the connection holds enough

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._malformed is not None:  # the parser stopped at bytes that are not HTTP: nothing after them is read
            return
        if self._linger_left is not None:  # the rest of a refused body: dropped
            self.linger_received(data)
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
            self._invalid(exc)
            return False
        except httptools.HttpParserError as exc:
            self._invalid(exc)
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

    def _invalid(self, exc: Exception) -> None:
        """Bytes that are not HTTP/1.1: 400 with the JSON error body every refusal has (not uvicorn's text/plain),
        then close, for nothing after them can be read. When they break off the body of the request being answered
        (a chunk size that is not hex), that request gets the 400 and its handler is told why (MALFORMED: counted a
        bad request, not a client that left). Bytes after a whole request that is still being answered wait: its
        answer, and those of requests queued before them, go out first, then the 400 (on_response_complete)."""
        detail = str(exc) or type(exc).__name__
        running = self._running
        in_body = (running is not None and running is self.cycle and running.more_body
                   and not running.response_started)
        if in_body and self._content_length is None:
            detail = f"invalid chunked encoding of the body ({detail[:1].lower()}{detail[1:]})"
        message = f"malformed HTTP request: {detail}"
        if in_body:
            running.scope[MALFORMED] = message
        if in_body or self._idle():
            self.close_with("invalid", b"400 Bad Request", message, answer_running=in_body)
        else:  # bytes after a whole request still being answered: that answer (and any queued before) goes out first
            self._malformed, self._stash = message, b""
            self.flow.pause_reading()

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        self._running = cycle  # uvicorn keeps only the newest cycle, which may be a queued one
        super()._start_asgi_task(cycle, app)

    def _full(self) -> bool:
        """Enough requests wait behind the one being answered: parse no more until they drain."""
        if not self.pipeline:
            return False
        waiting = sum(len(cycle.body) for cycle, _ in self.pipeline)
        return len(self.pipeline) >= PIPELINE_DEPTH or waiting > PIPELINE_BODY_BYTES

    def may_read(self) -> bool:
        return not self._stash and not self._full() and not self.flow.write_paused and self._malformed is None

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
        self._codings = ()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.guard.max_headers:
            raise Refused("header_too_large", b"431 Request Header Fields Too Large",
                          f"the request has more than {self.guard.max_headers} header fields, the most this server "
                          "accepts")
        if name.lower() == b"content-length" and value.strip().isdigit():
            self._content_length = int(value)
        elif name.lower() == b"transfer-encoding":  # a list: empty elements allowed, several fields join (RFC 9110 5.3)
            self._codings += tuple(c.strip().decode("latin-1") for c in value.split(b",") if c.strip())
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._check_codings()
        self._body_left = self._content_length or None
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycle.transport = cast(asyncio.Transport, ClosingTransport(self.transport, self))  # duck-typed

    def _check_codings(self) -> None:
        """Refuse a Transfer-Encoding this server would misread (module docstring)."""
        if not self._codings:
            return
        shown = ", ".join(self._codings)[:200]
        if self.parser.get_http_version() == "1.0":
            raise Refused("invalid", b"400 Bad Request", f"malformed HTTP request: Transfer-Encoding '{shown}' in an "
                          "HTTP/1.0 request, which cannot carry it (RFC 9112 6.1); expected Content-Length, or an "
                          "HTTP/1.1 request")
        unknown = [c for c in self._codings if c.lower() != "chunked"]
        if unknown and self._codings[-1].lower() == "chunked":
            raise Refused("not_implemented", b"501 Not Implemented", f"the request's Transfer-Encoding is '{shown}': "
                          f"this server implements no transfer coding but chunked (received {unknown[0]!r}); expected "
                          "Transfer-Encoding: chunked alone (a compressed body: Content-Encoding: gzip)")

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
        if self.transport.is_closing():
            return
        if self._malformed is not None and self._idle():  # every request before the bad bytes answered
            self.close_with("invalid", b"400 Bad Request", self._malformed)
        else:
            self._unblock()

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown of this connection, except that a request whose body is still arriving, not yet
        answered, gets 503 now and the connection lingers closed (closing.py: at most LINGER_SECONDS), its handler told
        why (SHUT_DOWN); uvicorn would wait up to body_timeout for the body (module docstring)."""
        cycle = self._running
        if (cycle is None or cycle is not self.cycle or not cycle.more_body or cycle.response_started
                or self.transport.is_closing() or self._linger_left is not None or self.flow.write_paused):
            super().shutdown()
            return
        cycle.scope[SHUT_DOWN] = SHUT_DOWN_MESSAGE
        self.transport.write(raw_response(b"503 Service Unavailable", SHUT_DOWN_MESSAGE))
        self.close_after_body()
        self._abandon()  # its handler's read ends now (a disconnect, counted as this 503)
        self.guard.closed("shutdown", self.client)

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
