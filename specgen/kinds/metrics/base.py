"""What a metric kind is made of. No TensorFlow here: the runtime class is a dotted pointer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

State = tuple[tuple[str, tuple[int, ...]], ...]  # (accumulator, shape), in checkpoint order
SCALAR_MEAN: State = (("total", ()), ("count", ()))


def fits_any_loss(kind: str | None, target: str | None) -> str | None:
    return None


@dataclass(frozen=True)
class MetricDef:
    """Everything specgen knows about one metric (a name in `train.metrics`); __init__.py derives the rest.

    - `runtime`: the dotted name of its class in specgen/runtime/lib/metrics.py, which
      `metrics.make(name, target)` builds in the generated trainer.
    - `state`: its accumulators and their shapes: variables `metrics/<name>/<accumulator>` in the
      collection `metrics`, zeroed at the start of each stage and never checkpointed.
    - `refuse`: (the primary loss term's kind, its label form) -> why the metric cannot read that
      loss, or None when it can; validate reports it at the metric's position.
    """

    name: str
    runtime: str
    state: State = SCALAR_MEAN
    refuse: Callable[[str | None, str | None], str | None] = fits_any_loss


def binary_only(name: str) -> Callable[[str | None, str | None], str | None]:
    """The refusal of a metric of binary classification (sigmoid logits against 0/1 labels)."""

    def refuse(kind: str | None, target: str | None) -> str | None:
        if target == "binary":
            return None
        return (f"metric '{name}' is for binary classification and needs loss kind 'sigmoid_cross_entropy'; "
                f"the loss is {kind!r}")

    return refuse
