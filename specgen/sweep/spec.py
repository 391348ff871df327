"""The `sweep` section: what `specgen sweep` searches, over which keys, for which metric (docs/sweeps.md).

Only the shape is checked here (spec/model.py validates it with the rest of the spec): every range has two
numbers, low below high, a log range above 0, a choice of distinct scalars. Whether each key of `space` exists
in the spec and takes each value is checked by `specgen sweep` (sweep/space.py), which applies the values as
`--set` overrides; `specgen validate` checks the shape only.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias

import yaml
from pydantic import BeforeValidator, Field, StrictBool, StrictInt, StrictStr, model_validator

from specgen.diagnostics import MAX_ECHO, safe_repr
from specgen.fields.base import (
    FLOAT32_BOUND,
    FLOAT32_MAX,
    Float,
    Int,
    NonNegativeInt,
    Pattern,
    PositiveFloat,
    PositiveInt,
    SpecModel,
    number,
)
from specgen.fields.unions import by_key, by_shape

MAX_TRIALS = 100_000  # Optuna keeps every trial in its storage; more is a study of another kind
MAX_KEYS = 64  # searched keys: each is a --set of every trial and a panel of the summary's picture
MAX_CHOICES = 256  # values of one choice (each one is validated against the spec before the first trial)
MAX_GRID = 100_000  # points of a grid: the product of every key's values
_NONE = object()

MAX_CHOICE_TEXT = 256  # characters of a choice string: it is a `--set` value and a table cell
# YAML 1.1 (PyYAML) reads `1e-3` and `1.0e3` (an exponent without a dot or without a sign) as strings; the spec
# reads them as the numbers YAML 1.2 does (docs/spec.md)
_EXPONENT = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+")
_YAML11 = yaml.resolver.Resolver()  # PyYAML's implicit resolvers: which plain scalars it reads as numbers
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _written_float(value: object) -> object:
    """A sweep's numbers are strict: `uniform: ['0.1', '0.2']` is a quoted string, a mistake the lax reading of the
    rest of the spec would turn into a number. Text YAML 1.1 leaves as text but YAML 1.2 reads as a number (`1e-3`,
    `1.0e3`: see _EXPONENT) stays allowed, as everywhere in a spec."""
    if isinstance(value, str) and not _EXPONENT.fullmatch(value.strip()):
        raise ValueError(f"expected a number, received {_text(value)}")
    return value


def _written_int(value: object) -> object:
    if isinstance(value, str):
        raise ValueError(f"expected an integer, received {_text(value)}")
    if isinstance(value, float):
        raise ValueError(f"expected an integer, received {value!r} (float)")
    return value


def _text(value: str) -> str:
    """Text where a number goes, described truthfully: only text that YAML reads as a number when written plain can
    have been quoted (`'0.1'`); a bare word (`a`) was not, and is just text (fields/base.py not_text, the same rule)."""
    if _YAML11.resolve(yaml.ScalarNode, value, (True, False)) in _NUMBER_TAGS:  # type: ignore[no-untyped-call]
        return f"{safe_repr(value)} (a quoted string); write the number without quotes"
    return f"{safe_repr(value)} (text)"


StrictNumber = BeforeValidator(_written_float)
StrictInteger = BeforeValidator(_written_int)
if TYPE_CHECKING:  # number() and by_shape() build field types at run time; statically, what they hold
    Trials: TypeAlias = int
else:
    Trials = Annotated[number(int, gt=0, le=MAX_TRIALS), StrictInteger]
Bound = Annotated[list[Annotated[Float, StrictNumber]], Field(min_length=2, max_length=2)]
IntBound = Annotated[list[Annotated[Int, StrictInteger]], Field(min_length=2, max_length=2)]


def _one_choice(value: object) -> object:
    """One line for a value no member of Choice takes (the union would give one per member), naming what a choice
    may be; a value of the right kind is left to the members (their bounds)."""
    given = "null" if value is None else safe_repr(value)
    what = f"expected a number, true or false, or a string of at most {MAX_CHOICE_TEXT} characters, received {given}"
    if isinstance(value, str) and len(value) > MAX_CHOICE_TEXT:
        raise ValueError(what if len(value) > MAX_ECHO else f"{what} ({len(value)} characters)")
    if isinstance(value, float) and not (math.isfinite(value) and abs(value) <= FLOAT32_BOUND):
        raise ValueError(f"{what} (a float32 value is at most {FLOAT32_MAX:.8g} in magnitude)")
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise ValueError(f"{what} ({type(value).__name__})")
    if value is None:
        raise ValueError(what)
    return value


# A float choice is held to float32's finite range like every float of a spec (the schema says so too).
Choice = Annotated[StrictBool | StrictInt | Annotated[float, Field(strict=True, ge=-FLOAT32_BOUND, le=FLOAT32_BOUND)]
                   | Annotated[StrictStr, Field(max_length=MAX_CHOICE_TEXT)], BeforeValidator(_one_choice)]


def _one_point(bounds: list[float] | list[int], step: float | None) -> None:
    """A step past the range leaves one value in it: a 'range' that searches nothing (low == high is refused)."""
    low, high = bounds
    if step is not None and steps(low, high, step) < 1:  # counted as grid_values counts: [0.1, 0.3] by 0.2 is two
        raise ValueError(f"the step {step!r} is larger than the range [{low!r}, {high!r}], which then holds one "
                         f"value ({low!r}); expected a step of at most {_span(low, high)}")


def _span(low: float, high: float) -> str:
    """high - low as the largest step the range takes, counted in decimal as `steps` counts (0.09899999 for [0.001,
    0.09999999], where 6 digits printed 0.099: a step too large for the range as well)."""
    span = _decimal(high) - _decimal(low)
    return str(span) if isinstance(low, int) and isinstance(high, int) else repr(float(span))


def _decimal(value: float) -> Decimal:
    """A number as the spec writes it: repr is the shortest text that reads back to the float (`0.1`), which is
    also how Optuna reads a step's range (Decimal(str(x)), optuna/distributions.py _adjust_discrete_uniform_high)."""
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


def steps(low: float, high: float, step: float) -> int:
    """How many whole steps fit in [low, high], counted in decimal as written: 0.1 + 2 * 0.1 is 0.3, not
    0.30000000000000004 (binary floats would put it past the high end, or a tolerance would let in a point past it)."""
    return int((_decimal(high) - _decimal(low)) // _decimal(step))


def grid_point(low: float, step: float, k: int) -> float:
    """The k-th value of a stepped float range, low + k * step in decimal, then the float nearest to it: written
    with the decimals of low and step and no more (`0.3`, `0.15`), as the spec would write it."""
    return float(_decimal(low) + k * _decimal(step))


def _range(bounds: list[float] | list[int], log: bool) -> None:
    low, high = bounds
    if not low < high:
        raise ValueError(f"the range is empty: received [{low!r}, {high!r}]; expected the low end below the high end")
    if log and low <= 0:
        raise ValueError(f"a log range needs a low end above 0; received [{low!r}, {high!r}]")


class UniformRange(SpecModel):
    """A float drawn uniformly from [low, high] (on a grid of `step` when given)."""

    uniform: Bound
    step: Annotated[PositiveFloat, StrictNumber] | None = None

    @model_validator(mode="after")
    def _check(self) -> UniformRange:
        _range(self.uniform, log=False)
        _one_point(self.uniform, self.step)
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
    step: Annotated[PositiveInt, StrictInteger] | None = None

    @model_validator(mode="after")
    def _check(self) -> IntRange:
        _range(self.int, log=False)
        _one_point(self.int, self.step)
        return self


class LogIntRange(SpecModel):
    """An integer whose logarithm is drawn uniformly: widths, batch sizes."""

    log_int: IntBound

    @model_validator(mode="after")
    def _check(self) -> LogIntRange:
        _range(self.log_int, log=True)
        return self


def value_repr(value: object) -> str:
    """A choice as YAML writes it (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else safe_repr(value)


class ChoiceOf(SpecModel):
    """One of the listed values (numbers, strings, booleans)."""

    choice: Annotated[list[Choice], Field(min_length=1, max_length=MAX_CHOICES)]

    @model_validator(mode="after")
    def _check(self) -> ChoiceOf:
        # Equal as values is a repeat: Optuna finds a drawn value by == (1 and 1.0, 1 and true are one to it),
        # and Katib's list would hold both.
        for index, value in enumerate(self.choice):
            same = next((other for other in self.choice[:index] if other == value), _NONE)
            if same is _NONE:
                continue
            if type(same) is type(value):
                raise ValueError(f"the value {value_repr(value)} is listed twice; list each value once")
            raise ValueError(f"the values {value_repr(same)} and {value_repr(value)} are equal as values (Optuna "
                             "cannot tell them apart); list each value once")
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
    startup_trials: Annotated[NonNegativeInt, StrictInteger] = Field(5, description="Trials that finish before any is pruned.")
    warmup_steps: Annotated[NonNegativeInt, StrictInteger] = Field(0, description="Steps of a trial before it can be pruned.")


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
    seed: Annotated[NonNegativeInt, StrictInteger] = Field(
        0, description="The sampler's seed: the same sweep draws the same values.")
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
        count = min(steps(start, end, item.step) + 1, MAX_GRID + 1)
        return [grid_point(start, item.step, k) for k in range(count)]
    raise TypeError(f"not a finite set of values: {item!r}")
