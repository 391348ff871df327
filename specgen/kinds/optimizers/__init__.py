"""The optimizer registry: one module per `kind:` of an `optimizers:` entry, every optimizer list derived from it.

Each module defines its spec model and a `KINDS` tuple of `OptimizerDef`s (base.py): its slots, its
update call and a pointer to its runtime function. Derived here: `REGISTRY` (kind -> OptimizerDef) and
`Optimizer` (the discriminated union of the models, which specgen/spec/training.py uses);
ir/training/build.py resolves and render/train_plan.py renders through `REGISTRY`. docs/extending.md
says what else a new optimizer needs; tests/test_optimizer_registry.py names what one lacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, TypeAlias, Union

from pydantic import Field

from specgen.kinds.collect import collect, models
from specgen.kinds.optimizers.base import COMMON_KEYS, Clip, OptimizerBase, OptimizerDef, UpdateCall

__all__ = ["COMMON_KEYS", "REGISTRY", "Clip", "Optimizer", "OptimizerBase", "OptimizerDef", "UpdateCall"]

# The first kinds, in the order the published JSON schema lists them; later ones follow alphabetically.
SCHEMA_ORDER = ("sgd", "adam", "adamw", "rmsprop", "adagrad", "levenberg_marquardt")

REGISTRY: dict[str, OptimizerDef] = collect(__name__, __path__, SCHEMA_ORDER)

if TYPE_CHECKING:  # pydantic's discriminated union of the registry's models, built at run time; statically, their base
    Optimizer: TypeAlias = OptimizerBase
else:
    Optimizer = Annotated[Union[models(REGISTRY)], Field(discriminator="kind")]  # noqa: UP007 (built from a tuple)
