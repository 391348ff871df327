"""The one exception the request path raises for a request it refuses, and the scope key that says a request's body
broke off as malformed HTTP."""

from __future__ import annotations

from specgen.errors import SpecgenError

# An ASGI scope key connection.py sets when a request's body turns out to be malformed HTTP (a chunk size that is not
# hex): the handler then reads a disconnect, and counts a bad request (400) where it would count a client that left.
MALFORMED = "specgen.malformed"
# Set by connection.py when the server shuts down while a request's body is still arriving: it answered 503 at once
# (waiting for the body would hold the shutdown up to body_timeout); the handler counts its disconnect as that 503.
SHUT_DOWN = "specgen.shut_down"
SHUT_DOWN_MESSAGE = ("the server is shutting down: this request's body had not all arrived, and the request was not run; "
                     "retry it")


class ProtocolError(SpecgenError):
    """A request the server answers with `status` and `message` (JSON `{"error": message}`).

    `close`: the body was not read (refused on its headers, too large, too slow), so the
    connection is closed after the answer rather than reading and discarding the rest.
    `grpc_code`: the gRPC status code name where it is not the one `status` maps to (grpc_server.py).
    `request_id`: the id of the refused request, where its body parsed far enough to carry one, for its log line
    (HTTP; a gRPC request's id is read from its message before any check).
    """

    def __init__(self, message: str, status: int = 400, *, close: bool = False, grpc_code: str | None = None):
        super().__init__(message)
        self.message, self.status, self.close, self.grpc_code = message, status, close, grpc_code
        self.request_id: str | None = None
