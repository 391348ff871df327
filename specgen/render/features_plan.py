"""The trainer skeleton's context, from the feature registry (specgen/kinds/features).

For each hook point of templates/tf/train.py.j2: the active features that render there, in registry
order, each with its partial's own context (the fields of its typed plan) and
the interactions it places there (`joins`). Plus the step kind's template and the runtime modules
train.py imports.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from specgen.ir.model import ModelIR
from specgen.kinds.features import HOOKS, INTERACTIONS, REGISTRY, FeatureDef, Interaction, rendered
from specgen.render.environment import Fields

GRADIENT_STEP = "tf/steps/gradient.py.j2"  # the step kind when no active feature names one
LIB = ("losses", "metrics", "optimizers", "schedules")  # runtime modules every train.py imports


@cache
def _function(dotted: str) -> Callable[[ModelIR], Any]:
    module, _, name = dotted.rpartition(".")
    function: Callable[[ModelIR], Any] = getattr(importlib.import_module(module), name)
    return function


def placement(interaction: Interaction, hook: str) -> str:
    """The member that places an interaction's code at `hook`: the later one (ORDER) that renders there."""
    members = [REGISTRY[n] for n in interaction.features]
    hosts = [f.name for f in members if hook in f.hooks]
    if not hosts:
        raise RuntimeError(f"interaction {interaction.features} renders at '{hook}', where neither feature does")
    return max(hosts, key=list(REGISTRY).index)


def _contexts(ir: ModelIR, features: tuple[FeatureDef, ...]) -> dict[str, Fields]:
    names = {f.name for f in features}
    extra: dict[str, dict[str, Any]] = {f.name: {} for f in features}
    joins: dict[str, dict[str, list[Fields]]] = {f.name: {h: [] for h in f.hooks} for f in features}
    for interaction in INTERACTIONS:
        if not set(interaction.features) <= names:
            continue
        for feature, key, value in interaction.context:
            extra[feature][key] = value
        for hook in interaction.hooks:
            joins[placement(interaction, hook)][hook].append(
                Fields(name="+".join(interaction.features), partial=interaction.partial, joins={}))
    return {f.name: Fields({"name": f.name, "partial": f.partial, "joins": joins[f.name], **_own(ir, f),
                            **extra[f.name]})
            for f in features if f.partial}


def _own(ir: ModelIR, feature: FeatureDef) -> dict[str, Any]:
    """A feature's own context: the fields of its typed plan (FeatureDef.plan, or the render/ function its
    render_plan names); none for a partial that reads only the skeleton's (an optimizer's plan, `ir`)."""
    build = feature.plan or (_function(feature.render_plan) if feature.render_plan else None)
    if build is None:
        return {}
    plan = build(ir)
    return {field.name: getattr(plan, field.name) for field in dataclasses.fields(plan)}


def _step(features: tuple[FeatureDef, ...]) -> str:
    steps = [f for f in features if f.step]
    if len(steps) > 1:  # compat.py refuses every such pair at validate; reaching here is a bug
        raise RuntimeError(f"two step kinds: {', '.join(f.name for f in steps)}")
    return steps[0].step if steps and steps[0].step else GRADIENT_STEP


@dataclass(frozen=True)
class SkeletonPlan:
    """What the registry's active features give the trainer skeleton (part of render/train_plan.py's TrainPlan)."""

    hooks: Fields  # hook -> the contexts of the features that render there, in registry order
    step: str  # the step kind's template
    lib_modules: list[str]  # the runtime modules train.py imports
    gradient_options: str  # what the features add to the step's optimizers.global_gradients call, in pipeline order


def skeleton_plan(ir: ModelIR) -> SkeletonPlan:
    features = rendered(ir)
    contexts = _contexts(ir, features)
    hooks = Fields({hook: [contexts[f.name] for f in features if hook in f.hooks] for hook in HOOKS})
    return SkeletonPlan(hooks, _step(features), sorted({*LIB, *(m for f in features for m in f.lib)}),
                        "".join(str(c.get("gradient_options", "")) for c in contexts.values()))
