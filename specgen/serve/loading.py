"""Loading one model folder of a live repository into the registry: what control.py's modes share.

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
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from specgen.paths import shown
from specgen.runtime.predictor import InputError
from specgen.serve.index import Unloaded
from specgen.serve.model_config import ModelConfig, RepositoryError
from specgen.serve.models import ServedModel, load_version
from specgen.serve.registry import Registry, Version
from specgen.serve.repository import available_versions, read_config
from specgen.serve.stamps import Snapshot, file_stamp, folder_stamp, snapshot

log = logging.getLogger("specgen.serve")
REMOVED = "removed from the repository"  # why a version whose folder (or model file) is gone was unloaded
T = TypeVar("T")


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


class Loader:
    """What a live repository's loads know (the refusals and why, why a model is not served, the versions let go)
    and the load of one model folder; ModelControl (control.py) decides what to load when."""

    def __init__(self, registry: Registry, source: ModelSource | None) -> None:
        self.registry, self.source = registry, source
        self.refused: dict[tuple[str, int], tuple[Any, str]] = {}  # (model, version) -> (what was refused, why)
        self.problems: dict[str, str] = {}  # model -> why it is not served
        self.unloaded = Unloaded()  # the versions once served and now let go: the index keeps a row for each
        self.starting = False  # restore() at work: versions installed are the start's (model_ready lines), no loads
        self._executor: ThreadPoolExecutor | None = None

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    @property
    def _source(self) -> ModelSource:
        assert self.source is not None  # every mode but none has one (__init__ refuses it otherwise)
        return self.source

    @property
    def repo(self) -> Path:
        return self._source.repo

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
