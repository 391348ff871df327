"""`kind: levenberg_marquardt`: damped Gauss-Newton steps for small full-batch squared-error fits.

Its keys and the refusals of learning_rate, weight_decay, clip and damping_factor are here;
its checks across sections: specgen/kinds/features/levenberg_marquardt.py; its step:
specgen/runtime/lib/levenberg_marquardt.py and templates/tf/train_levenberg_marquardt.py.j2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from specgen.fields.base import PositiveFloat, SpecModel, bounds
from specgen.fields.losses import Selection
from specgen.kinds.optimizers.base import OptimizerBase, OptimizerDef, Slots, UpdateCall

# Why each optimizer key that LM does without is refused (rather than as an unknown key). The feature's
# refusals (kinds/features/levenberg_marquardt.py REFUSED, rows of specgen/kinds/compat.py's table) hold these as
# the pairs levenberg_marquardt + schedule, weight_decay and optimizer_clip, and import them from here: the feature
# imports the optimizer registry (its opt_<kind> names) anyway, so the other way round would be a cycle.
REFUSED = {
    "learning_rate": (
        "levenberg_marquardt takes no learning rate: the damping sets the step length (the trust-region rule moves "
        "it after every try); set initial_damping instead"),
    "weight_decay": (
        "levenberg_marquardt takes no weight decay: each step solves the damped normal equations of the "
        "residuals, so a decay outside them would undo the fit; add an L2 term to the model instead"),
    "clip": (
        "levenberg_marquardt takes no clipping: the step is a damped Gauss-Newton solve, not a gradient step; a "
        "larger damping shortens it"),
    "damping_factor": (
        "levenberg_marquardt takes no damping_factor: the damping follows MINPACK's trust-region rule, as scipy's "
        "least_squares(method='lm') does (the step bound shrinks to 0.1-0.5 of itself after a poor step and "
        "doubles after a good one; the damping is solved from it); remove it"),
}
# Each rejected try at least halves the step bound (lmder's rule). From the first bound, 100·‖D·w‖, 30 halvings
# reach the stall (float32's resolution, 1.2e-7·‖D·w‖); 100 leave room for a bound that grew 2^70 times, which
# no fit reaches. A larger count could only loop (issue 17: 2147483647 never finished one iteration).
MAX_TRIES = 100


# The most memory one iteration may be estimated to take (solve_bytes). Why 1 GiB: a fixed number (not the machine's
# free memory) so that a spec trains or is refused alike everywhere, and one that an iteration's SVD, O(rows ·
# weights²) float64 work, still finishes in about a minute on two cores at (the docs' fits take kilobytes:
# the sine fit's 200 x 49 Jacobian is 0.2 MB). Past it, a gradient optimizer's memory does not grow with the data.
MAX_BYTES = 2**30


def solve_bytes(rows: int, weights: int) -> int:
    """Estimated peak memory of one iteration (runtime/lib/levenberg_marquardt.step) for a Jacobian of `rows`
    residuals by `weights`: J as GradientTape.jacobian returns it (float32, 4 bytes an entry), its float64 copy and
    J·D⁻¹ (8 + 8), and the SVD's U (rows x k) and V (weights x k) in float64, k = min(rows, weights)."""
    k = min(rows, weights)
    return rows * weights * (4 + 8 + 8) + 8 * k * (rows + weights)


def size_problem(name: str, examples: int, outputs: int, weights: int) -> str | None:
    """Why optimizer `name` cannot solve on `examples` examples of `outputs` residuals each for `weights` weights,
    or None when the estimate is within MAX_BYTES."""
    rows = examples * outputs
    needed = solve_bytes(rows, weights)
    if needed <= MAX_BYTES:
        return None
    return (f"levenberg_marquardt optimizer '{name}': its Jacobian is {rows:,} residuals ({examples:,} examples x "
            f"{outputs:,} outputs) by {weights:,} weights, {rows * weights:,} entries; with its float64 copies and "
            f"SVD an iteration needs about {needed / 2**30:.1f} GiB, past the {MAX_BYTES // 2**30} GiB bound for "
            "this optimizer: train on fewer examples (batch_size: full solves on all of them), use fewer weights, "
            "or choose a gradient optimizer (adam)")


class LevenbergMarquardtKeys(SpecModel):
    """The keys of `kind: levenberg_marquardt` besides `kind` and `variables` (LevenbergMarquardt adds those)."""

    initial_damping: PositiveFloat | None = Field(None, description=(
        "The damping λ of the first step tried (its length becomes the first step bound); by default the first "
        "step bound is 100·‖D·w‖, as MINPACK's lmder with factor 100 (scipy's least_squares(method='lm'))."))
    max_tries: Annotated[int, *bounds(int, gt=0, le=MAX_TRIES)] = Field(10, description=(
        "Steps tried per iteration before it keeps the weights; each rejected try at least halves the step bound."))
    learning_rate: SkipJsonSchema[Any] = None
    weight_decay: SkipJsonSchema[Any] = None
    clip: SkipJsonSchema[Any] = None
    # Refused since issue 17 (lmder's rule replaced Marquardt's ν); excluded from dumps so that it is no
    # hyperparameter of the resolved optimizer (kinds/optimizers/base.py's `hyper`).
    damping_factor: SkipJsonSchema[Any] = Field(None, exclude=True)

    @field_validator("learning_rate", "weight_decay", "clip", "damping_factor", mode="before")
    @classmethod
    def _refused(cls, value: Any, info: Any) -> Any:
        raise ValueError(REFUSED[info.field_name])


class LevenbergMarquardt(LevenbergMarquardtKeys):
    """Levenberg-Marquardt: damped Gauss-Newton steps for a mean_squared_error fit on the whole training set
    (train.batch_size: full). It takes no learning rate: the damping sets the step."""

    kind: Literal["levenberg_marquardt"]
    variables: Selection | None = Field(None, description=OptimizerBase.model_fields["variables"].description)


def _slots(hyper: Mapping[str, Any]) -> Slots:
    # D, the running maximum of J's column norms per weight (runtime/lib/levenberg_marquardt.py), a slot like Adam's m.
    return (("scale", 0.0),)


def _update(c: UpdateCall) -> str:
    """lmder's iteration: its damping λ and step bound Δ (damping=True below), D, and whether it is the first
    (Δ starts from ‖D·w‖ then). The step template keeps what it returns: ACCEPTED, REJECTED or STALLED."""
    return (f"{c.function}({c.variables}, residuals, self.{c.attr}_damping, self.{c.attr}_step_bound, "
            f"{c.slot('scale')}, tf.equal(self.{c.attr}_iterations, 0), {c.keywords('max_tries')})")


KINDS = (OptimizerDef("levenberg_marquardt", LevenbergMarquardt, "specgen.runtime.lib.levenberg_marquardt.step",
                      _update, _slots, learning_rate=False, damping=True),)
