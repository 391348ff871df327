"""`kind: levenberg_marquardt`: damped Gauss-Newton iterations on the whole training set. A step kind.

Its step (templates/tf/train_levenberg_marquardt.py.j2) replaces the gradient step and apply(). Its checks
across sections are below (FeatureDef.check). Levenberg-Marquardt solves (JᵀJ + λ·DᵀD) δ = -Jᵀr for the
residual vector r of a squared-error loss over one fixed set of examples, then keeps the step only if the loss
falls enough (MINPACK's lmder: specgen/runtime/lib/levenberg_marquardt.py). That shape of step sets what a spec
may combine it with: the pairs it refuses, and why, are declared below (`REFUSED`, rows of compat.py's table),
and the checks below raise their messages at their own positions (its refused keys:
specgen/kinds/optimizers/levenberg_marquardt.py, while parsing).
"""

from __future__ import annotations

import math
from typing import Any

from specgen.diagnostics import Diagnostic
from specgen.kinds.features.base import FeatureDef, Refusal
from specgen.kinds.ops import REGISTRY
from specgen.kinds.optimizers import REGISTRY as OPTIMIZERS
from specgen.kinds.optimizers.levenberg_marquardt import REFUSED as LM_KEYS
from specgen.kinds.optimizers.levenberg_marquardt import size_problem

KIND = "levenberg_marquardt"
_THIS = "levenberg_marquardt optimizer '{this}'"
_BESIDE = Refusal("specgen validate, at optimizers.<other>", (
    "optimizer '{other}' cannot train beside " + _THIS + ": each of its iterations tries damped steps until the "
    "loss falls, which another update in the same step would confound; train those weights in another run, or "
    "freeze them"))
_LAYER = ("layer '{layer}': " + _THIS + " cannot train through {op}: {why}; remove the layer or choose another "
          "optimizer")
# What it refuses beside it, by the other's name in compat.py's table (`opt_<kind>`: every other optimizer kind).
REFUSED: dict[str, Refusal] = {
    "accumulate": Refusal("specgen validate, at train.accumulate", (
        _THIS + " takes no accumulation: with 'batch_size: full' every iteration already sees the whole training "
        "set; received {received}, expected 1 (or leave it out)")),
    "clip": Refusal("specgen validate, at train.clip", (
        _THIS + " takes no clip: its step is a damped Gauss-Newton solve, not a gradient step, and a larger "
        "damping already shortens it; remove train.clip")),
    "optimizer_clip": Refusal("specgen validate, at optimizers.<name>.clip", LM_KEYS["clip"]),
    "weight_decay": Refusal("specgen validate, at optimizers.<name>.weight_decay", LM_KEYS["weight_decay"]),
    "loss_terms": Refusal("specgen validate, at loss", (
        _THIS + " needs one squared-error loss term: its step solves for one residual vector (predictions - "
        "labels); received {count} terms")),
    "targets": Refusal("specgen validate, at targets", (
        _THIS + " takes no target networks: they follow the weights after each gradient update, which its "
        "iterations do not make")),
    "prune": Refusal("specgen validate, at prune", (
        _THIS + " cannot prune: the masks are applied around each gradient update, and its trial steps would "
        "move masked weights; prune in another run")),
    "multi_optimizer": _BESIDE,
    "schedule": Refusal("specgen validate, at optimizers.<name>.learning_rate", LM_KEYS["learning_rate"]),
    "batch_norm": Refusal("specgen validate, at layers.<i>.op", _LAYER.replace(
        "{why}", "training mode normalizes with batch statistics and moves its moving statistics on every trial "
        "evaluation")),
    "dropout": Refusal("specgen validate, at layers.<i>.op", _LAYER.replace(
        "{why}", "its random mask changes the function between the trial evaluations")),
    **{f"opt_{kind}": _BESIDE for kind in OPTIMIZERS if kind != KIND},
    "distribute": Refusal("specgen train, at train.distribute.strategy", (
        "levenberg_marquardt solves on the whole batch in one process; train it with the default strategy")),
    "probe": Refusal("specgen train --probe, at the spec", (
        "--probe shows one gradient update; a levenberg_marquardt iteration is a damped solve over the whole "
        "training set: train a few epochs and read the loss instead")),
}


def _message(beside: str, /, **facts: object) -> str:
    """The refusal beside `beside`, filled with the facts of the spec at hand."""
    return REFUSED[beside].message.format(**facts)


def _check_loss(loaded: Any, name: str) -> list[Diagnostic]:
    """One mean_squared_error term against data labels, weight 1: the residual vector the step solves for."""
    loss, this = loaded.spec.loss, f"levenberg_marquardt optimizer '{name}'"
    terms = loss if isinstance(loss, list) else [] if loss is None else [loss]
    if len(terms) > 1:
        return [loaded.diagnostic(("loss",), _message("loss_terms", this=name, count=len(terms)),
                                  key=True)]
    if not terms:
        return []
    term, at = terms[0], ("loss", 0) if isinstance(loss, list) else ("loss",)
    if term.kind != "mean_squared_error":
        return [loaded.diagnostic((*at, "kind"), (
            f"{this} needs a squared-error loss: its step solves for the residual vector (predictions - labels) "
            f"whose mean square is the loss; received loss kind '{term.kind}', expected 'mean_squared_error'"))]
    if term.labels in loaded.spec.outputs:
        return [loaded.diagnostic((*at, "labels"), (
            f"{this} needs labels from the data section: the residuals of a computed target '{term.labels}' "
            "would move with the weights inside one iteration"))]
    if term.weight != 1.0:
        return [loaded.diagnostic((*at, "weight"), (
            f"{this} minimizes the sum of squared residuals, which a weight does not change; received weight "
            f"{term.weight:g}, remove it"))]
    return []


def optimizer_name(spec: Any) -> str | None:
    """The name of the spec's levenberg_marquardt optimizer (at most one: check refuses a second), or None."""
    return next((n for n, o in spec.optimizers.items() if o.kind == KIND), None)


def check(loaded: Any) -> list[Diagnostic]:
    """What a levenberg_marquardt optimizer needs of the other sections, each refusal positioned and explained
    (loaded: a LoadedSpec)."""
    spec = loaded.spec
    name = optimizer_name(spec)
    if name is None:
        return []
    this = f"levenberg_marquardt optimizer '{name}'"
    problems = [loaded.diagnostic(("optimizers", other), _message("multi_optimizer", this=name, other=other),
                                  key=True)
                for other in spec.optimizers if other != name]
    problems += _check_loss(loaded, name)
    train = spec.train
    if train is not None:
        if train.batch_size != "full":
            problems.append(loaded.diagnostic(("train", "batch_size"), (
                f"{this} needs 'batch_size: full': a Gauss-Newton step is solved for one fixed set of residuals, and "
                f"keeping it or not compares the loss on those same examples; received {train.batch_size}")))
        if train.accumulate != 1:
            problems.append(loaded.diagnostic(("train", "accumulate"), _message(
                "accumulate", this=name, received=train.accumulate)))
        if train.clip is not None:
            problems.append(loaded.diagnostic(("train", "clip"), _message("clip", this=name), key=True))
    if getattr(spec, "prune", None) is not None:
        problems.append(loaded.diagnostic(("prune",), _message("prune", this=name), key=True))
    if getattr(spec, "targets", None):
        problems.append(loaded.diagnostic(("targets",), _message("targets", this=name), key=True))
    # Layers whose output differs between two calls with the same weights (dropout's mask) or whose calls change
    # state (batch-norm moving statistics), OpDef.stateful: the accept/reject test compares two evaluations of one
    # function. Why each is refused: REFUSED at its op's name.
    for i, layer in enumerate(spec.layers):
        op = getattr(layer, "op", None)
        if op in REGISTRY and REGISTRY[op].stateful(layer):
            problems.append(loaded.diagnostic(("layers", i, "op"), _message(
                op, this=name, layer=layer.name, op=op)))
    return problems


def size_check(loaded: Any, ir: Any, examples: int) -> list[Diagnostic]:
    """At train start, once the data says how many examples there are, before the run folder's first write: a
    Jacobian too large to solve on (kinds/optimizers/levenberg_marquardt.MAX_BYTES), at the optimizer's kind.
    A named (dynamic) dimension of the output counts 1, so the estimate never exceeds what the step will need."""
    training = ir.training
    lm = next((o for o in training.optimizers if o.levenberg_marquardt), None) if training else None
    term = next((t for t in training.terms if t.output), None) if lm else None
    if lm is None or term is None:
        return []
    sizes = {v.path: math.prod(v.shape) for v in ir.variables}
    node = next(n for n in ir.nodes if n.name == ir.outputs[term.output])
    outputs = math.prod(d for d in node.shape if isinstance(d, int))
    problem = size_problem(lm.name, examples, outputs, sum(sizes[p] for p in lm.paths))
    return [loaded.diagnostic(("optimizers", lm.name, "kind"), problem)] if problem else []


FEATURE = FeatureDef(
    name="levenberg_marquardt",
    doc="Levenberg-Marquardt iterations (a step kind): one Jacobian, damped steps until the loss falls",
    spec_keys=("optimizers.<name>.kind: levenberg_marquardt",),
    enabled=lambda ir: any(o.levenberg_marquardt for o in ir.training.optimizers),
    ir="specgen.ir.training.build._optimizer (OptimizerIR.damping_key, step_bound_key)",
    state=("specgen.ir.training.keys.damping", "specgen.ir.training.keys.step_bound",
           "specgen.ir.training.keys.slot_prefix"),
    partial="tf/features/levenberg_marquardt.py.j2",
    hooks=("optimizer_variables", "apply", "learning_rate", "optimizer_state"),
    step="tf/train_levenberg_marquardt.py.j2",
    lib=("levenberg_marquardt",),
    runtime=("specgen.runtime.lib.levenberg_marquardt.step", "specgen.runtime.lib.levenberg_marquardt.residuals"),
    check=check,
    table=((KIND, "an optimizer of kind `levenberg_marquardt`"),),
    refuses=tuple((KIND, other, why) for other, why in REFUSED.items()),
)
