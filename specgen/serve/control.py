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

Loading a model is what starting the server does (models.py: onnxruntime loads each version
its version_policy selects, the graph is checked against config.pbtxt, one warm-up inference
runs), done in a thread of its own beside the running versions, which keep serving. Only when
every version is ready is the model's set of versions swapped, at once (registry.py); versions
left out finish the requests they hold, then close. A config.pbtxt edit that leaves every field the server reads as
it was (parameters, instance_group, model_warmup) reloads nothing: the versions kept take the new configuration,
which the ModelConfig answers (HTTP /config, gRPC ModelConfig) from then on.

A version that fails any check is refused: one log line (`model_refused`, with the reason), one
count in `specgen_model_loads_total{result="refused"}`, and it is served as if it were absent,
so under `latest 1` the version served before keeps serving. A config.pbtxt that cannot be read
refuses the whole change and the versions served keep serving. A refusal is not retried (nor
logged again) until a file of its version folder changes (the model, or a precision variant's
sample.npz, variant.json or model.fp32.onnx), or an explicit load asks again; one recorded under a config.pbtxt
since replaced, or for files no longer there, leaves at the model's next load (`_forget_stale`). A served version
whose folder is removed is unloaded even when nothing else of the change loads, and with the last one the model
(`_nothing_loaded`), as Triton's poll does.

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
import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from specgen.paths import plain_name, shown
from specgen.runtime.predictor import InputError
from specgen.serve.errors import ProtocolError
from specgen.serve.index import Known, Unloaded, repository_index
from specgen.serve.model_config import ModelConfig, RepositoryError
from specgen.serve.models import ServedModel, load_version
from specgen.serve.registry import Registry, Version
from specgen.serve.repository import available_versions, model_folders, read_config
from specgen.serve.stamps import EXPLICIT_SETTLE_SECONDS, SETTLE_SECONDS, Snapshot, file_stamp, folder_stamp, snapshot
from specgen.serve.values import cut, show

log = logging.getLogger("specgen.serve")
MODES = ("none", "poll", "explicit")
NAME_MAX = 255  # bytes of one file name on Linux, macOS and Windows file systems
REMOVED = "removed from the repository"  # why a version whose folder (or model file) is gone was unloaded
T = TypeVar("T")
__all__ = ["MODES", "ModelControl", "ModelSource", "folder_stamp", "snapshot"]


@dataclass(frozen=True)
class ModelSource:
    """Where live loads read models from, and how they are loaded (as at start)."""

    repo: Path
    provider: str = "auto"
    threads: int = 0
    cuda_graphs: bool = False


def _read(folder: Path) -> tuple[ModelConfig, list[int]]:
    config = read_config(folder)
    return config, available_versions(folder, config.model_filename)


def _folder_stamps(folder: Path, versions: list[int]) -> dict[int, Any]:
    """Each version folder's stamp (stamps.folder_stamp), as a refusal records it."""
    return {version: folder_stamp(folder / str(version)) for version in versions}


class ModelControl:
    """Loads, reloads and unloads models of `source` into `registry`; see the module docstring."""

    def __init__(self, registry: Registry, source: ModelSource | None, mode: str = "none", poll_seconds: float = 15.0):
        if mode not in MODES:
            raise ValueError(f"model control '{mode}' is not one of {', '.join(MODES)}")
        if mode != "none" and source is None:
            raise ValueError(f"model control '{mode}' needs the repository the models come from")
        if not (math.isfinite(poll_seconds) and poll_seconds > 0):  # nan would kill the poll task, inf never poll
            raise ValueError(f"poll seconds must be a positive finite number; received {poll_seconds}")
        self.registry, self.source, self.mode, self.poll_seconds = registry, source, mode, poll_seconds
        self.seen: dict[str, Snapshot] = {}  # what was loaded (or refused), per model folder
        # a change not loaded yet, and when it was first seen (time.monotonic): loaded once it held still that long
        self.pending: dict[str, tuple[Snapshot, float]] = {}
        self.settle_seconds = max(SETTLE_SECONDS, poll_seconds)
        self.refused: dict[tuple[str, int], tuple[Any, str]] = {}  # (model, version) -> (what was refused, why)
        self.problems: dict[str, str] = {}  # model -> why it is not served
        self.unloaded = Unloaded()  # the versions once served and now let go: the index keeps a row for each
        self.unreadable: str | None = None  # why the last poll could not list the repository (logged once)
        self.starting = False  # restore() at work: versions installed are the start's (model_ready lines), no loads
        self._lock: asyncio.Lock | None = None
        self._executor: ThreadPoolExecutor | None = None
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

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

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

    @property
    def _source(self) -> ModelSource:
        assert self.source is not None  # every mode but none has one (__init__ refuses it otherwise)
        return self.source

    @property
    def repo(self) -> Path:
        return self._source.repo

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

    def _unload(self, name: str, why: str) -> None:
        self.unloaded.add(name, self.registry.models.get(name, {}))
        self.registry.install(name, {}, reason=why)  # each version logs model_unloaded once its requests are answered
        self.problems[name] = why

    def _forget_gone(self, name: str, present: set[int]) -> None:
        """Drop the refusals and unloaded rows of `name`'s versions that the repository no longer holds."""
        for key in [k for k in self.refused if k[0] == name and k[1] not in present]:
            del self.refused[key]
        self.unloaded.keep(name, present)

    def _refused_versions(self, name: str) -> list[int]:
        return [v for (model, v) in self.refused if model == name]

    def _forget_stale(self, name: str, config: ModelConfig, files: dict[int, Any]) -> None:
        """Drop the refusals of `name` that describe a state gone: one recorded under another config.pbtxt (a fix, or
        an edit back, of the config read now) or for files its version folder no longer holds (`files`: each refused
        version's folder_stamp now). The index would otherwise blame a config or a file that no longer exists; the
        version's row is then what else is known of it (`unloaded`), or none. A refusal still true is kept, so it is
        not logged again (the candidates loop re-records, under the new config, every version it tries)."""
        for version in self._refused_versions(name):
            (stamp, recorded), _ = self.refused[name, version]
            if recorded != config or stamp != files.get(version):
                del self.refused[name, version]

    def _refuse(self, name: str, version: int | None, why: str) -> None:
        if not self.starting:  # a restart's refusals are the live workers' too, who counted them at their poll
            self.registry.metrics.load_result(name, "refused")
        log.warning("model version refused", extra={"fields": {"event": "model_refused", "model": name,
                                                               "version": version, "error": why}})

    async def _load(self, name: str, folder: Path, explicit: bool, expected: Snapshot,
                    only: set[int] | None = None) -> list[str] | None:
        """Load what changed of one model and swap it in; the refusals' messages (each logged once). None when the
        folder's stamps are no longer `expected` once it was read: nothing swapped, refused or recorded, and one
        info line says it is retried. `only`: the version numbers it may choose from (restore's)."""
        current = self.registry.models.get(name, {})
        try:
            config, available = await self._run(_read, folder)
        except RepositoryError as exc:
            if await self._run(snapshot, folder) != expected:
                self._discarded(name, explicit)
                return None
            return self._nothing_loaded(name, current, [str(exc)], refuse=str(exc))
        refusals: list[tuple[int, Any, str]] = []  # recorded and logged only once the read proves whole
        same_config = bool(current) and next(iter(current.values())).model.config == config
        # A newly loaded model becomes a Version (a batcher, the body budget raised for it) only once the read proves
        # whole: a discarded load leaves nothing to close or log as unloaded.
        candidates = [v for v in available if only is None or v in only]
        chosen, problems = dict[int, Version | ServedModel](), []
        while missing := [v for v in config.version_policy.select(candidates) if v not in chosen]:
            for version in missing:
                path = folder / str(version) / config.model_filename
                stamp = await self._run(file_stamp, path)
                existing = current.get(version)
                if same_config and existing is not None and existing.model.stamp == stamp:
                    chosen[version] = existing
                    continue
                # A refusal stands until any file of the version folder changes (a repaired sample.npz too)
                files = await self._run(folder_stamp, path.parent)
                refused = self.refused.get((name, version))
                if refused is not None and refused[0] == (files, config) and not explicit:
                    candidates.remove(version)  # refused before and unchanged: absent, and not logged again
                    continue
                try:
                    source = self._source
                    model = await self._run(load_version, name, version, path, config, source.provider,
                                            source.threads, True, source.cuda_graphs)
                except (RepositoryError, InputError) as exc:
                    refusals.append((version, (files, config), str(exc)))
                    problems.append(str(exc))
                    candidates.remove(version)
                    continue
                chosen[version] = model
        if await self._run(snapshot, folder) != expected:  # written to while read: this session may mix two files
            self._discarded(name, explicit)
            return None
        self._forget_gone(name, set(available))
        self._forget_stale(name, config, await self._run(_folder_stamps, folder, self._refused_versions(name)))
        versions = {v: m if isinstance(m, Version) else self.registry.version(m) for v, m in chosen.items()}
        for version, stamp, reason in refusals:
            self.refused[name, version] = (stamp, reason)
            self._refuse(name, version, reason)
        for version in versions:
            self.refused.pop((name, version), None)
        if not versions:
            why = problems or [f"{shown(folder)}: no version folder holds {config.model_filename}, or version_policy "
                               f"{config.version_policy.describe()} selects none of {available}"]
            return self._nothing_loaded(name, current, why, refuse=None if problems else why[0])
        kept = all(current.get(v) is served for v, served in versions.items()) and set(versions) == set(current)
        self._reconfigure(name, versions, config)
        self._swap(name, current, versions)
        if problems:
            problems.append(f"model '{name}' {'keeps serving' if kept else 'serves'} version(s) {sorted(versions)}")
        return problems

    def _reconfigure(self, name: str, versions: dict[int, Version], config: ModelConfig) -> None:
        """Versions kept loaded (their files and the fields the server reads unchanged) take the config.pbtxt just
        read: an edit of fields the server does not read (parameters, instance_group, model_warmup) changes what
        the ModelConfig answers (HTTP /config, gRPC ModelConfig) as Triton's reload does, without a reload."""
        stale = [served for served in versions.values() if served.model.config.message != config.message]
        for served in stale:
            served.model = dataclasses.replace(served.model, config=config)
        if stale:
            log.info("model config updated", extra={"fields": {
                "event": "model_config_updated", "model": name,
                "versions": sorted(served.model.version for served in stale)}})

    def _discarded(self, name: str, explicit: bool) -> None:
        """A load that raced a writer: nothing of it is kept; one line says when it is tried again."""
        log.info("model load discarded: its files changed while they were read", extra={"fields": {
            "event": "model_load_discarded", "model": name,
            "retry": "when loaded again" if explicit else "at the next poll once the files hold still"}})

    def _nothing_loaded(self, name: str, current: dict[int, Version], why: list[str], refuse: str | None) -> list[str]:
        """Nothing new loads: the versions served keep serving (Triton keeps the model it had when a reload fails),
        except those whose folder or model file is gone, which are unloaded as Triton's poll unloads a removed
        version (`removed from the repository`); with none left the model is not served (404, gRPC NOT_FOUND) and
        its index row says why."""
        if refuse is not None:
            self._refuse(name, None, refuse)
        kept = {v: served for v, served in current.items() if not _gone(served)}
        if len(kept) != len(current):
            self.registry.install(name, kept, reason=REMOVED)  # in-flight requests finish on the versions let go
        if kept:
            why = [*why, f"model '{name}' keeps serving version(s) {sorted(kept)}"]
        else:
            self.problems[name] = "; ".join(why)
        return why

    def _swap(self, name: str, current: dict[int, Version], chosen: dict[int, Version]) -> None:
        added = [v for v, served in chosen.items() if current.get(v) is not served]
        if not added and set(chosen) == set(current):
            return
        for _ in added if not self.starting else ():  # a restart's versions are the start's: model_ready lines
            self.registry.metrics.load_result(name, "loaded")
        reasons = {v: _retired_why(v, served, chosen) for v, served in current.items()}
        self.registry.install(name, chosen, reasons=reasons)
        self.problems.pop(name, None)
        # A version left out keeps its index row (Triton's "unloaded") unless its folder went with it
        left = {v for v, why in reasons.items() if v not in chosen and why != REMOVED}
        self.unloaded.add(name, left)
        self.unloaded.drop(name, chosen)
        for version in added if not self.starting else ():
            log.info("model version loaded", extra={"fields": {
                "event": "model_loaded", "model": name, "version": version, "provider": chosen[version].model.provider,
                "serving": sorted(chosen), "replaced": version in current}})

    def index(self, ready_only: bool) -> list[dict[str, str]]:
        """Triton's repository index (RepositoryIndex): index.py."""
        repo = None if self.source is None else self.source.repo
        return repository_index(Known(self.registry.models, self.problems, self.refused, self.unloaded, repo), ready_only)


def _retired_why(number: int, served: Version, chosen: dict[int, Version]) -> str:
    """Why a served version leaves, for its `model_unloaded` line: its folder is gone (`removed from the
    repository`), config.pbtxt's version_policy was edited (`not chosen by version_policy`), or another load took
    its place (`replaced`: its number loaded again, or a newer version that the same policy now chooses)."""
    if _gone(served):
        return REMOVED
    policy = next(iter(chosen.values())).model.config.version_policy if chosen else None
    if policy is not None and number not in chosen and policy != served.model.config.version_policy:
        return "not chosen by version_policy"
    return "replaced"


def _gone(served: Version) -> bool:
    """Whether the file a version serves (a gated variant's float32 reference too) is gone, or its folder."""
    path = served.model.path
    return path is not None and not (path.parent.exists() and path.exists())
