"""The server's settings, one frozen value shared by HTTP (app.py, server.py), gRPC (grpc_server.py) and the
worker processes (workers.py): a module of its own so each of them can name the type without importing another."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeOptions:
    """Server-wide settings; `queue_size` None: the config's default_queue_policy.max_queue_size, else 4 x max_batch_size.

    `max_body_bytes` caps every model's body bound (see limits.py); `buffer_bytes` bounds the bytes
    of all bodies being read or decoded at once; `decode_threads` the large bodies decoded at once.
    `header_timeout` / `max_connections`, `max_header_bytes` / `max_headers` (request line and headers; 431
    past them) and `send_timeout` (a client that reads none of its answers for that long is disconnected)
    are enforced by the connection protocol (connection.py, server.py).

    `model_control` / `poll_seconds`: the live repository (control.py). `grpc_port` (None: no gRPC; 0: any
    free port) and the `grpc_*` bounds: the gRPC server (grpc_server.py), which also takes `max_connections`,
    `max_header_bytes` (metadata), `header_timeout` (handshake), `send_timeout` (keepalive ping answers)
    and `graceful_timeout` (in-flight calls on shutdown). `grpc_idle_timeout`: a gRPC connection without a call
    for that long is closed (grpc_limits.py says why it is not `header_timeout`).
    """

    queue_size: int | None = None
    batching: bool = True
    max_body_bytes: int = 64 << 20
    buffer_bytes: int = 256 << 20
    decode_threads: int = 2
    body_timeout: float = 30.0
    header_timeout: float = 10.0
    max_connections: int = 1000
    max_header_bytes: int = 16 << 10
    max_headers: int = 100
    send_timeout: float = 10.0
    model_control: str = "none"
    poll_seconds: float = 15.0
    grpc_port: int | None = None
    grpc_host: str = "127.0.0.1"
    grpc_max_streams: int = 100
    grpc_max_rpcs: int | None = None
    grpc_max_message_bytes: int | None = None
    grpc_keepalive: float = 30.0
    grpc_idle_timeout: float = 300.0
    grpc_reuse_port: bool = False  # SO_REUSEPORT: for several worker processes serving one gRPC port
    graceful_timeout: float | None = 30.0
