"""The metric registry: one module per name of `train.metrics`, every metric list derived from it.

Each module defines a `KINDS` tuple of `MetricDef`s (base.py): its accumulators, the losses it
cannot read and a pointer to its runtime class. Derived here: `REGISTRY` (name -> MetricDef) and
`Metric` (the Literal of names that specgen/spec/training.py's `train.metrics` takes); the collections
(ir/collections.py) and validate's refusals (ir/resolve.py) read `REGISTRY`. docs/extending.md says
what else a new metric needs; tests/test_metric_registry.py names what one lacks.
"""

from __future__ import annotations

from typing import Literal

from specgen.kinds.collect import collect
from specgen.kinds.metrics.base import MetricDef, State

__all__ = ["REGISTRY", "Metric", "MetricDef", "State"]

# The first metrics, in the order the published JSON schema lists them; later ones follow alphabetically.
SCHEMA_ORDER = ("accuracy", "mean_loss", "auc", "precision", "recall")

REGISTRY: dict[str, MetricDef] = collect(__name__, __path__, SCHEMA_ORDER)

Metric = Literal[tuple(REGISTRY)]  # type: ignore[valid-type]  # built from the registry
