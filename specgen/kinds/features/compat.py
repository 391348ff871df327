"""Which training features combine, and the reason where they do not: the one table validate refuses from.

`UNIVERSE` is every name a pair is made of: the registered features (clip split into train.clip and an
optimizer's own clip, as they are refused differently) and the settings they meet (a second optimizer, a
schedule, stateful layers, and `opt_<kind>` for each kind of the optimizer registry). A pair not in
`REFUSED` combines. Each refusal keeps the message its code site raises, a template over the facts of the
spec at hand ({this}: "levenberg_marquardt optimizer '<name>'", ...); the code sites call `message()` and
keep their own positions (the texts of levenberg_marquardt's refused keys come from its spec module, which
refuses them while parsing). docs/features.md holds `markdown()`; tests/test_compat_table.py checks both
against specgen validate.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgen.kinds.optimizers import REGISTRY as OPTIMIZERS
from specgen.kinds.optimizers.levenberg_marquardt import REFUSED as LM_KEYS

# Universe name -> what a spec has when it uses it; registered features first (kinds/features ORDER
# differs: this is table order, the one of tests/golden/compat.py), then one name per optimizer kind.
_SETTINGS: dict[str, str] = {
    "ema": "`train.ema`",
    "accumulate": "`train.accumulate` > 1",
    "clip": "`train.clip`",
    "optimizer_clip": "an optimizer's own `clip`",
    "weight_decay": "an optimizer's `weight_decay` (adamw's default included)",
    "loss_terms": "a loss that is not one data term of weight 1",
    "targets": "a `targets` section",
    "prune": "a `prune` section",
    "levenberg_marquardt": "an optimizer of kind `levenberg_marquardt`",
    "distribute": "`train.distribute.strategy`: mirrored or multi_worker",
    "probe": "`specgen train --probe`",
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
# Every optimizer kind, in registry order, but levenberg_marquardt: a feature of its own above.
OPTIMIZER_KINDS = tuple(kind for kind in OPTIMIZERS if kind not in _SETTINGS)
UNIVERSE: dict[str, str] = _SETTINGS | {f"opt_{kind}": f"an optimizer of kind `{kind}`" for kind in OPTIMIZER_KINDS}
# The registered feature each universe name belongs to (specgen/kinds/features/<name>.py).
FEATURE_OF = {"ema": "ema", "accumulate": "accumulate", "clip": "clip", "optimizer_clip": "clip",
              "weight_decay": "weight_decay", "loss_terms": "loss_terms", "targets": "targets", "prune": "pruning",
              "levenberg_marquardt": "levenberg_marquardt", "distribute": "distribute", "probe": "probe"}
ORDER = {name: i for i, name in enumerate(UNIVERSE)}
Pair = tuple[str, str]


@dataclass(frozen=True)
class Refusal:
    where: str  # the command that refuses it, and the spec key it points at
    message: str  # str.format template over the code site's facts


def pair(a: str, b: str) -> Pair:
    """The pair in table order."""
    return (a, b) if ORDER[a] < ORDER[b] else (b, a)


_THIS = "levenberg_marquardt optimizer '{this}'"
_BESIDE = Refusal("specgen validate, at optimizers.<other>", (
    "optimizer '{other}' cannot train beside " + _THIS + ": each of its iterations tries damped steps until the "
    "loss falls, which another update in the same step would confound; train those weights in another run, or "
    "freeze them"))
_LAYER = ("layer '{layer}': " + _THIS + " cannot train through {op}: {why}; remove the layer or choose another "
          "optimizer")

REFUSED: dict[Pair, Refusal] = {
    ("accumulate", "levenberg_marquardt"): Refusal("specgen validate, at train.accumulate", (
        _THIS + " takes no accumulation: with 'batch_size: full' every iteration already sees the whole training "
        "set; received {received}, expected 1 (or leave it out)")),
    ("clip", "levenberg_marquardt"): Refusal("specgen validate, at train.clip", (
        _THIS + " takes no clip: its step is a damped Gauss-Newton solve, not a gradient step, and a larger "
        "damping already shortens it; remove train.clip")),
    ("optimizer_clip", "levenberg_marquardt"): Refusal("specgen validate, at optimizers.<name>.clip",
                                                       LM_KEYS["clip"]),
    ("weight_decay", "levenberg_marquardt"): Refusal("specgen validate, at optimizers.<name>.weight_decay",
                                                     LM_KEYS["weight_decay"]),
    ("loss_terms", "levenberg_marquardt"): Refusal("specgen validate, at loss", (
        _THIS + " needs one squared-error loss term: its step solves for one residual vector (predictions - "
        "labels); received {count} terms")),
    ("targets", "levenberg_marquardt"): Refusal("specgen validate, at targets", (
        _THIS + " takes no target networks: they follow the weights after each gradient update, which its "
        "iterations do not make")),
    ("prune", "levenberg_marquardt"): Refusal("specgen validate, at prune", (
        _THIS + " cannot prune: the masks are applied around each gradient update, and its trial steps would "
        "move masked weights; prune in another run")),
    ("levenberg_marquardt", "multi_optimizer"): _BESIDE,
    ("levenberg_marquardt", "schedule"): Refusal("specgen validate, at optimizers.<name>.learning_rate",
                                                 LM_KEYS["learning_rate"]),
    ("levenberg_marquardt", "batch_norm"): Refusal("specgen validate, at layers.<i>.op", _LAYER.replace(
        "{why}", "training mode normalizes with batch statistics and moves its moving statistics on every trial "
        "evaluation")),
    ("levenberg_marquardt", "dropout"): Refusal("specgen validate, at layers.<i>.op", _LAYER.replace(
        "{why}", "its random mask changes the function between the trial evaluations")),
    **{("levenberg_marquardt", f"opt_{kind}"): _BESIDE for kind in OPTIMIZER_KINDS},
    ("levenberg_marquardt", "distribute"): Refusal("specgen train, at train.distribute.strategy", (
        "levenberg_marquardt solves on the whole batch in one process; train it with the default strategy")),
    ("levenberg_marquardt", "probe"): Refusal("specgen train --probe, at the spec", (
        "--probe shows one gradient update; a levenberg_marquardt iteration is a damped solve over the whole "
        "training set: train a few epochs and read the loss instead")),
    ("distribute", "full_batch"): Refusal("specgen train, at train.batch_size", (
        "batch_size: full under the {strategy} strategy: give the global batch as a number that splits evenly "
        "among the {replicas} replicas")),
}


def message(a: str, b: str, **facts: object) -> str:
    """The refusal message of a pair, filled with the code site's facts."""
    return REFUSED[pair(a, b)].message.format(**facts)


def allowed(a: str, b: str) -> bool:
    return pair(a, b) not in REFUSED


def markdown() -> str:
    """docs/features.md's compatibility table: each refused pair, where it is refused, and why."""
    rows = ["| pair | refused by | message |", "|---|---|---|"]
    rows += [f"| {a} + {b} | {r.where} | {r.message} |" for (a, b), r in REFUSED.items()]
    return "\n".join(rows) + "\n"
