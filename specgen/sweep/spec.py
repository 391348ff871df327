"""The `sweep` section: what `specgen sweep` searches, over which keys, for which metric (docs/sweeps.md).

Only the shape is checked here (spec/model.py validates it with the rest of the spec): every range has two
numbers, low below high, a log range above 0, a choice of distinct scalars. Whether each key of `space` exists
in the spec and takes each value is checked by `specgen sweep` (sweep/space.py), which applies the values as
`--set` overrides; `specgen validate` checks the shape only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias

from pydantic import Field, StrictBool, StrictInt, StrictStr, model_validator

from specgen.fields.base import FLOAT32_MAX, Float, Int, NonNegativeInt, Pattern, PositiveFloat, PositiveInt, SpecModel, number
from specgen.fields.unions import by_key, by_shape

MAX_TRIALS = 100_000  # Optuna keeps every trial in its storage; more is a study of another kind
MAX_KEYS = 64  # searched keys: each is a --set of every trial and a panel of the summary's picture
MAX_CHOICES = 256  # values of one choice (each one is validated against the spec before the first trial)
MAX_GRID = 100_000  # points of a grid: the product of every key's values

if TYPE_CHECKING:  # number() and by_shape() build field types at run time; statically, what they hold
    Trials: TypeAlias = int
else:
    Trials = number(int, gt=0, le=MAX_TRIALS)
Bound = Annotated[list[Float], Field(min_length=2, max_length=2)]
IntBound = Annotated[list[Int], Field(min_length=2, max_length=2)]
# A float choice is held to float32's finite range like every float of a spec (the schema says so too).
Choice = (StrictBool | StrictInt | Annotated[float, Field(strict=True, ge=-FLOAT32_MAX, le=FLOAT32_MAX)]
          | Annotated[StrictStr, Field(max_length=256)])


def _range(bounds: list[float] | list[int], log: bool) -> None:
    low, high = bounds
    if not low < high:
        raise ValueError(f"the range is empty: received [{low!r}, {high!r}]; expected the low end below the high end")
    if log and low <= 0:
        raise ValueError(f"a log range needs a low end above 0; received [{low!r}, {high!r}]")


class UniformRange(SpecModel):
    """A float drawn uniformly from [low, high] (on a grid of `step` when given)."""

    uniform: Bound
    step: PositiveFloat | None = None

    @model_validator(mode="after")
    def _check(self) -> UniformRange:
        _range(self.uniform, log=False)
        return self


class LogUniformRange(SpecModel):
    """A float whose logarithm is drawn uniformly: learning rates, weight decays."""

    log_uniform: Bound

    @model_validator(mode="after")
    def _check(self) -> LogUniformRange:
        _range(self.log_uniform, log=True)
        return self


class IntRange(SpecModel):
    """An integer from [low, high], both included (every `step`-th from low when given)."""

    int: IntBound
    step: PositiveInt | None = None

    @model_validator(mode="after")
    def _check(self) -> IntRange:
        _range(self.int, log=False)
        return self


class LogIntRange(SpecModel):
    """An integer whose logarithm is drawn uniformly: widths, batch sizes."""

    log_int: IntBound

    @model_validator(mode="after")
    def _check(self) -> LogIntRange:
        _range(self.log_int, log=True)
        return self


class ChoiceOf(SpecModel):
    """One of the listed values (numbers, strings, booleans)."""

    choice: Annotated[list[Choice], Field(min_length=1, max_length=MAX_CHOICES)]

    @model_validator(mode="after")
    def _check(self) -> ChoiceOf:
        seen: list[tuple[type, object]] = []
        for value in self.choice:
            if (type(value), value) in seen:
                raise ValueError(f"the value {value!r} is listed twice; list each value once")
            seen.append((type(value), value))
        return self


KINDS = ("uniform", "log_uniform", "int", "log_int", "choice")
if TYPE_CHECKING:
    Distribution: TypeAlias = UniformRange | LogUniformRange | IntRange | LogIntRange | ChoiceOf
else:
    Distribution = by_shape(by_key(*KINDS), "a mapping with one of 'uniform', 'log_uniform', 'int', 'log_int' or "
                            "'choice'", uniform=UniformRange, log_uniform=LogUniformRange, int=IntRange,
                            log_int=LogIntRange, choice=ChoiceOf)


class MedianPruner(SpecModel):
    """Optuna's MedianPruner: stop a trial whose metric at a step trails the median of the earlier trials' there."""

    kind: Literal["median"]
    startup_trials: NonNegativeInt = Field(5, description="Trials that finish before any is pruned.")
    warmup_steps: NonNegativeInt = Field(0, description="Steps of a trial before it can be pruned.")


def _pruner_shape(value: object) -> str | None:
    return "mapping" if isinstance(value, dict) else "name"


if TYPE_CHECKING:
    Pruner: TypeAlias = Literal["median", "none"] | MedianPruner
else:
    Pruner = by_shape(_pruner_shape, "'median', 'none' or a mapping with kind: median", name=Literal["median", "none"],
                      mapping=MedianPruner)
Metric = Annotated[str, Field(min_length=3, max_length=256, pattern=r"^(train|eval)/[^\x00-\x1f\x7f]+$",
                              description="<stage>/<tag>: a scalar the run logs to TensorBoard (eval/accuracy).")]


class Sweep(SpecModel):
    """A hyperparameter search: `specgen sweep SPEC` runs `trials` ordinary runs with values drawn from `space`."""

    metric: Metric
    direction: Literal["maximize", "minimize"]
    trials: Trials = 10
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    pruner: Pruner = "none"  # a name or a MedianPruner
    seed: NonNegativeInt = Field(0, description="The sampler's seed: the same sweep draws the same values.")
    space: Annotated[dict[Pattern, Distribution], Field(min_length=1, max_length=MAX_KEYS, description=(
        "Key (as in --set, layers[NAME].KEY for a layer) -> the values to search."))]

    @model_validator(mode="after")
    def _grid(self) -> Sweep:
        if self.sampler != "grid":
            return self
        points = 1
        for key, item in self.space.items():
            finite = isinstance(item, (ChoiceOf, IntRange)) or (isinstance(item, UniformRange) and item.step)
            if not finite:
                raise ValueError(f"sampler grid needs a finite set of values: '{key}' is a continuous range; use "
                                 "choice, int, or uniform with step")
            points *= len(grid_values(item))
            if points > MAX_GRID:
                raise ValueError(f"the grid has more than {MAX_GRID:,} points; expected at most that many")
        return self


def grid_values(item: object) -> list[object]:
    """Every value of a finite item (a choice, an int range, a uniform range with a step), in order; at most
    MAX_GRID + 1 of them are made (the caller refuses more)."""
    if isinstance(item, ChoiceOf):
        return list(item.choice)
    if isinstance(item, IntRange):
        low, high = item.int
        return list(range(low, min(high, low + (MAX_GRID + 1) * (item.step or 1)) + 1, item.step or 1))
    if isinstance(item, UniformRange) and item.step:
        start, end = item.uniform
        count = min(int((end - start) / item.step + 1e-9) + 1, MAX_GRID + 1)
        return [start + i * item.step for i in range(count)]
    raise TypeError(f"not a finite set of values: {item!r}")
