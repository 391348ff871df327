"""The versions being served, swapped while requests run: no request fails or is dropped by a swap.

`Registry.models` maps each model name to its served versions (`Version`: the loaded model, its own
batcher and worker thread, body limit and statistics). The map of a model is replaced whole,
never changed in place, and only on the event loop, so a request sees one consistent set.

A request takes its version with `registry.use(name, version)` (the highest when it names none)
and holds it until answered. Between that lookup and `batcher.submit` the request may wait (its
body arriving, a decode in a thread), so a version swapped out is not closed at once: it is
`retired`, takes no new lookups, and its batcher is closed (the admitted requests run first) only
when the last request holding it has been answered.

A version batches when the server does (no --no-batching) and its config asks (`dynamic_batching`), unless its
graph's rows depend on each other (`ServedModel.rows_coupled`, coupling.py): then each request runs alone and
one warning line (`batching_off`) says why.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from types import TracebackType

from specgen.serve.batcher import Batcher
from specgen.serve.errors import ProtocolError
from specgen.serve.limits import BodyLimit, ByteBudget, body_limit
from specgen.serve.metrics import ServerMetrics
from specgen.serve.models import ServedModel
from specgen.serve.repository import version_number
from specgen.serve.stats import VersionStats
from specgen.serve.values import cut

log = logging.getLogger("specgen.serve")


@dataclass(eq=False)
class Version:
    """One served version: the model, its batcher, its body bound and its statistics."""

    model: ServedModel
    batcher: Batcher
    limit: BodyLimit
    stats: VersionStats
    users: int = 0  # requests holding it
    retired: str | None = None  # why it is no longer served (replaced, unloaded, removed from the repository)
    closing: asyncio.Task[None] | None = field(default=None, repr=False)


class Use:
    """`with registry.use(name, version) as v:` holds `v` until the block ends (a small class: the hot path)."""

    __slots__ = ("registry", "version")

    def __init__(self, registry: Registry, version: Version):
        self.registry, self.version = registry, version

    def __enter__(self) -> Version:
        self.version.users += 1
        return self.version

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        version = self.version
        version.users -= 1
        if version.retired and version.users == 0:
            self.registry.close_later(version)


class Registry:
    """Served versions by model name; see the module docstring."""

    def __init__(self, metrics: ServerMetrics, queue_size: int | None, batching: bool, max_body_bytes: int,
                 budget: ByteBudget):
        self.metrics, self.budget = metrics, budget
        self.queue_size, self.batching, self.max_body_bytes = queue_size, batching, max_body_bytes
        self.models: dict[str, dict[int, Version]] = {}
        self.started = False
        self._closing: set[asyncio.Task[None]] = set()

    def version(self, model: ServedModel) -> Version:
        """A Version for a loaded model: its batcher is started when the registry is (or at once, after that)."""
        config = model.config
        queue_size = self.queue_size if self.queue_size is not None else (
            config.max_queue_size or 4 * max(config.max_batch_size, 1))
        stats = VersionStats(model.name, model.version)
        batching = self.batching and config.dynamic_batching
        if batching and model.rows_coupled is not None:
            # The graph's rows depend on each other (a dynamically quantized int8 variant: coupling.py), so joined
            # requests would change each other's answers: each runs alone, whatever the config asks.
            batching = False
            log.warning("dynamic batching off for this version", extra={"fields": {
                "event": "batching_off", "model": model.name, "version": model.version,
                "reason": model.rows_coupled}})
        batcher = Batcher(model.name, model.run, max_batch_size=config.max_batch_size,
                          max_delay=config.max_queue_delay_us / 1e6, queue_size=queue_size,
                          batching=batching, observer=self.metrics.observer(), stats=stats, version=model.version,
                          policy=config.queue_policy)
        limit = body_limit(config, self.max_body_bytes)
        self.budget.total = max(self.budget.total, limit.bound(True))  # one largest body always fits
        return Version(model, batcher, limit, stats)

    def lookup(self, name: str, version: str | None) -> Version:
        """The version a request names (the highest when None), or a 404 ProtocolError."""
        versions = self.models.get(name)
        if not versions:
            raise ProtocolError(f"unknown model '{cut(name)}'; this server serves {sorted(self.models)}", 404)
        if version is None or version == "":
            return versions[max(versions)]
        number = version_number(version)
        found = versions.get(number) if number is not None else None
        if found is None:
            served = [str(v) for v in sorted(versions)]
            which = f"the served version is '{served[0]}'" if len(served) == 1 else f"the served versions are {served}"
            raise ProtocolError(f"model '{name}' has no version '{cut(version)}'; {which}", 404)
        return found

    def use(self, name: str, version: str | None) -> Use:
        return Use(self, self.lookup(name, version))

    def start(self) -> None:
        """Start every batcher (on the running event loop)."""
        self.started = True
        for versions in self.models.values():
            for served in versions.values():
                served.batcher.start()

    def install(self, name: str, versions: dict[int, Version], reason: str = "replaced",
                reasons: dict[int, str] | None = None) -> None:
        """Serve exactly `versions` for `name` from now on (none: unload it); versions left out are retired, each
        logged with its reason in `reasons` (by version number), else `reason`."""
        old = self.models.get(name, {})
        for served in versions.values():
            if served not in old.values():
                if self.started:
                    served.batcher.start()
                self.metrics.model_loaded(name, served.model.version, served.model.provider, served)
        if versions:
            self.models = {**self.models, name: dict(sorted(versions.items()))}
        else:
            self.models = {k: v for k, v in self.models.items() if k != name}
        kept = set(map(id, versions.values()))
        for served in old.values():
            if id(served) not in kept:
                self.retire(served, (reasons or {}).get(served.model.version, reason))

    def retire(self, served: Version, reason: str) -> None:
        served.retired = reason
        served.batcher.hurry()  # its waiting requests would otherwise wait out the delay, holding it open
        self.metrics.model_unloaded(served.model.name, served.model.version, served.model.provider, served)
        self.metrics.load_result(served.model.name, "unloaded")
        if served.users == 0:
            self.close_later(served)

    def close_later(self, served: Version) -> None:
        """Close a retired version's batcher (its admitted requests run first) in a task of its own."""
        if served.closing is not None:
            return
        served.closing = asyncio.get_running_loop().create_task(self._close(served))
        self._closing.add(served.closing)
        served.closing.add_done_callback(self._closing.discard)

    async def _close(self, served: Version) -> None:
        await served.batcher.close()
        log.info("version unloaded", extra={"fields": {"event": "model_unloaded", "model": served.model.name,
                                                       "version": served.model.version, "reason": served.retired}})

    async def close(self) -> None:
        """Drain and stop every batcher, served or retired."""
        batchers = [served.batcher for versions in self.models.values() for served in versions.values()]
        await asyncio.gather(*(b.close() for b in batchers), *list(self._closing))
