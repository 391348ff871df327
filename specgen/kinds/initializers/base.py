"""What an initializer kind is made of: its spec model, its runtime function, its moments and its Keras names.

No TensorFlow here: the runtime function is a dotted pointer (specgen/kinds/pointers.py), and the
moments are pure Python (`specgen validate` runs the init-scale lint through them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from specgen.fields.base import SpecModel
from specgen.kinds.pointers import call_name

Moments = tuple[float, float]  # (mean, second moment E[x^2]) of one drawn weight
Shape = tuple[int, ...]
# Keras' VarianceScaling arguments (scale, mode, distribution) that a kind is.
Scaling = tuple[float, str, str]


def fans(shape: Shape) -> tuple[int, int]:
    """(fan_in, fan_out) as Keras' compute_fans takes them from a kernel shape."""
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


@dataclass(frozen=True)
class InitializerDef:
    """Everything specgen knows about one initializer kind; specgen/kinds/initializers/__init__.py derives the rest.

    - `spec`: the pydantic model of its `{kind: ...}` mapping (its `kind` Literal names the kind), or None for a
      kind only an op's resolution makes (`unit_forget_bias`: no spec key takes it).
    - `runtime`: the dotted name of its function in specgen/runtime/lib/initializers.py; generated code calls it
      with the variable's shape, the spec keys as keywords, and `seed=(seed, <per variable>)` when `seeded`.
    - `moments`: (resolved keys, variable shape) -> the mean and E[w^2] of one weight, for the init-scale lint.
    - `keras`: the Keras initializer classes that are this kind (the importer reads them, with their spec keys);
      `scaling`: the VarianceScaling (scale, mode, distribution) that is this kind.
    """

    name: str
    spec: type[SpecModel] | None
    runtime: str
    moments: Callable[[Mapping[str, float], Shape], Moments]
    seeded: bool = True
    keras: tuple[str, ...] = ()
    scaling: Scaling | None = None

    @property
    def function(self) -> str:
        """How generated code names the function: `init.<function>` (model.py imports the module as `init`)."""
        return "init." + call_name(self.runtime).partition(".")[2]

    @property
    def keys(self) -> tuple[str, ...]:
        """Its spec keys besides `kind`, in model order (the Keras importer reads these from a config)."""
        return tuple(k for k in self.spec.model_fields if k != "kind") if self.spec is not None else ()

    @property
    def shorthand(self) -> bool:
        """Whether the bare name is a spec value (`kernel_init: he_normal`): every key has a default."""
        return self.spec is not None and not any(
            field.is_required() for key, field in self.spec.model_fields.items() if key != "kind")


def runtime(name: str) -> str:
    return f"specgen.runtime.lib.initializers.{name}"
