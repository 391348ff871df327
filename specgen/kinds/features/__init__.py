"""The training-feature registry: one module per feature, each with a `FEATURE` (base.FeatureDef).

Modules are found by listing the package. `ORDER` is the one list a new feature edits: the order in
which the skeleton (templates/tf/train.py.j2) renders features at a shared hook point (accumulators
before EMA shadows before target copies before pruning masks, as train.py has always read).
Which features combine, and why not where they do not: compat.py; how two combine: interactions.py.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from specgen.kinds.features.base import HOOKS, REPLACING, FeatureDef, Interaction
from specgen.kinds.features.interactions import INTERACTIONS

__all__ = ["HOOKS", "INTERACTIONS", "ORDER", "REGISTRY", "REPLACING", "FeatureDef", "Interaction", "active"]

ORDER = ("levenberg_marquardt", "accumulate", "clip", "weight_decay", "ema", "targets", "pruning", "loss_terms",
         "distribute", "probe")
# Spec-level settings that plug into the skeleton's hooks like a feature but are not rows of the pairwise
# compatibility table: train.precision combines with every feature but levenberg_marquardt, and its refusals
# are its own (specgen/ir/training/precision.py). Each module holds a `SETTING` (base.FeatureDef).
SETTINGS = ("precision",)
NOT_FEATURES = ("base", "compat", "interactions", *SETTINGS)
# Where the settings render among the features at a shared hook: precision unscales the gradients in apply()
# after accumulation and before clipping and every update.
RENDER_ORDER = ("levenberg_marquardt", "accumulate", "precision", *ORDER[2:])


def _collect() -> dict[str, FeatureDef]:
    found = sorted(m.name for m in pkgutil.iter_modules(__path__)
                   if m.name not in NOT_FEATURES and not m.name.startswith("_"))
    missing = [name for name in found if name not in ORDER]
    if missing:
        raise RuntimeError(f"feature module(s) {missing} have no place in specgen/kinds/features ORDER")
    features = {}
    for name in ORDER:
        feature = importlib.import_module(f"{__name__}.{name}").FEATURE
        if feature.name != name:
            raise RuntimeError(f"specgen/kinds/features/{name}.py defines feature '{feature.name}'")
        features[name] = feature
    return features


REGISTRY: dict[str, FeatureDef] = _collect()
SETTING_DEFS: dict[str, FeatureDef] = {name: importlib.import_module(f"{__name__}.{name}").SETTING
                                       for name in SETTINGS}


def active(ir: Any) -> tuple[FeatureDef, ...]:
    """The features a trainable spec uses (ir: its ModelIR), in ORDER."""
    return tuple(f for f in REGISTRY.values() if f.enabled(ir))


def rendered(ir: Any) -> tuple[FeatureDef, ...]:
    """What renders into the trainer skeleton: the active features and settings, in RENDER_ORDER."""
    defs = REGISTRY | SETTING_DEFS
    return tuple(defs[name] for name in RENDER_ORDER if defs[name].enabled(ir))


def markdown() -> str:
    """docs/features.md's table of the registered features."""
    rows = ["| feature | turned on by | what it does | hooks | step kind |", "|---|---|---|---|---|"]
    rows += [f"| `{f.name}` | {', '.join(f'`{k}`' for k in f.spec_keys)} | {f.doc} | "
             f"{', '.join(f.hooks) or '(runtime only)'} | {f.step or ''} |" for f in REGISTRY.values()]
    return "\n".join(rows) + "\n"


def refusal(ir: Any, beside: str) -> str | None:
    """Why one of the spec's active features does not combine with `beside`, a feature the command adds
    (`distribute` under a strategy, `probe`), from the compatibility table; None when they all do.

    A feature counts with each of its table names (clip: train.clip and an optimizer's own clip); the
    refusals made here take no facts from the code site (the table's for these pairs have none).
    No TensorFlow: `--emit tfjob` asks it before writing a job.
    """
    from specgen.kinds.features import compat

    names = {feature.name for feature in active(ir)}
    for name, feature in compat.FEATURE_OF.items():
        if feature in names and not compat.allowed(name, beside):
            return compat.message(name, beside)
    for setting in SETTINGS:  # settings keep their own refusals (not rows of the table)
        module = importlib.import_module(f"{__name__}.{setting}")
        if SETTING_DEFS[setting].enabled(ir) and (why := module.refusal(ir, beside)) is not None:
            return str(why)
    return None
