"""What an optimizer kind is made of, and the keys every gradient optimizer shares.

No TensorFlow or jinja2 here: the runtime function is a dotted pointer (specgen/kinds/pointers.py),
and the render plan passes its literal function into `UpdateCall`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

from pydantic import Field

from specgen.fields.base import NonNegativeFloat, Pattern, PositiveFloat, SpecModel
from specgen.fields.losses import Selection
from specgen.fields.unions import by_key, by_shape, scalar_or_mapping
from specgen.kinds.pointers import call_name
from specgen.kinds.schedules import LearningRate

# Optimizer spec keys that are not kind-specific hyperparameters (the rest go to OptimizerIR.hyper).
COMMON_KEYS = frozenset({"kind", "variables", "learning_rate", "weight_decay", "clip"})


class ClipGlobalNorm(SpecModel):
    global_norm: PositiveFloat


class ClipValue(SpecModel):
    value: PositiveFloat


# An optimizer's `clip:` (its own gradients) and `train.clip:` (every gradient) take the same mapping.
if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Clip: TypeAlias = ClipGlobalNorm | ClipValue
else:
    Clip = by_shape(by_key("global_norm", "value"), "a mapping with exactly one of 'global_norm' or 'value'",
                    global_norm=ClipGlobalNorm, value=ClipValue)


class WeightDecay(SpecModel):
    """Decoupled weight decay with exceptions (biases and norm parameters, usually)."""

    rate: NonNegativeFloat
    exclude: Annotated[list[Pattern], Field(min_length=1, description=(
        "Collection names or glob patterns over this optimizer's weights that get no decay; each must match one."))]


if TYPE_CHECKING:  # by_shape picks a branch at run time; statically, the union of its branches
    Decay: TypeAlias = float | WeightDecay
else:
    Decay = by_shape(scalar_or_mapping, "a number or a mapping {rate, exclude}", scalar=NonNegativeFloat,
                     mapping=WeightDecay)


class OptimizerBase(SpecModel):
    # Left out (or `trainable`, as users of tf.trainable_variables() write it): every weight that is
    # not frozen and not claimed by another optimizer; at most one optimizer may do so (ir/collections.py).
    variables: Selection | None = Field(None, description=(
        "A collection name, a glob pattern, or a list of them. Left out, or 'trainable': every weight that is "
        "not frozen and not claimed by another optimizer (one optimizer at most)."))
    learning_rate: LearningRate
    weight_decay: Decay = 0.0
    clip: Clip | None = None


Slots = tuple[tuple[str, float], ...]  # (slot name, initial value), in checkpoint order


@dataclass(frozen=True)
class UpdateCall:
    """What render/train_plan.py knows when it writes one optimizer's update line in the generated step."""

    function: str  # the runtime function as generated code names it: `optimizers.adam`
    variables: str  # the expression of the optimizer's variable list
    gradients: str  # ... of its (clipped) gradients
    attr: str  # the generated attribute prefix: `self.<attr>_iterations`, `self.<attr>_damping`
    slots: Mapping[str, str]  # slot name -> the expression of its variable list
    hyper: Mapping[str, Any]  # the kind's own keys, resolved
    literal: Callable[[Any], str]  # render/environment.py's py_literal

    def slot(self, name: str) -> str:
        """A slot's list, or `[]` for a slot the spec's settings leave out (sgd without momentum)."""
        return self.slots.get(name, "[]")

    def keywords(self, *names: str) -> str:
        return ", ".join(f"{n}={self.literal(self.hyper[n])}" for n in names)


def no_slots(hyper: Mapping[str, Any]) -> Slots:
    return ()


@dataclass(frozen=True)
class OptimizerDef:
    """Everything specgen knows about one optimizer kind; specgen/kinds/optimizers/__init__.py derives the rest.

    - `spec`: the pydantic model of its `optimizers:` entry (its `kind` Literal names the kind); refusals of
      single keys are the model's validators.
    - `runtime`: the dotted name of its update function in specgen/runtime/lib/.
    - `slots`: its per-weight state from its resolved keys: (slot, initial value); each slot is one
      variable per weight under the checkpoint key `optimizers/<name>/<slot>/<weight path>`.
    - `update`: the runtime call the generated train step makes (`lr` is the step's learning rate).
    - `learning_rate`: False for a kind without one (no learning-rate variable, schedule, weight decay or clip).
    - `damping`: True for a kind that keeps a trust-region damping: the damping λ (`optimizers/<name>/damping`)
      and the step bound Δ it is solved from (`optimizers/<name>/step_bound`), one scalar variable each.
    Every kind has an iteration counter (`optimizers/<name>/iterations`).
    """

    name: str
    spec: type[SpecModel]
    runtime: str
    update: Callable[[UpdateCall], str]
    slots: Callable[[Mapping[str, Any]], Slots] = no_slots
    learning_rate: bool = True
    damping: bool = False

    @property
    def function(self) -> str:
        return call_name(self.runtime)

    def hyper(self, opt: Any) -> dict[str, Any]:
        """The kind's own keys of a spec entry, in spec order."""
        hyper: dict[str, Any] = opt.model_dump(exclude=set(COMMON_KEYS))
        return hyper
