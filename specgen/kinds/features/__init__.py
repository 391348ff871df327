"""The training-feature registry: one module per feature, each with a `FEATURE` (base.FeatureDef).

Modules are found by listing the package, and so is their order: each FeatureDef names the features it
comes `after`, and `PIPELINE` is that partial order made total (ties broken by name): the order in which
the skeleton (templates/tf/train.py.j2) renders features at a shared hook point, and the runtime calls
their hooks (specgen/runtime/hooks.py). Like Keras' optimizer apply(): gradients accumulated, then
unscaled (precision), clipped, decayed, applied; then EMA shadows, target copies and pruning masks follow.
Which features combine, and why not where they do not: specgen/kinds/compat.py (gathered from each
feature's `table` and `refuses`); how two combine: interactions.py.
"""

from __future__ import annotations

import graphlib
import importlib
import pkgutil
from typing import Any

from specgen.diagnostics import Diagnostic
from specgen.kinds.features.base import HOOKS, REPLACING, FeatureDef, Interaction, StateRow, TrainKey
from specgen.kinds.features.interactions import INTERACTIONS

__all__ = ["HOOKS", "INTERACTIONS", "ORDER", "PIPELINE", "REGISTRY", "REPLACING", "TRAIN_KEYS", "FeatureDef",
           "Interaction", "StateRow", "TrainKey", "active", "checks", "place_keys"]

NOT_FEATURES = ("base", "interactions")


def _load() -> dict[str, FeatureDef]:
    """Every module's definition: a `FEATURE` (a row of compat.py's table) or a `SETTING` (a spec-level
    setting that plugs into the hooks like a feature and keeps its own refusals)."""
    found = sorted(m.name for m in pkgutil.iter_modules(__path__)
                   if m.name not in NOT_FEATURES and not m.name.startswith("_"))
    defs = {}
    for name in found:
        module = importlib.import_module(f"{__name__}.{name}")
        feature = getattr(module, "FEATURE", None) or module.SETTING
        if feature.name != name:
            raise RuntimeError(f"specgen/kinds/features/{name}.py defines feature '{feature.name}'")
        defs[name] = feature
    return defs


def _pipeline(defs: dict[str, FeatureDef]) -> tuple[str, ...]:
    """The `after` partial order made total: of the features whose predecessors are placed, the first by name."""
    unknown = {(f.name, a) for f in defs.values() for a in f.after if a not in defs}
    if unknown:
        raise RuntimeError(f"features placed after unknown ones: {sorted(unknown)}")
    sorter = graphlib.TopologicalSorter({f.name: f.after for f in defs.values()})
    sorter.prepare()  # raises graphlib.CycleError on a cycle
    order: list[str] = []
    ready: list[str] = []
    while sorter.is_active():
        ready = sorted([*ready, *sorter.get_ready()])
        order.append(ready.pop(0))
        sorter.done(order[-1])
    return tuple(order)


_DEFS = _load()
PIPELINE: tuple[str, ...] = _pipeline(_DEFS)
PIPELINE_DEFS: tuple[FeatureDef, ...] = tuple(_DEFS[name] for name in PIPELINE)
SETTINGS = tuple(name for name in PIPELINE
                 if not hasattr(importlib.import_module(f"{__name__}.{name}"), "FEATURE"))
# The rows of compat.py's table, in pipeline order.
ORDER = tuple(name for name in PIPELINE if name not in SETTINGS)
REGISTRY: dict[str, FeatureDef] = {name: _DEFS[name] for name in ORDER}
# The keys the features add to the spec's `train` section (and TrainIR's fields of the same names), in pipeline order.
TRAIN_KEYS: tuple[TrainKey, ...] = tuple(f.train_key for f in PIPELINE_DEFS if f.train_key is not None)


def place_keys(shared: list[str]) -> list[str]:
    """The `train` section's keys in schema order: the shared ones with each feature's key placed right after the
    key it names in `TrainKey.after` (spec/training.py builds the model in this order)."""
    keys, pending = list(shared), list(TRAIN_KEYS)
    while pending:
        ready = [k for k in pending if k.after in keys]
        if not ready:
            raise RuntimeError(f"train keys placed after unknown keys: {sorted((k.name, k.after) for k in pending)}")
        for key in ready:
            keys.insert(keys.index(key.after) + 1, key.name)
            pending.remove(key)
    return keys


def state_rows(training: Any, trainable: list[str], shapes: dict[str, tuple[int, ...]]) -> list[StateRow]:
    """The training state the features add (their `variables`), in pipeline order (training: TrainingIR)."""
    return [row for f in PIPELINE_DEFS if f.variables for row in f.variables(training, trainable, shapes)]


def checks(loaded: Any) -> list[Diagnostic]:
    """Every feature's refusals across sections (FeatureDef.check), in pipeline order (loaded: a LoadedSpec)."""
    return [problem for f in PIPELINE_DEFS if f.check for problem in f.check(loaded)]


def active(ir: Any) -> tuple[FeatureDef, ...]:
    """The features a trainable spec uses (ir: its ModelIR), in ORDER."""
    return tuple(f for f in REGISTRY.values() if f.enabled(ir))


def rendered(ir: Any) -> tuple[FeatureDef, ...]:
    """What renders into the trainer skeleton: the active features and settings, in PIPELINE order."""
    return tuple(f for f in PIPELINE_DEFS if f.enabled(ir))


def markdown() -> str:
    """docs/features.md's table of the registered features."""
    rows = ["| feature | turned on by | what it does | hooks | step kind |", "|---|---|---|---|---|"]
    rows += [f"| `{f.name}` | {', '.join(f'`{k}`' for k in f.spec_keys)} | {f.doc} | "
             f"{', '.join(f.hooks) or '(runtime only)'} | {f.step or ''} |" for f in REGISTRY.values()]
    return "\n".join(rows) + "\n"
