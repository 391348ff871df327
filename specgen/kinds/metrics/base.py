"""What a metric kind is made of. No TensorFlow here: the runtime class is a dotted pointer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import create_model

from specgen.fields.base import SpecModel

State = tuple[tuple[str, tuple[int, ...]], ...]  # (accumulator, shape), in checkpoint order
SCALAR_MEAN: State = (("total", ()), ("count", ()))
Args = tuple[tuple[str, Any], ...]  # (key, value) in the model's field order: keyword arguments of the class


def fits_any_loss(kind: str | None, target: str | None) -> str | None:
    return None


def keyless(name: str) -> type[SpecModel]:
    """The mapping form `{kind: <name>}` of a metric without keys (the same as the plain name)."""
    title = "".join(part.title() for part in name.split("_")) + "Metric"
    return create_model(title, __base__=SpecModel, __module__=__name__, kind=(Literal[name], ...))


@dataclass(frozen=True)
class MetricDef:
    """Everything specgen knows about one metric (a name in `train.metrics`); __init__.py derives the rest.

    - `runtime`: the dotted name of its class in specgen/runtime/lib/metrics.py, which
      `metrics.make(name, target, **args)` builds in the generated trainer.
    - `state`: its accumulators and their shapes: variables `metrics/<name>/<accumulator>` in the
      collection `metrics`, zeroed at the start of each stage and never checkpointed.
    - `refuse`: (the primary loss term's kind, its label form) -> why the metric cannot read that
      loss, or None when it can; validate reports it at the metric's position.
    - `spec`: the model of its mapping form `{kind: <name>, <key>: ...}`; every key but `kind` is a
      keyword argument of the runtime class. None (a metric without keys): `{kind: <name>}` only.
      A plain name in `train.metrics` means the mapping with every key at its default.
    - `labels`: whether it reads the primary loss term's labels from the data. A spec whose every term
      reads its labels from an output (a DQN's computed TD target) has none to give, and validate refuses
      such a metric there; one that needs none (mean_loss: the loss value itself) is allowed.
    - `ranks_key`: the key counting how many of the largest logits may hold the label (top_k_accuracy's `k`), or
      "". Validate warns when its value is at least the output's class count: every label is then among them and
      the metric reads 1.0 whatever the model does (ir/lints.py `top_k_warnings`).
    """

    name: str
    runtime: str
    state: State = SCALAR_MEAN
    refuse: Callable[[str | None, str | None], str | None] = fits_any_loss
    spec: type[SpecModel] | None = None
    labels: bool = True
    ranks_key: str = ""

    def __post_init__(self) -> None:
        if self.spec is None:  # a generated model keeps the union uniform: every metric has a mapping form
            object.__setattr__(self, "spec", keyless(self.name))

    def model(self, item: str | SpecModel) -> SpecModel:
        """An item of `train.metrics` as its model: a plain name takes every key's default."""
        assert self.spec is not None
        return self.spec.model_validate({"kind": item}) if isinstance(item, str) else item

    def args(self, item: str | SpecModel) -> Args:
        """The runtime class's keyword arguments for an item of `train.metrics`, in the model's order."""
        model = self.model(item)
        return tuple((key, getattr(model, key)) for key in type(model).model_fields if key != "kind")


def binary_only(name: str) -> Callable[[str | None, str | None], str | None]:
    """The refusal of a metric of binary classification (sigmoid logits against 0/1 labels)."""

    def refuse(kind: str | None, target: str | None) -> str | None:
        if target == "binary":
            return None
        return (f"metric '{name}' is for binary classification and needs loss kind 'sigmoid_cross_entropy'; "
                f"the loss is {kind!r}")

    return refuse
