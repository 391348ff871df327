"""What a learning-rate schedule kind is made of, and the key every schedule shares (`warmup_steps`).

No TensorFlow here: the runtime function is named by a dotted pointer (specgen/kinds/pointers.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from specgen.fields.base import NonNegativeInt, SpecModel
from specgen.kinds.pointers import call_name

Args = tuple[tuple[str, Any], ...]
Literal_ = Callable[[Any], str]  # render/environment.py's py_literal, passed in: this package imports no jinja2

# The warm-up every schedule takes (`warmup_steps`), wrapped around the schedule's own function.
WARMUP = "specgen.runtime.lib.schedules.warmup"


class ScheduleBase(SpecModel):
    warmup_steps: NonNegativeInt = Field(0, description="Linear warm-up from 0 in front of the schedule.")


def keyword_call(function: str, args: Args, literal: Literal_) -> str:
    """`schedules.<kind>(key=value, ...)`, the keys in spec order."""
    return f"{function}({', '.join(f'{k}={literal(v)}' for k, v in args)})"


@dataclass(frozen=True)
class ScheduleDef:
    """Everything specgen knows about one schedule kind; specgen/kinds/schedules/__init__.py derives the rest.

    - `spec`: the pydantic model of the `learning_rate:` mapping (its `schedule` Literal names the kind).
    - `runtime`: the dotted name of the function of the global step in specgen/runtime/lib/schedules.py.
    - `first`: the rate at step 0, the learning-rate variable's initial value (before any warm-up).
    - `call`: how generated code calls `runtime` from the IR's args (`keyword_call`: every key by name).
    Its IR is `ScheduleIR(name, args, warmup_steps)`, args being the model's keys but `schedule` and
    `warmup_steps`, in spec order (`args`). Refusals are the spec model's validators.
    """

    name: str
    spec: type[ScheduleBase]
    runtime: str
    first: Callable[[Any], float] = lambda rate: rate.initial
    call: Callable[[str, Args, Literal_], str] = keyword_call

    @property
    def function(self) -> str:
        return call_name(self.runtime)

    def args(self, rate: Any) -> Args:
        return tuple(rate.model_dump(exclude={"schedule", "warmup_steps"}).items())

    def render(self, args: Args, literal: Literal_) -> str:
        return self.call(self.function, args, literal)
