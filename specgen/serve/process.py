"""One server process: load the repository, bind, serve HTTP (and gRPC) until a signal (`serve`), and its settings.

Apart from the package's `__init__` so that `workers.py`, which starts N of these, imports it without an import
cycle through the package (which starts workers when asked for more than one).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from specgen.serve.options import ServeOptions

if TYPE_CHECKING:
    from specgen.serve.server import Server
    from specgen.serve.service import Service

log = logging.getLogger("specgen.serve")
WORKER_TIMEOUT = 30.0  # a serving worker silent this long is frozen: the parent kills and replaces it (gunicorn's 30 s)


@contextmanager
def _signals_noted(server: Server) -> Iterator[list[int]]:
    """While uvicorn runs: SIGTERM / SIGINT handlers that note the signal and ask `server` to exit.

    uvicorn shuts down gracefully on these signals, restores the handlers it found and raises the
    signal again; with these handlers in place that second delivery is noted instead of killing
    the process, so a graceful shutdown exits with status 0. A signal that comes before uvicorn has
    installed its own handlers (while the event loop starts) would otherwise be noted and forgotten,
    and the server would serve on: `should_exit` makes uvicorn stop as soon as it has started.
    """
    received: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        server.should_exit = True

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
    options: ServeOptions | None = None  # None: the defaults
    listen_fd: int | None = None  # a worker of --workers N: the parent's listening HTTP socket (host / port unused)
    ready_fd: int | None = None  # a worker: "1" is written there once it serves, then a heartbeat byte a second
    worker_timeout: float = WORKER_TIMEOUT  # --workers N: a worker silent this long is killed and replaced
    worker: int | None = None  # a worker's index, in every log line
    cuda_graphs: bool = False  # --cuda-graphs: one captured CUDA graph per batch bucket (serve/models.py)
    restart: bool = False  # a worker the parent restarted: loads what loads (ModelControl.restore), see `serve`


def _restore(service: Service) -> None:
    """A restarted worker's load (ModelControl.restore): what loads serves, the rest is refused as the live workers
    refused it. It must serve every model some live worker serves, else a share of the requests would get 404 for a
    model that is served (the live workers keep in memory a version whose config.pbtxt no longer reads, or whose
    file was replaced by one that does not load): then RepositoryError, and the parent tries again later, while the
    live workers take every request."""
    import asyncio

    from specgen.serve.model_config import RepositoryError

    asyncio.run(service.control.restore())
    missing = sorted(service.metrics.served_by_live_workers() - set(service.registry.models))
    if missing:
        why = "; ".join(f"{name}: {service.control.problems.get(name, 'not loaded')}" for name in missing)
        raise RepositoryError(f"the other workers serve {missing}, which do(es) not load from the repository as it is "
                              f"now ({why}); this worker starts once the repository serves them again (or the other "
                              "workers let them go)")


def serve(settings: ServerSettings) -> int:
    """Load the repository, then serve HTTP (and gRPC when the options name a port) until a signal; the exit status.

    Which refusals are fatal: at the first start every folder must load (exit 1 and every problem listed: Triton's
    default --exit-on-error), a worker the parent restarts (`settings.restart`) loads what loads and refuses the
    rest, as the workers that kept serving did at their poll; it fails (one `start_failed` JSON line, exit 1: the
    parent tries again, backing off) only where it cannot serve what they serve (`_restore`)."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # gRPC's own stderr lines are not JSON; its errors are ours to log

    from specgen.runtime.predictor import InputError
    from specgen.serve import logs
    from specgen.serve.app import create_app
    from specgen.serve.control import ModelSource
    from specgen.serve.model_config import RepositoryError
    from specgen.serve.models import load_repository
    from specgen.serve.server import Server, server_config

    logs.configure(settings.log_level, None if settings.worker is None else {"worker": settings.worker})
    options = settings.options or ServeOptions()
    source = ModelSource(settings.repo, settings.provider, settings.threads, settings.cuda_graphs)
    try:
        if settings.restart:
            app = create_app([], options, source)
            _restore(app.state.service)
        else:
            app = create_app(load_repository(settings.repo, provider=settings.provider, threads=settings.threads,
                                             cuda_graphs=settings.cuda_graphs), options, source)
    except (RepositoryError, InputError, ValueError) as exc:
        if not settings.restart:  # the first start: the user's error, one plain line, as every command's
            print(f"specgen serve: {exc}", file=sys.stderr)
        else:  # a restart, with the parent's JSON lines around it (worker_exited says when it is tried again)
            log.error("worker could not start", extra={"fields": {"event": "start_failed", "error": str(exc)}})
        return 1
    config = server_config(app, settings.host, settings.port, timeout_graceful_shutdown=settings.graceful_timeout)
    server = Server(config)
    server.ready_fd = settings.ready_fd
    sockets = None if settings.listen_fd is None else [socket.socket(fileno=settings.listen_fd)]
    with _signals_noted(server) as received:
        try:
            server.run(sockets=sockets)
        except SystemExit as exc:  # uvicorn exits 1 when it cannot bind the address
            return int(exc.code or 0) if isinstance(exc.code, int) else 1
    if not server.started or server.grpc_failed:
        return 1
    if received:
        log.info("stopped", extra={"fields": {"event": "stopped", "signal": signal.Signals(received[0]).name}})
    return 0
