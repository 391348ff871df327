"""The checkpoint-key scheme: every training-state variable's path, in one place.

collections.yaml, the generated `state_by_path()`, checkpoints, `specgen export` (EMA weights)
and restore maps all name training state by these paths, so they are spelled only here: the shared keys
(step, optimizers, metrics, pruning masks). A training feature spells its own in its module
(specgen/kinds/features/<name>.py: accumulate's accumulators, ema's shadows, precision's loss scale).
"""

from __future__ import annotations

STEP = "global_step"
OPTIMIZERS = "optimizers"
METRICS = "metrics"
PRUNING = "pruning"


def learning_rate(optimizer: str) -> str:
    return f"{OPTIMIZERS}/{optimizer}/learning_rate"


def iterations(optimizer: str) -> str:
    return f"{OPTIMIZERS}/{optimizer}/iterations"


def damping(optimizer: str) -> str:
    """The damping λ of a levenberg_marquardt optimizer (MINPACK's Levenberg parameter `par`)."""
    return f"{OPTIMIZERS}/{optimizer}/damping"


def step_bound(optimizer: str) -> str:
    """The trust-region radius Δ of a levenberg_marquardt optimizer (MINPACK's `delta`)."""
    return f"{OPTIMIZERS}/{optimizer}/step_bound"


def slot_prefix(optimizer: str, slot: str) -> str:
    """`optimizers/<name>/<slot>`; one variable per weight below it: `<prefix>/<weight path>`."""
    return f"{OPTIMIZERS}/{optimizer}/{slot}"


def metric(name: str, accumulator_name: str) -> str:
    return f"{METRICS}/{name}/{accumulator_name}"


def mask(path: str) -> str:
    """The pruning mask of a pruned weight (collection `pruning`)."""
    return f"{PRUNING}/{path}"
