"""Weight decay `exclude`: the weights of each optimizer that get no decoupled decay.

Patterns (or collection names) match that optimizer's own weights only, and each must match
one: an exclusion that excludes nothing is a typo or a stale name, as in collections.
"""

from __future__ import annotations

import fnmatch

from specgen.diagnostics import Diagnostic, did_you_mean
from specgen.ir.collections import Membership, variable_list
from specgen.spec.load import LoadedSpec


def decay_rate(weight_decay: float | object) -> float:
    """The rate of an optimizer's `weight_decay` (a number, or a mapping {rate, exclude})."""
    return float(getattr(weight_decay, "rate", weight_decay))  # type: ignore[arg-type]


def resolve_decay(loaded: LoadedSpec, members: Membership) -> tuple[dict[str, tuple[str, ...]], list[Diagnostic]]:
    """Optimizer name -> its weights excluded from weight decay (in variable order), and the problems."""
    excluded: dict[str, tuple[str, ...]] = {}
    problems: list[Diagnostic] = []
    for name, optimizer in loaded.spec.optimizers.items():
        patterns = getattr(optimizer.weight_decay, "exclude", None)
        if not patterns:
            continue
        own = members.optimizers.get(name, [])
        matched: set[str] = set()
        for i, pattern in enumerate(patterns):
            if pattern in members.collections:
                hits = [p for p in members.collections[pattern] if p in own]
            else:
                hits = [p for p in own if fnmatch.fnmatchcase(p, pattern)]
            if not hits and own:
                problems.append(loaded.diagnostic(("optimizers", name, "weight_decay", "exclude", i), (
                    f"weight_decay exclude '{pattern}' matches none of the weights of optimizer '{name}' "
                    f"({variable_list(own)}){did_you_mean(pattern, own)}; exclude patterns match this "
                    "optimizer's own weights")))
            matched.update(hits)
        excluded[name] = tuple(p for p in own if p in matched)
    return excluded, problems
