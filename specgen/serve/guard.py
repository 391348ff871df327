"""What a connection is held to and how one is refused: the per-connection limits (`Guard`), the exception a parser
callback raises for a request the server will not take (`Refused`), and the raw answer written when no request
cycle exists to answer (`raw_response`). The protocol that enforces them is connection.py's (and server.py's)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from specgen.errors import SpecgenError
from specgen.serve.metrics import ServerMetrics
from specgen.serve.protocol import error_body

log = logging.getLogger("specgen.serve")


@dataclass(frozen=True)
class Guard:
    """The per-connection limits (from ServeOptions) and where closed connections are counted."""

    header_timeout: float
    max_connections: int
    max_header_bytes: int = 16 << 10
    max_headers: int = 100
    send_timeout: float = 10.0
    metrics: ServerMetrics | None = None

    def closed(self, reason: str, client: Any) -> None:
        if self.metrics is not None:
            self.metrics.connection_closed(reason)
        log.info("connection closed", extra={"fields": {"event": "connection_closed", "reason": reason,
                                                        "client": f"{client[0]}:{client[1]}" if client else None}})


class Refused(SpecgenError):
    """Raised in a parser callback to stop parsing a request the server will not take (httptools re-raises it)."""

    def __init__(self, reason: str, status: bytes, message: str):
        super().__init__(message)
        self.reason, self.status, self.message = reason, status, message


def raw_response(status: bytes, message: str) -> bytes:
    """A whole HTTP/1.1 error response, written straight to the transport (no request cycle exists to answer)."""
    body = error_body(message)
    extra = b"retry-after: 1\r\n" if status.startswith(b"503") else b""
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\nconnection: close\r\n" + extra + b"\r\n" + body)

