"""The ports `specgen serve --workers N` shares between its workers, bound once by the parent (workers.py):

- HTTP: the parent binds and listens once, and every worker accepts from that one socket (a
  pre-forked listener: the descriptor is inherited). Connections wait in the one kernel queue, so a
  worker that dies loses only the connections it had accepted; new ones go to the others.
- gRPC: grpc cannot adopt a listening descriptor, so every worker binds the port with SO_REUSEPORT
  (`ServeOptions.grpc_reuse_port`). The parent first binds it without listening, with SO_REUSEPORT too:
  that reserves the port (picks it when 0), fails with the system's reason when another program holds it,
  and receives no connections (the kernel hands them only to listening sockets).

Every socket here binds with SO_REUSEADDR set, as uvicorn, grpc's own listener and `--workers 1` (grpc_server.py
`_check_bindable`) do: without it Linux refuses the bind while a connection of an earlier server on that port waits
in TIME_WAIT (60 s after a server that closed its clients' connections stopped), though nothing listens there.
SO_REUSEADDR does not let two listeners share a port on Linux: a port another program listens on is still refused.
It does let two sockets that both set it bind one port while neither listens, and the gRPC reservation never
listens: so `reserve` clears it once bound, and another program that sets it (uvicorn, `http.server`, a second
`specgen serve`) is refused the reserved port. The workers still bind it: SO_REUSEPORT, set on both, lets them.
"""

from __future__ import annotations

import socket

from specgen.errors import SpecgenError

BACKLOG = 2048  # uvicorn's default listen backlog


class WorkersError(SpecgenError, OSError):
    """The workers cannot be started (an address cannot be bound, an option that one worker alone can serve)."""


def _bound(host: str, port: int, share: bool, what: str) -> socket.socket:
    """A TCP socket with SO_REUSEADDR (and SO_REUSEPORT when `share`) set, bound to host:port; one line when it
    cannot."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT left on the port does not hold it
        if share:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError as exc:
        raise WorkersError(f"{what} on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def listen(host: str, port: int) -> socket.socket:
    """The HTTP socket every worker accepts from, listening and inheritable."""
    sock = _bound(host, port, False, "cannot listen")
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


def reserve(host: str, port: int) -> socket.socket:
    """A bound, not listening, SO_REUSEPORT socket: holds the gRPC port for the workers (which bind it the same way)."""
    sock = _bound(host, port, True, "gRPC cannot listen")
    # Bound past any TIME_WAIT; now refuse other programs' SO_REUSEADDR binds, which a socket that does not listen
    # and keeps the option would let through (the module's docstring).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
    return sock
