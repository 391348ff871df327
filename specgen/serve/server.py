"""The server `specgen serve` runs: uvicorn with the bounded connection protocol, and the gRPC server beside it.

`Server` is uvicorn's server that, once HTTP is bound (and the lifespan has started the batchers),
starts the Service's gRPC server on the same event loop, and on shutdown stops gRPC from taking new
calls as HTTP stops accepting connections. The HTTP connection protocol is BoundedProtocol
(connection.py) plus a header deadline and a connection limit:

uvicorn closes idle keep-alive connections (`timeout_keep_alive`) but sets no deadline on request
headers: once a client has sent one byte, trickling the rest a byte at a time holds the
connection, and its file descriptor, for ever. Its `limit_concurrency` is checked only when headers
are complete, so such connections are never even counted. Here:

- each connection must complete its request headers within `header_timeout` seconds of
  connecting or of its previous response, else it gets 408 and is closed (the body has its own
  deadline, read by the app: `ServeOptions.body_timeout`);
- at most `max_connections` are open: a connection past the limit evicts the one that has been
  waiting longest on its client (idle, headers or body still coming, or its answers unread), or,
  when every connection has a whole request being answered, gets 503 and is closed at once;
- the limit is checked against the file descriptor limit (`ulimit -n`) at start: the soft limit
  is raised toward the hard one when it is short, and the connection limit lowered when that is
  not enough, so `accept` never fails for want of descriptors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any, ClassVar

import uvicorn

from specgen.serve.connection import READ_BYTES, BoundedProtocol
from specgen.serve.guard import Guard
from specgen.serve.options import HEARTBEAT_SECONDS

if TYPE_CHECKING:
    from specgen.serve.service import Service

log = logging.getLogger("specgen.serve")
FD_RESERVE = 64  # descriptors beyond the connections: listening socket, logs, the accept that precedes an eviction


class GuardedProtocol(BoundedProtocol):
    """BoundedProtocol plus a header deadline and the connection limit (`guard`, set by `guarded_protocol`)."""

    receiving_since: float | None = None  # when it began waiting for a request; None while one is answered
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.guard.metrics is not None:
            self.guard.metrics.connections.inc()
        self._waiting()
        if len(self.connections) > self.guard.max_connections:
            self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.guard.metrics is not None:
            self.guard.metrics.connections.dec()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.receiving_since = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self._waiting()

    def _waiting(self) -> None:
        """Waiting for a request: evictable, and its headers are due within header_timeout."""
        self.receiving_since = time.monotonic()
        self._disarm()
        self._header_timer = self.loop.call_later(self.guard.header_timeout, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        self.close_with("header_timeout", b"408 Request Timeout",
                        f"the request headers did not arrive within {self.guard.header_timeout:g} s")

    def waiting_since(self) -> float | None:
        """Since when it has waited on its client: for a request, or for the client to read its answers."""
        times = [t for t in (self.receiving_since, self.stalled_since) if t is not None]
        return min(times) if times else None

    def _make_room(self) -> None:
        waiting = [c for c in self.connections if c is not self and isinstance(c, GuardedProtocol)
                   and c.waiting_since() is not None and not c.transport.is_closing()]
        if waiting:
            victim = min(waiting, key=lambda c: c.waiting_since() or 0.0)
            victim.close_with("evicted", b"503 Service Unavailable", "closed to make room for a new connection: "
                              f"the server holds {self.guard.max_connections} connections")
        else:
            self.close_with("refused", b"503 Service Unavailable", f"the server holds {self.guard.max_connections} "
                            "connections, each with a request in progress; retry later")


class ReadBounded(asyncio.BufferedProtocol):
    """What the transport talks to: reads of at most READ_BYTES into `buffer`, handed to the HTTP protocol inside.

    uvloop treats any `asyncio.Protocol` (uvicorn's are) as a plain protocol and hands it up to
    256 KiB per read; only a protocol that is not one gets `get_buffer`. The buffer is shared by
    the server's connections: the transport fills it and calls `buffer_updated` within one
    callback of the single event loop thread, and the bytes are copied out at once.
    """

    http_class: ClassVar[type[BoundedProtocol]]
    buffer: ClassVar[memoryview]

    def __init__(self, **kwargs: Any):  # uvicorn's keyword arguments (config, server_state, app_state, _loop)
        self.http = self.http_class(**kwargs)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.http.connection_made(transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self.http.connection_lost(exc)

    def eof_received(self) -> bool | None:
        self.http.eof_received()
        return None  # uvicorn's protocols return None here too: the transport closes, never half-open

    def pause_writing(self) -> None:
        self.http.pause_writing()

    def resume_writing(self) -> None:
        self.http.resume_writing()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.http.data_received(bytes(self.buffer[:nbytes]))


def read_bounded(http_class: type[BoundedProtocol]) -> type[ReadBounded]:
    """The transport-facing protocol class for `http_class`, with its own read buffer."""
    return type("ReadBounded", (ReadBounded,), {"http_class": http_class, "buffer": memoryview(bytearray(READ_BYTES))})


def guarded_protocol(guard: Guard) -> type[GuardedProtocol]:
    """A protocol class bound to `guard` (uvicorn builds one instance per connection from a class)."""
    return type("GuardedProtocol", (GuardedProtocol,), {"guard": guard})


def connection_limit(wanted: int) -> int:
    """`wanted`, or fewer where the file descriptor limit cannot hold that many (raising the soft limit first)."""
    try:
        import resource
    except ImportError:  # not a POSIX system: nothing to check
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else FD_RESERVE
    needed = wanted + in_use + FD_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return wanted
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    except (ValueError, OSError):
        pass
    allowed = max(min(wanted, soft - in_use - FD_RESERVE), 1)
    if allowed < wanted:
        log.warning("connection limit lowered", extra={"fields": {
            "event": "connection_limit", "max_connections": allowed, "requested": wanted, "nofile_soft": soft,
            "nofile_hard": hard, "fds_in_use": in_use}})
    return allowed


def server_config(app: Any, host: str, port: int, **settings: Any) -> uvicorn.Config:
    """The uvicorn configuration serving `app` (from create_app) with its ServeOptions' guards."""
    service = app.state.service
    options = service.options
    guard = Guard(options.header_timeout, connection_limit(options.max_connections), options.max_header_bytes,
                  options.max_headers, options.send_timeout, service.metrics)
    settings = {"log_config": None, "access_log": False, "lifespan": "on", "server_header": False, **settings}
    # uvicorn annotates `http` as an asyncio.Protocol class; ours is a BufferedProtocol on purpose (see ReadBounded)
    protocol: Any = read_bounded(guarded_protocol(guard))
    return uvicorn.Config(app, host=host, port=port, http=protocol, ws="none", **settings)


class Server(uvicorn.Server):
    """uvicorn's server plus the gRPC server of the same Service (when its options name a gRPC port).

    `grpc_failed` is set when gRPC could not listen: the server then stops at once (exit status 1).
    """

    grpc_failed = False
    ready_fd: int | None = None  # a worker process: "1" written there once HTTP and gRPC serve, then heartbeats

    @property
    def service(self) -> Service:
        app: Any = self.config.app  # create_app's application; uvicorn types it as any ASGI callable
        service: Service = app.state.service
        return service

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)  # the lifespan starts the batchers, then HTTP is bound (exit 1 if it cannot be)
        service = self.service
        if service.options.grpc_port is None:
            return
        from specgen.serve.grpc_server import GrpcStartError

        try:
            await service.start_grpc()
        except GrpcStartError as exc:
            log.error(str(exc), extra={"fields": {"event": "grpc_failed"}})
            self.grpc_failed = self.should_exit = True

    def _ready(self) -> None:
        if self.ready_fd is not None and self.started and not self.grpc_failed:
            os.write(self.ready_fd, b"1")
            os.set_blocking(self.ready_fd, False)  # heartbeats never wait on a parent that is not reading
        elif self.ready_fd is not None:
            self._no_beats()

    def _no_beats(self) -> None:
        if self.ready_fd is not None:
            os.close(self.ready_fd)
            self.ready_fd = None

    async def main_loop(self) -> None:
        self._ready()  # startup is complete (uvicorn sets `started` once it has bound; gRPC is bound before)
        await super().main_loop()

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's tick (every 0.1 s on the event loop) plus, in a worker, a heartbeat byte every HEARTBEAT_SECONDS
        on the ready pipe: written from the loop, so a loop that is stuck (a deadlock, SIGSTOP) stops it, and the
        parent kills and replaces the worker (workers.py)."""
        if self.ready_fd is not None and counter % round(HEARTBEAT_SECONDS * 10) == 0:
            try:
                os.write(self.ready_fd, b".")
            except BlockingIOError:  # the pipe is full: the parent is not reading (stopped); it reads all once back
                pass
            except OSError:  # the parent is gone: no one to tell
                self._no_beats()
        return await super().on_tick(counter)

    async def shutdown(self, sockets: Any = None) -> None:
        self.service.begin_shutdown()  # gRPC drains while HTTP does
        await super().shutdown(sockets)
