"""`specgen serve`: exported models over the Open Inference Protocol (KServe v2), with dynamic batching.

    from specgen.serve import run_server
    run_server(Path("runs/digits_cnn/export"), "127.0.0.1", 8000, "auto")

Modules: `repository` (the Triton-layout folder; config.pbtxt read into Triton's ModelConfig
message; version_policy), `models` (onnxruntime sessions through Predictor, checked against the
configs and warmed), `registry` (the served versions, swapped without failing a request), `control`
(--model-control none|poll|explicit), `protocol` and `values` (HTTP requests in, responses out),
`grpc_protocol` and `grpc_server` (the same over gRPC), `stats` (Triton's statistics extension),
`limits` (body bounds, budget, deadline), `batcher` (dynamic batching in a worker thread), `metrics`
(Prometheus), `logs` (JSON lines), `app` (the Starlette application), `server` (uvicorn plus gRPC;
the header deadline and connection limit), `connection` (uvicorn's protocol with the memory of a
connection bounded: parse-ahead, header bytes, unread answers). Needs the `serve` extra (starlette,
uvicorn, prometheus_client, tritonclient[grpc] with grpcio) and onnxruntime. See docs/serve.md.

`serve(ServerSettings(...))` is the whole start of one server process (load, check, warm, bind, run
until a signal); `run_server` builds the settings from keyword arguments.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger("specgen.serve")


@contextmanager
def _signals_noted() -> Iterator[list[int]]:
    """While uvicorn runs: SIGTERM / SIGINT handlers that only note the signal.

    uvicorn shuts down gracefully on these signals, restores the handlers it found and raises the
    signal again; with these handlers in place that second delivery is noted instead of killing
    the process, so a graceful shutdown exits with status 0.
    """
    received: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, note) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass(frozen=True)
class ServerSettings:
    """Everything one server process needs: `serve(settings)` runs it (a worker process would call that)."""

    repo: Path
    host: str = "127.0.0.1"
    port: int = 8000
    provider: str = "auto"
    threads: int = 0
    log_level: str = "info"
    graceful_timeout: float | None = 30.0
    options: Any = None  # ServeOptions (None: the defaults); imported lazily, it needs the serve extra


def run_server(repo: Path, host: str = "127.0.0.1", port: int = 8000, provider: str = "auto", *,
               queue_size: int | None = None, batching: bool = True, threads: int = 0, log_level: str = "info",
               graceful_timeout: float | None = 30.0, header_timeout: float = 10.0, body_timeout: float = 30.0,
               max_connections: int = 1000, send_timeout: float = 10.0, grpc_port: int | None = None,
               model_control: str = "none", poll_seconds: float = 15.0) -> int:
    """Serve every model of the Triton-layout repository `repo` until SIGTERM / SIGINT; the exit status.

    0 after a graceful shutdown (in-flight requests answered, batchers drained); 1 when the
    repository cannot be served or an address cannot be bound. `queue_size` bounds each
    model's waiting requests (default: the config's default_queue_policy.max_queue_size, else
    4 x max_batch_size); `batching=False` runs every request alone; `threads` is onnxruntime's
    intra-op thread count (0: its default); `graceful_timeout` caps the wait for in-flight
    requests on shutdown (None: no cap). `header_timeout` / `body_timeout`: seconds a request's
    headers / body may take to arrive (408 after); `max_connections`: open connections at most
    (lowered to what `ulimit -n` allows); `send_timeout`: seconds a client may leave its answers unread
    before it is disconnected. `grpc_port`: also serve gRPC there (on `host`); `model_control`: none, poll
    (rescan the repository every `poll_seconds`) or explicit (Triton's repository load / unload).
    """
    from specgen.serve.app import ServeOptions

    options = ServeOptions(queue_size=queue_size, batching=batching, header_timeout=header_timeout,
                           body_timeout=body_timeout, max_connections=max_connections, send_timeout=send_timeout,
                           grpc_port=grpc_port, grpc_host=host, model_control=model_control, poll_seconds=poll_seconds,
                           graceful_timeout=graceful_timeout)
    return serve(ServerSettings(Path(repo), host, port, provider, threads, log_level, graceful_timeout, options))


def serve(settings: ServerSettings) -> int:
    """Load the repository, then serve HTTP (and gRPC when the options name a port) until a signal; the exit status."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # gRPC's own stderr lines are not JSON; its errors are ours to log

    from specgen.runtime.predictor import InputError
    from specgen.serve import logs
    from specgen.serve.app import ServeOptions, create_app
    from specgen.serve.control import ModelSource
    from specgen.serve.models import load_repository
    from specgen.serve.repository import RepositoryError
    from specgen.serve.server import Server, server_config

    logs.configure(settings.log_level)
    options = settings.options or ServeOptions()
    try:
        models = load_repository(settings.repo, provider=settings.provider, threads=settings.threads)
        app = create_app(models, options, ModelSource(settings.repo, settings.provider, settings.threads))
    except (RepositoryError, InputError, ValueError) as exc:
        print(f"specgen serve: {exc}", file=sys.stderr)
        return 1
    config = server_config(app, settings.host, settings.port, timeout_graceful_shutdown=settings.graceful_timeout)
    server = Server(config)
    with _signals_noted() as received:
        try:
            server.run()
        except SystemExit as exc:  # uvicorn exits 1 when it cannot bind the address
            return int(exc.code or 0) if isinstance(exc.code, int) else 1
    if not server.started or server.grpc_failed:
        return 1
    if received:
        log.info("stopped", extra={"fields": {"event": "stopped", "signal": signal.Signals(received[0]).name}})
    return 0


__all__ = ["ServerSettings", "run_server", "serve"]
