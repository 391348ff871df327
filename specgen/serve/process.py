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

from specgen.paths import shown
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
    live workers take every request. Under --model-control none the live workers never read the repository again,
    so it loads only their versions (not a version added since: requests would flip between two versions for good)
    and must serve each of them. With no live worker serving (all died at once) it loads what a poll would."""
    import asyncio

    from specgen.serve.model_config import RepositoryError

    live = service.metrics.served_by_live_workers()
    fixed = service.control.mode == "none" and bool(live)
    asyncio.run(service.control.restore(live if fixed else None))
    served = service.registry.models
    # Under poll a model served at other versions is fine: each worker switches versions at its own poll.
    lacking = {name: missing for name, versions in sorted(live.items())
               if (missing := sorted(versions - set(served.get(name, {})))) and (fixed or name not in served)}
    if lacking:
        raise RepositoryError(_cannot_serve(service, lacking) if fixed else _cannot_serve_models(service, lacking))


def _cannot_serve_models(service: Service, lacking: dict[str, list[int]]) -> str:
    """Models the live workers serve and this worker cannot load from the repository as it is now (poll)."""
    one = len(lacking) == 1
    why = "; ".join(f"{name}: {service.control.problems.get(name, 'not loaded')}" for name in lacking)
    return (f"the other workers serve {_names(lacking)}, which {'does' if one else 'do'} not load from the "
            f"repository as it is now ({why}); this worker starts once the repository serves "
            f"{'it' if one else 'them'} again (or the other workers let {'it' if one else 'them'} go)")


def _cannot_serve(service: Service, lacking: dict[str, list[int]]) -> str:
    """Versions the live workers loaded at their start (--model-control none) that this worker cannot load now."""
    one = sum(len(versions) for versions in lacking.values()) == 1
    said = ", ".join(f"'{name}' {_versions(versions)}" for name, versions in lacking.items())
    why = "; ".join(f"{name} version {version}: {_why(service, name, version)}"
                    for name, versions in lacking.items() for version in versions)
    return (f"the other workers serve {said} as they loaded {'it' if one else 'them'} at their start "
            "(--model-control none: they do not read the repository again), which "
            f"{'does' if one else 'do'} not load from the repository as it is now ({why}); this worker starts once "
            f"the repository holds {'it' if one else 'them'} again")


def _why(service: Service, name: str, version: int) -> str:
    """Why this worker does not serve a version the live workers serve: its refusal, its folder gone, the model's
    problem (a config.pbtxt that does not read), or its config.pbtxt's version_policy."""
    control = service.control
    refused = control.refused.get((name, version))
    if refused is not None:
        return refused[1]
    folder = control.repo / name / str(version)
    if not folder.is_dir():
        return f"{shown(folder)}: no such folder"
    return control.problems.get(name, "config.pbtxt's version_policy no longer chooses it")


def _names(lacking: dict[str, list[int]]) -> str:
    return ", ".join(f"'{name}'" for name in lacking)


def _versions(versions: list[int]) -> str:
    return f"version {versions[0]}" if len(versions) == 1 else f"versions {versions}"


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
