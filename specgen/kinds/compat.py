"""Which training features combine, and the reason where they do not: the one table validate refuses from.

`UNIVERSE` is every name a pair is made of: each registered feature's names (`FeatureDef.table`; clip has two,
train.clip and an optimizer's own clip, as they are refused differently), in pipeline order, then the settings
they meet that are not features (a second optimizer, a schedule, stateful layers, ...: `SETTINGS` below) and
`opt_<kind>` for each kind of the optimizer registry. A pair not in `REFUSED` combines. `REFUSED` gathers what
each feature declares it refuses (`FeatureDef.refuses`), so a new feature adds its rows in its own module. Each
refusal keeps the message its code site raises, a template over the facts of the spec at hand ({this}:
"levenberg_marquardt optimizer '<name>'", ...); the code sites keep their own positions. docs/features.md holds
`markdown()`; tests/test_compat_table.py checks both against specgen validate.
"""

from __future__ import annotations

from typing import Any

from specgen.kinds.features import PIPELINE_DEFS, active
from specgen.kinds.features.base import Refusal
from specgen.kinds.optimizers import REGISTRY as OPTIMIZERS

__all__ = ["FEATURE_OF", "OPTIMIZER_KINDS", "ORDER", "REFUSED", "SETTINGS", "UNIVERSE", "Refusal", "allowed",
           "markdown", "message", "names_markdown", "pair", "refusal"]

# What the features meet that is not a feature of the registry: spec facts a refusal may name.
SETTINGS: dict[str, str] = {
    "multi_optimizer": "two optimizers or more",
    "schedule": "a learning-rate schedule",
    "metrics": "`train.metrics`",
    "full_batch": "`train.batch_size: full`",
    "frozen": "`frozen`",
    "restore": "`checkpoint.restore`",
    "batch_norm": "a batch_norm layer",
    "dropout": "a dropout layer with rate > 0",
    "sync_batch_norm": "`train.distribute.sync_batch_norm: true`",
    "export_ema": "`export.onnx.weights: ema`",
}
_FEATURES: dict[str, str] = {name: what for f in PIPELINE_DEFS for name, what in f.table}
# The registered feature each feature name of the table belongs to (specgen/kinds/features/<name>.py).
FEATURE_OF: dict[str, str] = {name: f.name for f in PIPELINE_DEFS for name, _ in f.table}
# Every optimizer kind, in registry order, but a feature's own (levenberg_marquardt).
OPTIMIZER_KINDS = tuple(kind for kind in OPTIMIZERS if kind not in FEATURE_OF)
UNIVERSE: dict[str, str] = (_FEATURES | SETTINGS
                            | {f"opt_{kind}": f"an optimizer of kind `{kind}`" for kind in OPTIMIZER_KINDS})
ORDER = {name: i for i, name in enumerate(UNIVERSE)}
Pair = tuple[str, str]


def pair(a: str, b: str) -> Pair:
    """The pair in table order."""
    return (a, b) if ORDER[a] < ORDER[b] else (b, a)


def _gather() -> dict[Pair, Refusal]:
    refused: dict[Pair, Refusal] = {}
    for feature in PIPELINE_DEFS:
        for own, other, why in feature.refuses:
            if own not in FEATURE_OF or FEATURE_OF[own] != feature.name or other not in UNIVERSE:
                raise RuntimeError(f"feature '{feature.name}' refuses the pair ({own}, {other}) outside its table")
            if pair(own, other) in refused:
                raise RuntimeError(f"the pair ({own}, {other}) is refused twice")
            refused[pair(own, other)] = why
    return refused


REFUSED: dict[Pair, Refusal] = _gather()


def message(a: str, b: str, **facts: object) -> str:
    """The refusal message of a pair, filled with the code site's facts."""
    return REFUSED[pair(a, b)].message.format(**facts)


def allowed(a: str, b: str) -> bool:
    return pair(a, b) not in REFUSED


def names_markdown() -> str:
    """docs/features.md's table of the names pairs are made of, and when a spec has each."""
    return "\n".join(["| name | a spec has it when |", "|---|---|", *(f"| `{n}` | {w} |" for n, w in UNIVERSE.items())]) + "\n"


def markdown() -> str:
    """docs/features.md's compatibility table: each refused pair, where it is refused, and why."""
    rows = ["| pair | refused by | message |", "|---|---|---|"]
    rows += [f"| {a} + {b} | {r.where} | {r.message} |" for (a, b), r in REFUSED.items()]
    return "\n".join(rows) + "\n"


def refusal(ir: Any, beside: str) -> str | None:
    """Why one of the spec's active features does not combine with `beside`, a feature the command adds
    (`distribute` under a strategy, `probe`), from the table; None when they all do (ir: a ModelIR).

    A feature counts with each of its table names (clip: train.clip and an optimizer's own clip); the
    refusals made here take no facts from the code site (the table's for these pairs have none). Settings
    keep their own refusals (FeatureDef.refusal: not rows of the table).
    No TensorFlow: `--emit tfjob` asks it before writing a job.
    """
    names = {feature.name for feature in active(ir)}
    for name, feature in FEATURE_OF.items():
        if feature in names and not allowed(name, beside):
            return message(name, beside)
    for definition in PIPELINE_DEFS:
        if definition.refusal and definition.enabled(ir) and (why := definition.refusal(ir, beside)) is not None:
            return why
    return None
