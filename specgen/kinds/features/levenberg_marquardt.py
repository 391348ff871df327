"""`kind: levenberg_marquardt`: damped Gauss-Newton iterations on the whole training set. A step kind.

Its step (templates/tf/train_levenberg_marquardt.py.j2) replaces the gradient step and apply(). Its checks
across sections are below (FeatureDef.check). Levenberg-Marquardt solves (JᵀJ + λ·DᵀD) δ = -Jᵀr for the
residual vector r of a squared-error loss over one fixed set of examples, then keeps the step only if the loss
falls enough (MINPACK's lmder: specgen/runtime/lib/levenberg_marquardt.py). That shape of step sets what a spec
may combine it with; the pairs it refuses, and why, are rows of compat.py, whose messages the checks below
raise at their own positions (its refused keys: specgen/kinds/optimizers/levenberg_marquardt.py, while parsing).
"""

from __future__ import annotations

from typing import Any

from specgen.diagnostics import Diagnostic
from specgen.kinds.features import compat
from specgen.kinds.features.base import FeatureDef
from specgen.kinds.ops import REGISTRY

KIND = "levenberg_marquardt"


def _check_loss(loaded: Any, name: str) -> list[Diagnostic]:
    """One mean_squared_error term against data labels, weight 1: the residual vector the step solves for."""
    loss, this = loaded.spec.loss, f"levenberg_marquardt optimizer '{name}'"
    terms = loss if isinstance(loss, list) else [] if loss is None else [loss]
    if len(terms) > 1:
        return [loaded.diagnostic(("loss",), compat.message(KIND, "loss_terms", this=name, count=len(terms)),
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
    problems = [loaded.diagnostic(("optimizers", other), compat.message(KIND, "multi_optimizer", this=name,
                                                                        other=other), key=True)
                for other in spec.optimizers if other != name]
    problems += _check_loss(loaded, name)
    train = spec.train
    if train is not None:
        if train.batch_size != "full":
            problems.append(loaded.diagnostic(("train", "batch_size"), (
                f"{this} needs 'batch_size: full': a Gauss-Newton step is solved for one fixed set of residuals, and "
                f"keeping it or not compares the loss on those same examples; received {train.batch_size}")))
        if train.accumulate != 1:
            problems.append(loaded.diagnostic(("train", "accumulate"), compat.message(
                KIND, "accumulate", this=name, received=train.accumulate)))
        if train.clip is not None:
            problems.append(loaded.diagnostic(("train", "clip"), compat.message(KIND, "clip", this=name), key=True))
    if getattr(spec, "prune", None) is not None:
        problems.append(loaded.diagnostic(("prune",), compat.message(KIND, "prune", this=name), key=True))
    if getattr(spec, "targets", None):
        problems.append(loaded.diagnostic(("targets",), compat.message(KIND, "targets", this=name), key=True))
    # Layers whose output differs between two calls with the same weights (dropout's mask) or whose calls change
    # state (batch-norm moving statistics), OpDef.stateful: the accept/reject test compares two evaluations of one
    # function. Why each is refused: the row of its op's name in specgen/kinds/features/compat.py.
    for i, layer in enumerate(spec.layers):
        op = getattr(layer, "op", None)
        if op in REGISTRY and REGISTRY[op].stateful(layer):
            problems.append(loaded.diagnostic(("layers", i, "op"), compat.message(
                KIND, op, this=name, layer=layer.name, op=op)))
    return problems


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
)
