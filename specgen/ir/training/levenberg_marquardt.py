"""`kind: levenberg_marquardt`: its checks across sections and its resolved optimizer.

Levenberg-Marquardt solves (JᵀJ + λ·DᵀD) δ = -Jᵀr for the residual vector r of a squared-error
loss over one fixed set of examples, then keeps the step only if the loss falls enough (MINPACK's
lmder: specgen/runtime/lib/levenberg_marquardt.py). That
shape of step sets what a spec may combine it with; each refusal below says why.
"""

from __future__ import annotations

from typing import Any

from specgen.diagnostics import Diagnostic
from specgen.ir.training import keys
from specgen.ir.training.model import OptimizerIR, SlotIR
from specgen.spec.load import LoadedSpec

KIND = "levenberg_marquardt"
# Ops whose output differs between two calls with the same weights (dropout's mask) or whose calls
# change state (batch-norm moving statistics): the accept/reject test compares two evaluations of one function.
STATEFUL_OPS = {"dropout": "its random mask changes the function between the trial evaluations",
                "batch_norm": "training mode normalizes with batch statistics and moves its moving statistics "
                              "on every trial evaluation"}


def optimizer(name: str, opt: Any, paths: tuple[str, ...]) -> OptimizerIR:
    hyper = (("initial_damping", opt.initial_damping), ("max_tries", opt.max_tries))
    # `scale`: D, the running maximum of J's column norms per weight (specgen/runtime/lib/levenberg_marquardt.py),
    # a slot like Adam's m.
    scale = SlotIR("scale", keys.slot_prefix(name, "scale"))
    return OptimizerIR(name, KIND, paths, 0.0, None, hyper, (scale,), iterations_key=keys.iterations(name),
                       damping_key=keys.damping(name))


def _check_loss(loaded: LoadedSpec, this: str) -> list[Diagnostic]:
    """One mean_squared_error term against data labels, weight 1: the residual vector the step solves for."""
    loss = loaded.spec.loss
    terms = loss if isinstance(loss, list) else [] if loss is None else [loss]
    if len(terms) > 1:
        return [loaded.diagnostic(("loss",), (
            f"{this} needs one squared-error loss term: its step solves for one residual vector (predictions - "
            f"labels); received {len(terms)} terms"), key=True)]
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


def check(loaded: LoadedSpec) -> list[Diagnostic]:
    """What a levenberg_marquardt optimizer needs of the other sections, each refusal positioned and explained."""
    spec = loaded.spec
    name = next((n for n, o in spec.optimizers.items() if o.kind == KIND), None)
    if name is None:
        return []
    this = f"levenberg_marquardt optimizer '{name}'"
    problems = [loaded.diagnostic(("optimizers", other), (
        f"optimizer '{other}' cannot train beside {this}: each of its iterations tries damped steps until the "
        "loss falls, which another update in the same step would confound; train those weights in another run, "
        "or freeze them"), key=True) for other in spec.optimizers if other != name]
    problems += _check_loss(loaded, this)
    train = spec.train
    if train is not None:
        if train.batch_size != "full":
            problems.append(loaded.diagnostic(("train", "batch_size"), (
                f"{this} needs 'batch_size: full': a Gauss-Newton step is solved for one fixed set of residuals, and "
                f"keeping it or not compares the loss on those same examples; received {train.batch_size}")))
        if train.accumulate != 1:
            problems.append(loaded.diagnostic(("train", "accumulate"), (
                f"{this} takes no accumulation: with 'batch_size: full' every iteration already sees the whole "
                f"training set; received {train.accumulate}, expected 1 (or leave it out)")))
        if train.clip is not None:
            problems.append(loaded.diagnostic(("train", "clip"), (
                f"{this} takes no clip: its step is a damped Gauss-Newton solve, not a gradient step, and a larger "
                "damping already shortens it; remove train.clip"), key=True))
    if getattr(spec, "prune", None) is not None:
        problems.append(loaded.diagnostic(("prune",), (
            f"{this} cannot prune: the masks are applied around each gradient update, and its trial steps would "
            "move masked weights; prune in another run"), key=True))
    if getattr(spec, "targets", None):
        problems.append(loaded.diagnostic(("targets",), (
            f"{this} takes no target networks: they follow the weights after each gradient update, which its "
            "iterations do not make"), key=True))
    for i, layer in enumerate(spec.layers):
        op = getattr(layer, "op", None)
        if op in STATEFUL_OPS and not (op == "dropout" and layer.rate == 0):
            problems.append(loaded.diagnostic(("layers", i, "op"), (
                f"layer '{layer.name}': {this} cannot train through {op}: {STATEFUL_OPS[op]}; remove the layer "
                "or choose another optimizer")))
    return problems
