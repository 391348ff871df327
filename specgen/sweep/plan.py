"""A checked sweep (`Plan`) and what defines its study: every value of the resolved spec (with the sweep's own
--sets) except those MAY_CHANGE lists (`study_keys`), and the data files its trials read (datafiles.py).

Apart from study.py (the Optuna study) and membership.py (who may join it), which both read it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from specgen.paths import shown
from specgen.spec.load import LoadedSpec
from specgen.sweep import datafiles
from specgen.sweep.space import Param, grid_size
from specgen.sweep.spec import Sweep

# What may change between two runs of one study; every other key of the resolved spec (with the sweep's own --sets)
# defines it, so trials of another model, other data or other training never join it (docs/sweeps.md, "Several
# processes and machines"). Each entry says why a change leaves the trials comparable.
MAY_CHANGE = {
    ("sweep", "trials"): "the budget: how many trials, not what a trial is (--trials replaces it)",
    ("sweep", "sampler"): "how the next values are drawn, not what a trial with them trains",
    ("sweep", "seed"): "how the next values are drawn",
    ("sweep", "pruner"): "when the next trials are stopped early",
    ("doc",): "text",
    ("lints",): "what `specgen validate` warns about",
    ("checkpoint", "dir"): "every trial trains in its own run folder (SWEEP/trial-NNNN)",
    # Each update is seeded by its number and the data iterator runs on through a save, so where a trial saves
    # changes no value it learns (docs/training.md); a train/ metric's points may fall on other steps (LOG_EVERY and
    # each save end a chunk), which only changes when the pruner looks, as a changed pruner does.
    ("checkpoint", "every_steps"): "when a trial saves, not what it trains",
    ("checkpoint", "keep"): "how many of a trial's checkpoints stay on disk",
    ("export",): "a sweep never exports",
    ("train", "tracking"): "where a trial is logged, not what it trains",
}
MAX_KEYS_TEXT = 50_000  # characters of the study's key list (MySQL's TEXT holds 65,535 bytes); past it, only the hash


@dataclass
class Plan:
    """A checked sweep: the spec, its searched keys and where the study and the trials live."""

    loaded: LoadedSpec
    sweep: Sweep
    params: list[Param]
    folder: Path  # the sweep folder, absolute and resolved (sweep_folder): trial-NNNN run folders, logs, the summary
    url: str  # the Optuna storage
    trials: int
    parallel: int
    base: list[str] = field(default_factory=list)  # the sweep's own --set overrides, given to every trial
    track: str | None = None  # --track mlflow:URI's URI, given to every trial (docs/tracking.md)
    given: Path | None = None  # the sweep folder as -o gave it, for printing (shown)

    def shown(self, path: str | os.PathLike[str]) -> str:
        """A path as the sweep prints it: relative to the working directory when it lies under it (paths.shown);
        one in the sweep folder given by -o outside the working directory as -o gave it (`../x/trial-0000`, as
        `export -o ../x` prints its file), not as the machine's absolute path."""
        text = shown(path)
        if self.given is None or not os.path.isabs(text) or not Path(path).is_relative_to(self.folder):
            return text
        return shown(self.given / Path(path).relative_to(self.folder))

    @property
    def study_name(self) -> str:
        return self.loaded.spec.name

    def definition(self) -> dict[str, Any]:
        """What makes two sweeps one study (study_keys): a study made by another definition is refused. `metric`,
        `direction` and `space` are kept for studies made before `spec` was recorded (and for report --sweep's
        `base`); `keys` lets the refusal name what differs, unless it is too long for a storage's text column."""
        sweep = self.sweep.model_dump(mode="json", warnings=False)
        found = study_keys(self.loaded)
        text = json.dumps(found, sort_keys=True)
        return {"metric": sweep["metric"], "direction": sweep["direction"], "space": sweep["space"],
                "base": self.base, "spec": hashlib.sha256(text.encode()).hexdigest(),
                "keys": found if len(text) <= MAX_KEYS_TEXT else None}

    @cached_property
    def data(self) -> dict[str, Any]:
        """The data files the trials read (datafiles.py): hashed once, when a study is checked or made."""
        return datafiles.fingerprint(self.loaded)

    def budget(self) -> int:
        if self.sweep.sampler != "grid":
            return self.trials
        return min(self.trials, grid_size(self.params))


def study_keys(loaded: LoadedSpec, defaults: bool = False, written: bool = False) -> dict[str, Any]:
    """Every value the spec sets, defaults left out (a default written out is the same study, and a newer specgen's
    new defaults change no study), as `key -> value` with keys as --set writes them, without MAY_CHANGE's.
    `defaults`: with them, for naming a value this spec leaves at its default; `written`: every value the spec (its
    bases, its --sets) writes, a default included, so a refusal does not call a value written out "the default"."""
    dumped = loaded.spec.model_dump(mode="json", by_alias=True, exclude_defaults=not (defaults or written),
                                    exclude_unset=written, warnings=False)
    return dict(_leaves(dumped, ()))


def _leaves(node: Any, path: tuple[str | int, ...], written: str = "") -> Iterator[tuple[str, Any]]:
    """`(key as written, value)` of every value under `node`; `path` holds the raw keys, for MAY_CHANGE."""
    if any(path[: len(kept)] == kept for kept in MAY_CHANGE):
        return
    items: Any = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else None
    if not items:  # a value, or an empty section
        yield written.lstrip("."), node
        return
    for key, child in items:
        named = isinstance(key, int) and isinstance(child, dict) and isinstance(child.get("name"), str)
        yield from _leaves(child, (*path, key), written + (f"[{child['name']}]" if named else f".{key}"))
