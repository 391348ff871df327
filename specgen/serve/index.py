"""The repository index of a live repository (Triton's RepositoryIndex), from what control.ModelControl knows.

A row per version known, in version order: READY while served, else UNAVAILABLE with its refusal, or `unloaded` once
an unload or a swap let it go (Triton's ModelLifeCycle keeps each version's state); a model with no version known,
one row without a version. The index lists what the repository holds: a model that is not served has rows only
while its folder is in the repository, read at each request, in every mode (explicit mode scans nothing, so an
unloaded model whose folder was removed kept its rows until a load named it). A served model keeps its rows without
its folder: it serves until an unload, or the next scan under poll, lets it go. Where the repository cannot be
listed, every model known keeps its rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgen.serve.repository import model_folders


class Unloaded:
    """Per model, the versions once served and now unloaded (an unload, or a swap that left them out): Triton's index
    keeps a row for each while its folder is in the repository."""

    def __init__(self) -> None:
        self.versions: dict[str, set[int]] = {}

    def add(self, name: str, versions: Iterable[int]) -> None:
        self.versions.setdefault(name, set()).update(versions)

    def drop(self, name: str, versions: Iterable[int]) -> None:
        """`versions` of `name` serve again: READY rows, not unloaded ones."""
        self.keep(name, self.versions.get(name, set()) - set(versions))

    def keep(self, name: str, present: Iterable[int]) -> None:
        """Only those of `present` (the version folders the repository holds) keep their rows."""
        kept = self.versions.pop(name, set()) & set(present)
        if kept:
            self.versions[name] = kept

    def of(self, name: str) -> set[int]:
        return self.versions.get(name, set())


@dataclass(frozen=True)
class Known:
    """What serve/control.ModelControl knows, as the index reads it (passed in: control imports this module)."""

    served: Mapping[str, Mapping[int, Any]]  # model -> its served versions (registry.models)
    problems: Mapping[str, str]  # model -> why it is not served
    refused: Mapping[tuple[str, int], tuple[Any, str]]  # (model, version) -> (what was refused, why)
    unloaded: Unloaded
    repo: Path | None  # the repository's folder; None: --model-control none without one


def repository_index(known: Known, ready_only: bool) -> list[dict[str, str]]:
    """The index's rows (see the module docstring); `ready_only`: the READY rows alone."""
    entries: list[dict[str, str]] = []
    for name in sorted(_names(known)):
        states = _version_states(known, name)
        entries += [{"name": name, "version": str(v), "state": state, "reason": why}
                    for v, (state, why) in sorted(states.items()) if not ready_only or state == "READY"]
        if not states and not ready_only:
            entries.append({"name": name, "version": "", "state": "UNAVAILABLE",
                            "reason": known.problems.get(name, "not loaded")})
    return entries


def _names(known: Known) -> set[str]:
    """The models served and the model folders of the repository; every model known where it cannot be listed."""
    served = set(known.served)
    if known.repo is None:  # --model-control none without a repository: what was loaded at start
        return served | set(known.problems)
    try:
        return served | {f.name for f in model_folders(known.repo)}
    except OSError:  # moved away, unmounted: a model known keeps its rows until the repository can be read
        return served | set(known.problems)


def _version_states(known: Known, name: str) -> dict[int, tuple[str, str]]:
    """Each version known of `name` with its state and reason; the served state wins over a refusal (of a reload),
    and a refusal over an earlier unload."""
    states = {v: ("UNAVAILABLE", "unloaded") for v in known.unloaded.of(name)}
    states |= {v: ("UNAVAILABLE", why) for (model, v), (_, why) in known.refused.items() if model == name}
    return states | {v: ("READY", "") for v in known.served.get(name, {})}
