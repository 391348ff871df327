"""A live repository: `--model-control none|poll|explicit`, Triton's model control modes.

- `none` (the default): the models found at start are served until the server stops.
- `poll`: every `--poll-seconds` the repository is scanned; a model folder whose files changed
  (config.pbtxt, or a version folder's files: added, replaced, removed) is loaded again, a new
  folder is loaded, a removed one unloaded. A scan reads only names and stat() results until
  something changed, so polling an unchanged repository costs next to nothing. A change is loaded
  once the folder's stamps held still over one poll interval and at least SETTLE_SECONDS (settled: a
  file still being written is not read), and the load is thrown away, and tried at the next poll,
  when the files changed while it read them (stamps.py says why).
- `explicit`: every model is loaded at start (as Triton's `--load-model=*`), then Triton's
  repository extension loads and unloads them: `POST /v2/repository/models/{name}/load`,
  `/unload`, and the gRPC RepositoryModelLoad / RepositoryModelUnload.

Loading one model folder, and what a refusal means, is loading.py's.

A worker that `--workers N`'s parent restarts loads the repository as a poll loads a new folder (`restore`):
what loads serves, the rest is refused; the start-up rule (every folder loads, else exit 1) is the first start's.
Under `none` it loads only the versions the live workers serve (they loaded them at their start and never read the
repository again). Its loads and refusals are not counted: the live workers counted them.

The index (Triton's RepositoryIndex, index.py) has a row per version known: READY while served, else UNAVAILABLE
with its refusal, or `unloaded` once an unload or a swap let it go. A refused or unloaded version whose folder (or
model file) is gone is dropped at the next scan or load; a model not served has no row once its folder is gone, in
every mode: the index lists what the repository holds.

With `--workers N` each worker scans and loads on its own: every load, refusal and unload is logged
(each worker's lines carry its index) and counted once per worker.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from specgen.paths import plain_name, shown
from specgen.serve.errors import ProtocolError
from specgen.serve.index import Known, repository_index
from specgen.serve.loading import REMOVED, Loader, ModelSource
from specgen.serve.model_config import RepositoryError
from specgen.serve.registry import Registry
from specgen.serve.repository import model_folders
from specgen.serve.stamps import EXPLICIT_SETTLE_SECONDS, SETTLE_SECONDS, Snapshot, folder_stamp, snapshot
from specgen.serve.values import cut, show

log = logging.getLogger("specgen.serve")
MODES = ("none", "poll", "explicit")
NAME_MAX = 255  # bytes of one file name on Linux, macOS and Windows file systems
__all__ = ["MODES", "ModelControl", "ModelSource", "folder_stamp", "snapshot"]


class ModelControl(Loader):
    """Loads, reloads and unloads models of `source` into `registry`; see the module docstring."""

    def __init__(self, registry: Registry, source: ModelSource | None, mode: str = "none", poll_seconds: float = 15.0):
        if mode not in MODES:
            raise ValueError(f"model control '{mode}' is not one of {', '.join(MODES)}")
        if mode != "none" and source is None:
            raise ValueError(f"model control '{mode}' needs the repository the models come from")
        if not (math.isfinite(poll_seconds) and poll_seconds > 0):  # nan would kill the poll task, inf never poll
            raise ValueError(f"poll seconds must be a positive finite number; received {poll_seconds}")
        super().__init__(registry, source)
        self.mode, self.poll_seconds = mode, poll_seconds
        self.seen: dict[str, Snapshot] = {}  # what was loaded (or refused), per model folder
        # a change not loaded yet, and when it was first seen (time.monotonic): loaded once it held still that long
        self.pending: dict[str, tuple[Snapshot, float]] = {}
        self.settle_seconds = max(SETTLE_SECONDS, poll_seconds)
        self.unreadable: str | None = None  # why the last poll could not list the repository (logged once)
        self._lock: asyncio.Lock | None = None
        self._task: asyncio.Task[None] | None = None
        if mode == "poll" and source is not None:
            self.seen = {folder.name: snapshot(folder) for folder in model_folders(source.repo)
                         if folder.name in registry.models}

    # lifetime

    def start(self) -> None:
        self._lock = asyncio.Lock()
        if self.mode != "none":
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-loader")
        if self.mode == "poll":
            self._task = asyncio.get_running_loop().create_task(self._poll(), name="repository-poll")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                await self.scan()
            except Exception:  # a bug: logged with its traceback, and polling goes on
                log.error("repository scan failed", exc_info=True, extra={"fields": {"event": "error"}})

    # operations

    async def restore(self, only: dict[str, set[int]] | None = None) -> None:
        """A worker the parent restarted (--workers N): load the repository as a poll loads a model folder new to it,
        before serving. Each folder that reads, each version that loads is served; each refusal is a `model_refused`
        line and an index row, as in the workers that kept serving (which refused it at their poll), never fatal:
        the start-up rule (every folder loads, else exit 1: Triton's --exit-on-error) is for the first start, when
        nothing serves yet and someone is watching. A repository that cannot be listed is (RepositoryError).
        `only`: load just these models' versions, where the live workers never load again (--model-control none:
        process.py `_restore`), so that this worker serves what they serve, not what the repository holds now."""
        self.starting = True
        try:
            try:
                folders = await self._run(model_folders, self.repo)
            except OSError as exc:
                raise RepositoryError(f"{shown(self.repo)}: cannot be listed: {exc.strerror or exc}") from None
            for folder in [f for f in folders if only is None or f.name in only]:
                snap = await self._run(snapshot, folder)
                versions = None if only is None else only[folder.name]
                try:
                    if await self._load(folder.name, folder, explicit=False, expected=snap, only=versions) is not None:
                        self.seen[folder.name] = snap  # else written to while read: the next poll loads it
                except Exception:  # a bug: logged with its traceback, as a poll logs it; the other folders load
                    log.error("model load failed", exc_info=True,
                              extra={"fields": {"event": "error", "model": folder.name}})
        finally:
            self.starting = False

    def _explicit(self) -> None:
        if self.mode != "explicit":
            how = "polled for changes" if self.mode == "poll" else "fixed at start"
            raise ProtocolError(f"model load and unload need --model-control explicit; this server's repository is "
                                f"{how} (--model-control {self.mode})", 400, grpc_code="FAILED_PRECONDITION")

    def _folder(self, name: str) -> Path:
        if not plain_name(name) or name.startswith("."):  # a hidden folder is none of the repository's models
            raise ProtocolError(f"{show(name)} cannot name a model folder of the repository", 400)
        if len(os.fsencode(name)) > NAME_MAX:  # the OS refuses such a name (ENAMETOOLONG) before any lookup
            raise ProtocolError(f"a model name of {len(os.fsencode(name)):,} bytes cannot name a model folder of the "
                                f"repository (at most {NAME_MAX} bytes)", 400)
        return self.repo / name

    async def load(self, name: str) -> None:
        """Explicit load (or reload) of one model; a ProtocolError (400) says what was refused."""
        self._explicit()
        folder = self._folder(name)
        assert self._lock is not None
        async with self._lock:
            if not folder.is_dir():
                if name not in self.registry.models:  # an earlier refusal of a folder now gone leaves the index
                    self.problems.pop(name, None)
                    self._forget_gone(name, set())
                raise ProtocolError(f"no model folder '{name}' in the repository {shown(self.repo)}", 400)
            before = await self._run(snapshot, folder)
            await asyncio.sleep(EXPLICIT_SETTLE_SECONDS)  # a writer at work moves a stamp meanwhile (stamps.py)
            settled = await self._run(snapshot, folder)
            problems = (await self._load(name, folder, explicit=True, expected=settled) if settled == before
                        else None)
            if problems is None:
                raise ProtocolError(f"model '{name}': files of {shown(folder)} changed while they were read (still "
                                    "being written?); nothing was loaded, load again once they are written", 409,
                                    grpc_code="ABORTED")
            self.seen[name] = settled
        if problems:
            raise ProtocolError("; ".join(problems), 400)

    async def unload(self, name: str) -> None:
        """Explicit unload of a served model, or of one the repository holds (a no-op then); 404 for any other name."""
        self._explicit()
        folder = self._folder(name)
        assert self._lock is not None
        async with self._lock:
            if name not in self.registry.models and name not in self.problems and not folder.is_dir():
                raise ProtocolError(f"unknown model '{cut(name)}': it is neither served nor in the repository "
                                    f"(served: {sorted(self.registry.models)})", 404)
            self._unload(name, "unloaded")

    async def scan(self) -> None:
        """One poll: load what changed or appeared, unload what disappeared."""
        assert self._lock is not None
        repo = self.repo
        async with self._lock:
            try:
                found = await self._run(lambda: {f.name: (f, snapshot(f)) for f in model_folders(repo)})
            except OSError as exc:  # moved away, unmounted: the models served keep serving until it is back
                self._unreadable_now(f"{shown(repo)}: cannot be listed: {exc.strerror or exc}")
                return
            self._unreadable_now(None)
            for name, (folder, snap) in found.items():
                first = self.pending.get(name)
                if self.seen.get(name) == snap:
                    self.pending.pop(name, None)
                elif first is None or first[0] != snap:  # changed since the last poll: a writer may be at work
                    self.pending[name] = (snap, time.monotonic())
                elif time.monotonic() - first[1] >= self.settle_seconds:  # the change held still: settled
                    try:
                        if await self._load(name, folder, explicit=False, expected=snap) is not None:
                            self.seen[name] = snap
                            del self.pending[name]
                    except Exception:  # a bug: logged with its traceback; the other models are still scanned
                        self.seen[name] = snap
                        log.error("model load failed", exc_info=True,
                                  extra={"fields": {"event": "error", "model": name}})
            for name in [n for n in self.pending if n not in found]:  # gone before it settled (or while read)
                del self.pending[name]
            for name in [n for n in self.seen if n not in found]:  # as in Triton's index, no row for a folder gone
                del self.seen[name]
                self.registry.install(name, {}, reason=REMOVED)
                self.problems.pop(name, None)
                self._forget_gone(name, set())

    def _unreadable_now(self, why: str | None) -> None:
        """Log once when the repository cannot be listed, and once when it can again."""
        if why is not None and self.unreadable is None:
            log.warning("repository unreadable; the models served keep serving",
                        extra={"fields": {"event": "repository_unreadable", "error": why}})
        elif why is None and self.unreadable is not None:
            log.info("repository readable again", extra={"fields": {"event": "repository_readable"}})
        self.unreadable = why

    def index(self, ready_only: bool) -> list[dict[str, str]]:
        """Triton's repository index (RepositoryIndex): index.py."""
        repo = None if self.source is None else self.source.repo
        return repository_index(Known(self.registry.models, self.problems, self.refused, self.unloaded, repo), ready_only)


