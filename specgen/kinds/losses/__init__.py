"""The loss registry: one module per loss kind (or family sharing a model), every loss list derived from it.

Each module defines its term model and a `KINDS` tuple of `LossDef`s (base.py): its label form, the
keys its runtime function takes and a pointer to that function. Derived here: `REGISTRY` (kind ->
LossDef), `LossTerm` (the discriminated union of the term models) and `Loss` (one term or a list),
which specgen/spec/training.py uses; ir/, render/ and the report read each term's Def from `REGISTRY`.
docs/extending.md says what else a new loss needs; tests/test_loss_registry.py names what one lacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, TypeAlias, Union

from pydantic import Field

from specgen.fields.base import SpecModel
from specgen.fields.unions import ONE_ITEM, by_shape
from specgen.kinds.collect import collect, models
from specgen.kinds.losses.base import LossDef, Target

__all__ = ["REGISTRY", "Loss", "LossDef", "LossTerm", "Target"]

# The first modules, in the order the published JSON schema lists their models; later ones follow alphabetically.
SCHEMA_ORDER = ("cross_entropy", "regression", "huber", "regularizers")

REGISTRY: dict[str, LossDef] = collect(__name__, __path__, SCHEMA_ORDER)

if TYPE_CHECKING:  # pydantic's discriminated union of the registry's models, built at run time; statically, their base
    LossTerm: TypeAlias = SpecModel
else:
    LossTerm = Annotated[Union[models(REGISTRY)], Field(discriminator="kind")]  # noqa: UP007 (built from a tuple)


def _term_or_list(value: object) -> str:
    return "list" if isinstance(value, list) else "term"


# ONE_ITEM: a term is the list of that one term (the runtime sums the list), so `specgen diff` reads both as one.
Loss = by_shape(_term_or_list, "a loss term (a mapping with 'kind') or a list of them", ONE_ITEM,
                term=LossTerm, list=Annotated[list[LossTerm], Field(min_length=1)])
