"""The Service: the served versions, their batchers, metrics and statistics, the live repository, and the lifetime
of batchers and gRPC. HTTP (app.py, whose handlers extend it) and gRPC (grpc_server.py) share this one Service: one
set of versions, batchers, limits, metrics, statistics and logs for both protocols.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette

from specgen.serve.control import ModelControl, ModelSource
from specgen.serve.limits import ByteBudget, DecodeGate
from specgen.serve.metrics import ServerMetrics
from specgen.serve.models import ServedModel
from specgen.serve.options import ServeOptions
from specgen.serve.registry import Registry, Version
from specgen.serve.stats import VersionStats

log = logging.getLogger("specgen.serve")


class Service:
    """The served versions, their batchers, metrics and statistics, the live repository, and gRPC's lifetime."""

    def __init__(self, models: Sequence[ServedModel], options: ServeOptions, source: ModelSource | None = None):
        self.options = options
        self.metrics = ServerMetrics()
        self.ready = False
        self.budget = ByteBudget(options.buffer_bytes)
        self.registry = Registry(self.metrics, options.queue_size, options.batching, options.max_body_bytes,
                                 self.budget)
        by_name: dict[str, list[ServedModel]] = defaultdict(list)
        for m in models:
            by_name[m.name].append(m)
        for name, versions in by_name.items():
            self.registry.install(name, {m.version: self.registry.version(m) for m in versions})
        self.control = ModelControl(self.registry, source, options.model_control, options.poll_seconds)
        self.gate = DecodeGate(options.decode_threads)
        self.grpc: Any = None  # the grpc.aio server, while it runs
        self.grpc_port: int | None = None
        self._grpc_stopping: asyncio.Task[None] | None = None

    @property
    def models(self) -> dict[str, dict[int, Version]]:
        return self.registry.models

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.registry.start()
        self.control.start()
        self.ready = True
        for versions in self.models.values():
            for served in versions.values():
                model, batcher = served.model, served.batcher
                log.info("serving model", extra={"fields": {
                    "event": "model_ready", "model": model.name, "version": model.version, "provider": model.provider,
                    "max_batch_size": model.config.max_batch_size, "dynamic_batching": batcher.batching,
                    "max_queue_delay_us": model.config.max_queue_delay_us, "queue_size": batcher.queue_size}})
        try:
            yield
        finally:
            self.begin_shutdown()
            if self._grpc_stopping is not None:
                await self._grpc_stopping
            await self.control.stop()
            await self.registry.close()
            log.info("batchers drained", extra={"fields": {"event": "drained"}})

    async def start_grpc(self) -> None:
        """Start the gRPC server (server.Server calls this once HTTP is bound); GrpcStartError if it cannot listen."""
        from specgen.serve.grpc_server import start_grpc

        self.grpc, self.grpc_port = await start_grpc(self)

    def begin_shutdown(self) -> None:
        """Not ready any more; gRPC takes no new calls and its calls in flight get `graceful_timeout` to finish."""
        self.ready = False
        if self.grpc is not None and self._grpc_stopping is None:
            self._grpc_stopping = asyncio.get_running_loop().create_task(self.grpc.stop(self.options.graceful_timeout))

    def statistics(self, name: str | None, version: str | None) -> list[VersionStats]:
        """The statistics of one version, every version of a model, or every model (a 404 ProtocolError if unknown)."""
        if name is None:
            return [served.stats for versions in self.models.values() for served in versions.values()]
        if version is None or version == "":
            self.registry.lookup(name, None)
            return [served.stats for served in self.models[name].values()]
        return [self.registry.lookup(name, version).stats]

    def metadata(self, name: str, version: str | None) -> dict[str, Any]:
        """The model metadata of one version, or of the model (a 404 ProtocolError if unknown). `versions` is the
        version asked for alone, else the served ones, as Triton's TRITONSERVER_ServerModelMetadata answers."""
        served = self.registry.lookup(name, version)
        asked = version is not None and version != ""
        return served.model.metadata([served.model.version] if asked else list(self.models[name]))
