"""The server's settings, one frozen value shared by HTTP (app.py, server.py), gRPC (grpc_server.py) and the
worker processes (workers.py): a module of its own so each of them can name the type without importing another."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_PORT = 65535
# A worker of --workers N writes a byte to the parent this often from its event loop (server.py).
HEARTBEAT_SECONDS = 1.0
# The shortest worker_timeout (silent heartbeats before the parent kills a worker as frozen). Not all of a request
# runs in threads: the JSON of a response is encoded on the event loop (app.py encode_response), and a compressed
# body is inflated, an envelope parsed and its depth scanned there, and no beat is sent meanwhile. A response of
# 4 million float32 outputs (80 MB of JSON) took 2.2 s to encode on an idle development machine; twice that, or a
# loaded machine, nears 10 s. Below that floor such a healthy worker would be killed with every request it holds
# (docs/serve.md says to raise it for larger outputs); a real freeze is still replaced within seconds.
MIN_WORKER_TIMEOUT = 10.0
# The longest any serve timeout is, worker_timeout included (the command line's and run_server's bound): past a day
# no client is still there, and gRPC takes the header timeout as an int32 of milliseconds (its handshake deadline).
MAX_TIMEOUT_SECONDS = 86_400.0
WORKER_TIMEOUT_RANGE = (f"seconds from {MIN_WORKER_TIMEOUT:g} (a response encoded on a worker's event loop stops its "
                        f"heartbeats meanwhile) to {MAX_TIMEOUT_SECONDS:,.0f} (a day)")
# Said by `specgen serve` (a usage error) and by the Supervisor, for a caller of run_server in code.
EXPLICIT_NEEDS_ONE_WORKER = ("--model-control explicit needs --workers 1: a load or unload request would reach "
                             "only one worker (use --model-control poll with several workers)")
GRPC_INT_LIMIT = 2**31 - 1  # gRPC's channel arguments are C ints (its connection quota aborts the process at this one)
# Fields gRPC takes as channel arguments (grpc_limits.py): seconds as milliseconds, counts as they are.
GRPC_SECONDS = ("header_timeout", "send_timeout", "grpc_keepalive", "grpc_idle_timeout")
GRPC_COUNTS = ("max_body_bytes", "max_connections", "max_header_bytes", "grpc_max_streams")
SECONDS = ("body_timeout", "poll_seconds")
COUNTS = ("buffer_bytes", "decode_threads", "max_headers")


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

    def __post_init__(self) -> None:
        """Refuse a value no server can run with (the command line refuses them first, commands/serve.py): nan or a
        negative timeout would fail every timer, a count of 0 refuse every request, port 70000 bind 70000 mod 65536,
        and a value past a C int overflow gRPC's channel arguments."""
        for name in SECONDS:
            _check(name, getattr(self, name), _is_seconds, "a positive finite number of seconds")
        for name in GRPC_SECONDS:  # gRPC takes them in milliseconds
            _check(name, getattr(self, name), lambda v: _is_seconds(v) and v * 1000 <= GRPC_INT_LIMIT,
                   f"a positive finite number of seconds, at most {GRPC_INT_LIMIT // 1000:,}")
        for name in COUNTS:
            _check(name, getattr(self, name), lambda v: _is_int(v) and v >= 1, "a whole number of 1 or more")
        for name in GRPC_COUNTS:
            _check(name, getattr(self, name), lambda v: _is_int(v) and 1 <= v < GRPC_INT_LIMIT,
                   f"a whole number from 1 to {GRPC_INT_LIMIT - 1:,}")
        for name in ("queue_size", "grpc_max_rpcs", "grpc_max_message_bytes"):
            _check(name, getattr(self, name), lambda v: v is None or (_is_int(v) and 1 <= v < GRPC_INT_LIMIT),
                   f"None or a whole number from 1 to {GRPC_INT_LIMIT - 1:,}")
        _check("grpc_port", self.grpc_port, lambda v: v is None or (_is_int(v) and 0 <= v <= MAX_PORT),
               f"None or a port number from 0 to {MAX_PORT} (0: any free port)")
        _check("graceful_timeout", self.graceful_timeout, lambda v: v is None or v == 0 or _is_seconds(v),
               "None or a finite number of seconds, 0 or more")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _check(name: str, value: Any, valid: Callable[[Any], bool], expected: str) -> None:
    if not valid(value):
        raise ValueError(f"ServeOptions.{name}: received {value!r}; expected {expected}")


def worker_timeout_valid(value: Any) -> bool:
    """A worker_timeout the parent can judge a worker by: a number of seconds in MIN_WORKER_TIMEOUT..MAX_TIMEOUT_SECONDS
    (nan would never compare as late, so a frozen worker would be kept)."""
    return _is_seconds(value) and MIN_WORKER_TIMEOUT <= value <= MAX_TIMEOUT_SECONDS
