"""The gRPC server's limits: the largest message, the channel arguments that bound connections, streams,
handshakes and pings, and the time an answer may wait to be sent. grpc_server.py starts the server with them.

**Limits** (ServeOptions): messages at most `grpc_max_message_bytes` (default: the largest request any
model served at start accepts, raw or typed, plus 64 KiB, at most `max_body_bytes` (64 MiB); with a live
repository at least gRPC's own default of 4 MiB, room for models loaded later, whose larger requests get
RESOURCE_EXHAUSTED over gRPC: the limit is fixed when gRPC starts), larger ones refused by gRPC with RESOURCE_EXHAUSTED
before our code sees them; at most `grpc_max_rpcs` calls at once (default: `buffer_bytes` / the
message limit, within 64..`max_connections`, so the messages held at once stay near the HTTP body budget),
more refused with RESOURCE_EXHAUSTED; `grpc_max_streams` (100) concurrent streams per connection
(HTTP/2 SETTINGS: a client queues the rest); `max_connections` connections; `max_header_bytes` of
metadata; a connection must finish its handshake within `header_timeout`, and one without a call for
`grpc_idle_timeout` (300 s) is closed; a keepalive ping every `grpc_keepalive` seconds that must be
answered within `send_timeout`, so a client that stops reading its connection is disconnected;
deadlines are honoured (a call past its deadline is cancelled, its queued request dropped unrun,
DEADLINE_EXCEEDED). Decoding holds the request's bytes against the
same body budget as HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import TYPE_CHECKING, Any

from specgen.serve.limits import ENVELOPE_BYTES

if TYPE_CHECKING:
    from specgen.serve.options import ServeOptions
    from specgen.serve.registry import Version

log = logging.getLogger("specgen.serve")

# Bytes per element of a valid request's largest encoding: raw little-endian, or packed typed contents (an INT32 or
# INT64 varint takes up to 10 bytes; UINT8 travels as uint32, 2 bytes for 128..255).
ELEMENT_BYTES = {"FP32": 4, "FP64": 8, "INT32": 10, "INT64": 10, "UINT8": 2}
MIN_RPCS = 64
GRPC_DEFAULT_MESSAGE_BYTES = 4 << 20  # gRPC's own default receive limit


def message_limit(options: ServeOptions, models: dict[str, dict[int, Version]]) -> int:
    """The largest gRPC message accepted for the models served at start (the module docstring says how)."""
    if options.grpc_max_message_bytes is not None:
        return options.grpc_max_message_bytes
    largest = GRPC_DEFAULT_MESSAGE_BYTES if options.model_control != "none" else ENVELOPE_BYTES
    for versions in models.values():
        for served in versions.values():
            config = served.model.config
            dims = [t.dims for t in config.inputs]
            if any(d < 0 for shape in dims for d in shape):  # a variable dimension: nothing bounds it but the cap
                return options.max_body_bytes
            elements = [max(config.max_batch_size, 1) * math.prod(shape) for shape in dims]
            size = ENVELOPE_BYTES + sum(n * ELEMENT_BYTES[t.datatype] for n, t in zip(elements, config.inputs, strict=True))
            largest = max(largest, size)
    return min(largest, options.max_body_bytes)


def grpc_options(options: ServeOptions, limit: int) -> list[tuple[str, Any]]:
    return [
        # A port in use is an error, not silently shared with another server; worker processes of one server share it.
        ("grpc.so_reuseport", int(options.grpc_reuse_port)),
        ("grpc.max_receive_message_length", limit),
        # Not lowered below the calls at once: gRPC clients of one process share one connection per server (grpc's
        # subchannel pool), so a per-connection cap would throttle them; bound_send frees calls a peer holds.
        ("grpc.max_concurrent_streams", options.grpc_max_streams),
        # A connection without a call for grpc_idle_timeout is closed (GOAWAY; a client's channel reconnects on its
        # next call): gRPC refuses newcomers at max_connections and evicts no one, so leaked connections must not hold
        # it for good. Not header_timeout (10 s): a call sent as the GOAWAY leaves fails UNAVAILABLE "Stream removed"
        # (rare, measured with the idle time scaled to 0.3 s and calls every 0.27..0.39 s: 1 in 150 calls, 0 in 300;
        # tritonclient does not retry), so the close must sit far above the period of pollers and health checks. A peer
        # that reconnects is not bounded by it: only a proxy in front limits connections per client.
        ("grpc.max_connection_idle_ms", int(options.grpc_idle_timeout * 1000)),
        ("grpc.max_allowed_incoming_connections", options.max_connections),
        # Metadata: gRPC's max_metadata_size is a soft limit, past which it refuses a growing random share of calls up
        # to the hard limit (1.25 x the soft one by default): the same call would pass or fail by chance. Both set to
        # max_header_bytes make the limit exact: a call whose headers (HPACK sizes: name + value + 32 bytes each, the
        # call's own :path, user-agent ... included) exceed it is refused RESOURCE_EXHAUSTED, every other accepted.
        ("grpc.max_metadata_size", options.max_header_bytes),
        ("grpc.absolute_max_metadata_size", options.max_header_bytes),
        ("grpc.server_handshake_timeout_ms", int(options.header_timeout * 1000)),
        ("grpc.keepalive_time_ms", int(options.grpc_keepalive * 1000)),
        ("grpc.keepalive_timeout_ms", int(options.send_timeout * 1000)),
        ("grpc.http2.ping_timeout_ms", int(options.send_timeout * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


def bound_send(seconds: float) -> None:
    """Cancel the running call if its answer is not sent within `seconds` from now.

    grpc.aio sends a unary call's answer in the same task that ran the method, after it returns, and counts the
    call against maximum_concurrent_rpcs until that task ends. A client that grants no HTTP/2 flow-control window
    (SETTINGS_INITIAL_WINDOW_SIZE 0, no WINDOW_UPDATE) while answering keepalive pings lets no answer out, so its
    calls would hold their slots, and every other client would be refused RESOURCE_EXHAUSTED, for as long as it
    stays connected. Cancelling the task cancels the call (measured: the slot stays taken while the connection is
    open), which leaves the connection without a live call, so grpc.max_connection_idle_ms closes it and gRPC frees
    its slots: a peer holds them at most send_timeout + grpc_idle_timeout."""
    task = asyncio.current_task()
    if task is None:
        return
    timer = asyncio.get_running_loop().call_later(seconds, _cancel_unsent, task)
    task.add_done_callback(lambda _: timer.cancel())


def _cancel_unsent(task: asyncio.Task[Any]) -> None:
    if not task.done():
        log.info("gRPC answer not sent in time", extra={"fields": {"event": "send_timeout", "protocol": "grpc"}})
        task.cancel()
