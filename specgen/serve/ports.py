"""The ports `specgen serve --workers N` shares between its workers, bound once by the parent (workers.py):

- HTTP: the parent binds and listens once, and every worker accepts from that one socket (a
  pre-forked listener: the descriptor is inherited). Connections wait in the one kernel queue, so a
  worker that dies loses only the connections it had accepted; new ones go to the others.
- gRPC: grpc cannot adopt a listening descriptor, so every worker binds the port with SO_REUSEPORT
  (`ServeOptions.grpc_reuse_port`). The parent first binds it without listening, with SO_REUSEPORT too:
  that reserves the port (picks it when 0), fails with the system's reason when another program holds it,
  and receives no connections (the kernel hands them only to listening sockets).
"""

from __future__ import annotations

import socket

from specgen.errors import SpecgenError

BACKLOG = 2048  # uvicorn's default listen backlog


class WorkersError(SpecgenError, OSError):
    """The workers cannot be started (an address cannot be bound, an option that one worker alone can serve)."""


def _bound(host: str, port: int, option: int, what: str) -> socket.socket:
    """A TCP socket with `option` (SO_REUSEADDR or SO_REUSEPORT) set, bound to host:port; one line when it cannot."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, option, 1)
        sock.bind(address)
    except OSError as exc:
        raise WorkersError(f"{what} on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def listen(host: str, port: int) -> socket.socket:
    """The HTTP socket every worker accepts from, listening and inheritable."""
    sock = _bound(host, port, socket.SO_REUSEADDR, "cannot listen")
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def reserve(host: str, port: int) -> socket.socket:
    """A bound, not listening, SO_REUSEPORT socket: holds the gRPC port for the workers (which bind it the same way)."""
    return _bound(host, port, socket.SO_REUSEPORT, "gRPC cannot listen")
