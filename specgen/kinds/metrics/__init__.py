"""The metric registry: one module per name of `train.metrics`, every metric list derived from it.

Each module defines a `KINDS` tuple of `MetricDef`s (base.py): its accumulators, the losses it
cannot read, its keys (a spec model, for a metric that takes any) and a pointer to its runtime class.
Derived here: `REGISTRY` (name -> MetricDef), `MetricName` (the Literal of names) and `Metric` (an item
of specgen/spec/training.py's `train.metrics`: a name, or a mapping `{kind: <name>, <key>: ...}`); the
IR (ir/training/build.py), the collections (ir/collections.py) and validate's refusals (ir/resolve.py)
read `REGISTRY`. docs/extending.md says what else a new metric needs; tests/test_metric_registry.py
names what one lacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias, Union

from pydantic import Field

from specgen.fields.base import SpecModel
from specgen.fields.unions import by_shape
from specgen.kinds.collect import collect, models
from specgen.kinds.metrics.base import Args, MetricDef, State

__all__ = ["REGISTRY", "Args", "Metric", "MetricDef", "MetricName", "State", "args_of", "name_of", "relisted"]

# The first metrics, in the order the published JSON schema lists them; later ones follow alphabetically.
SCHEMA_ORDER = ("accuracy", "mean_loss", "auc", "precision", "recall")

REGISTRY: dict[str, MetricDef] = collect(__name__, __path__, SCHEMA_ORDER)

if TYPE_CHECKING:  # the registry's names, known at run time
    MetricName: TypeAlias = str
else:
    MetricName = Literal[tuple(REGISTRY)]
if TYPE_CHECKING:  # pydantic's discriminated union of the registry's models, built at run time; statically, their base
    MetricKeys: TypeAlias = SpecModel
else:
    MetricKeys = Annotated[Union[models(REGISTRY)], Field(discriminator="kind")]  # noqa: UP007 (built from a tuple)


def _name_or_mapping(value: object) -> str:
    return "keys" if isinstance(value, dict) else "name"


Metric = by_shape(_name_or_mapping, "a metric name or a mapping with 'kind'", name=MetricName, keys=MetricKeys)


def name_of(item: str | SpecModel) -> str:
    """The metric an item of `train.metrics` names: the plain name, or the mapping's `kind`."""
    return item if isinstance(item, str) else str(item.kind)  # type: ignore[attr-defined]  # every model has kind


def args_of(item: str | SpecModel) -> Args:
    """The keyword arguments of an item's runtime class (every key at its default for a plain name)."""
    return REGISTRY[name_of(item)].args(item)


def relisted(name: str, args: Args, before: Args) -> str:
    """Why a metric listed twice with different keys is refused: its variables metrics/<name>/* are one set."""
    def keys(pairs: Args) -> str:
        return ", ".join(f"{key} {value}" for key, value in pairs)

    return f"metric '{name}' is listed again with other keys ({keys(args)}; before: {keys(before)}); list it once"
