"""The initializer registry: one module per `kind:` of a `kernel_init:`-like key (or per family sharing a model).

Each module defines its spec model and a `KINDS` tuple of `InitializerDef`s (base.py): its runtime function,
whether it is seeded, its moments for the init-scale lint and the Keras classes it imports from. Derived here:
`REGISTRY` (kind -> InitializerDef), `Initializer` (the discriminated union of the models), `InitializerName`
(the kinds a bare name may stand for) and `InitializerSpec` (either), which the ops' spec models use;
render/tf_plan.py writes, ir/gains.py measures and importers/keras/args.py reads through `REGISTRY`.
docs/extending.md says what else a new initializer needs; tests/test_initializer_registry.py names what one lacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias, Union

from pydantic import Field

from specgen.fields.base import SpecModel
from specgen.fields.unions import by_shape, scalar_or_mapping
from specgen.kinds.collect import collect, module_names
from specgen.kinds.initializers.base import InitializerDef, Moments, fans

__all__ = ["REGISTRY", "Initializer", "InitializerDef", "InitializerName", "InitializerSpec", "Moments", "fans"]

# The first modules, in the order the published JSON schema lists the union's models; later ones follow
# alphabetically.
SCHEMA_ORDER = ("constant", "zeros", "ones", "normal", "uniform", "variance_scaling", "orthogonal")
# ... and the order its enum of bare names lists their kinds in.
NAME_ORDER = ("zeros", "ones", "variance_scaling", "normal", "uniform", "orthogonal")

REGISTRY: dict[str, InitializerDef] = collect(__name__, __path__, SCHEMA_ORDER)


def _module(kind: InitializerDef) -> str:
    return kind.spec.__module__.rpartition(".")[2] if kind.spec is not None else ""


_NAME_MODULES = module_names(__path__, NAME_ORDER)
SHORTHANDS = tuple(sorted((k for k in REGISTRY.values() if k.shorthand),
                          key=lambda k: _NAME_MODULES.index(_module(k))))  # stable: a family keeps its order
_MODELS = tuple(dict.fromkeys(k.spec for k in REGISTRY.values() if k.spec is not None))

if TYPE_CHECKING:  # the registry's names, known at run time
    InitializerName: TypeAlias = str
else:
    InitializerName = Literal[tuple(k.name for k in SHORTHANDS)]
if TYPE_CHECKING:  # pydantic's discriminated union of the registry's models, built at run time; statically, their base
    Initializer: TypeAlias = SpecModel
else:
    Initializer = Annotated[Union[_MODELS], Field(discriminator="kind")]  # noqa: UP007 (built from a tuple)
# `kernel_init: he_normal` is short for `kernel_init: {kind: he_normal}`.
InitializerSpec = by_shape(scalar_or_mapping, "an initializer name or a mapping with 'kind'",
                           scalar=InitializerName, mapping=Initializer)
