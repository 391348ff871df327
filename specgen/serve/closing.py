"""How connection.py's BoundedProtocol closes a connection: a lingering close while a refused body still arrives, and
every close bounded in time.

A response that closes the connection while the request's body is still arriving (413 for a body above
what the model accepts, 503 when the body budget is full) lingers before closing, as nginx's
`lingering_close` and Apache do: closing a socket with unread bytes makes the kernel answer RST, which
destroys the answer before a client that writes its whole body before reading (Python's http.client,
requests) can read it. So the answer is sent, then FIN, and the rest of the body is read and dropped
for at most `LINGER_SECONDS` and `LINGER_BYTES` (the body's declared length when smaller): when the body
ends within them the connection closes; when a bound runs out first, it is aborted. A lingering connection
may be evicted (server.py), and is then aborted too: it can write nothing more (its FIN is sent).

`close()` waits for the write buffer to flush, for ever when the client reads nothing, and holds the
connection's slot meanwhile (eviction skips a connection already closing). So no close here waits on the
client: one whose writes are paused is aborted at once; one with answers still unflushed is aborted
`send_timeout` seconds later (`LINGER_SECONDS` after the linger began, for a lingering one) unless they
flushed by then.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from specgen.serve.adapters import GatedFlow
from specgen.serve.guard import Guard, raw_response

LINGER_SECONDS = 2.0  # a refused body may keep arriving this long after its answer: ~200 MB on a 1 Gbit/s link
LINGER_BYTES = 256 << 20  # and this many of its bytes are read and dropped, at most


class LingeringClose(HttpToolsProtocol):
    """The closing half of BoundedProtocol (connection.py), which sets `flow` and tracks the body (`_body_left`)."""

    guard: ClassVar[Guard]
    flow: GatedFlow
    _stash = b""  # bytes read but not parsed while the connection is full
    _body_left: int | None = None  # of a Content-Length body being parsed
    _running: Any = None  # the RequestResponseCycle being answered
    _send_timer: asyncio.TimerHandle | None = None  # armed while writes are paused
    _abort_timer: asyncio.TimerHandle | None = None  # the linger's end, or a close's deadline to flush
    _linger_left: int | None = None  # bytes of a refused body still to read and drop; None: not lingering
    _linger_capped = False  # LINGER_BYTES, not the body's end, bounds the linger: reaching it aborts
    _aborted = False

    def _abandon(self) -> None:
        """Tell the cycle being answered that its client is gone now, before it writes to a closed transport."""
        for cycle in (self._running, self.cycle):
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()

    def _idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _send_late(self) -> None:
        self._send_timer = None
        self.close_with("send_timeout", b"408 Request Timeout",
                        f"the client read none of its answers for {self.guard.send_timeout:g} s")

    def linger_received(self, data: bytes) -> None:
        """Bytes of the refused body: dropped, and the connection ended once the body or the byte bound is reached."""
        assert self._linger_left is not None
        self._linger_left -= len(data)
        if self._linger_left <= 0 and self._linger_capped:  # the client sends on past the bound
            self._abort()
        elif self._linger_left <= 0:  # the body ended: FIN is sent, the answer flushes (or the linger's timer aborts)
            self._close()

    def close_after_body(self) -> None:
        """Close, or, while the request's body is still arriving, linger (module docstring): the answer is written, FIN
        follows it, and the body's remaining bytes are read and dropped until they end or a bound is reached."""
        cycle = self.cycle
        if self.transport.is_closing() or self._linger_left is not None or cycle is None or not cycle.more_body:
            self._close()
            return
        left = LINGER_BYTES if self._body_left is None else self._body_left - len(self._stash)  # None: chunked
        self._stash = b""
        if left <= 0:
            self._close()
            return
        self._linger_left, self._linger_capped = min(left, LINGER_BYTES), self._body_left is None or left > LINGER_BYTES
        self.transport.write_eof()
        self._abort_timer = self.loop.call_later(LINGER_SECONDS, self._abort)
        FlowControl.resume_reading(self.flow)  # whatever paused reading, the dropped bytes must flow

    def close_with(self, reason: str, status: bytes, message: str, answer_running: bool = False) -> None:
        """Answer `status` when no request cycle owns the transport (or, `answer_running`, when the one that does has
        not started its answer: it is this answer's request), then close; abort when writes cannot drain."""
        if self._aborted or (self.transport.is_closing() and not self.transport.get_write_buffer_size()):
            return  # gone, or going with nothing left to flush
        if self.transport.is_closing() or self._linger_left is not None or self.flow.write_paused:
            # closing with answers unread, lingering (FIN sent: nothing more may be written), or a client that reads
            # nothing: close() would wait on the client, holding the slot
            self._abort()
        else:
            idle = self._idle()
            if idle or answer_running:  # otherwise the app's read just ends, and its answer is not written
                self.transport.write(raw_response(status, message))
            if not idle:  # the app's read ends (a disconnect), and whatever it answers is not written
                self._abandon()
            self._close()
        self.guard.closed(reason, self.client)

    def _close(self) -> None:
        """Close once what is written has flushed; aborted `send_timeout` later if the client leaves it unread."""
        self.transport.close()
        if self.transport.get_write_buffer_size() and self._abort_timer is None:
            self._abort_timer = self.loop.call_later(self.guard.send_timeout, self._send_late)

    def _abort(self) -> None:
        if not self._aborted:
            self._aborted = True
            self._abandon()
            self.transport.abort()

    def cancel_timers(self) -> None:
        """The connection is gone (connection_lost)."""
        for timer in (self._send_timer, self._abort_timer):
            if timer is not None:
                timer.cancel()
