"""What a loss kind is made of. No TensorFlow here: the runtime function is a dotted pointer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specgen.fields.base import SpecModel
from specgen.kinds.pointers import call_name

# The label forms a data term compares its output with (runtime/lib/metrics.py reads them too):
# "sparse" (class indices, softmax logits), "onehot" (class probabilities), "binary" (sigmoid logits,
# labels 0/1) and "regression" (labels shaped like the predictions).
Target = Literal["sparse", "onehot", "binary", "regression"]


@dataclass(frozen=True)
class LossDef:
    """Everything specgen knows about one loss kind; specgen/kinds/losses/__init__.py derives the rest.

    - `spec`: the pydantic model of the term (a family may share one); refusals of single keys are its validators.
    - `runtime`: the dotted name of its function in specgen/runtime/lib/losses.py: (labels, output, **args)
      for a data term, (weights) for a regularizer; it returns the term's mean (a regularizer's sum).
    - `target`: the label form of a data term (`Target`); None for a regularizer, which reads weights.
    - `args`: the model's keys the runtime function takes by name (huber: delta), in call order; the
      report shows them beside the kind.
    Which output a data term reads is its model's `logits` or `predictions` key (ir/loss_terms.py).
    """

    name: str
    spec: type[SpecModel]
    runtime: str
    target: Target | None
    args: tuple[str, ...] = ()

    @property
    def function(self) -> str:
        return call_name(self.runtime)

    @property
    def regularizer(self) -> bool:
        return self.target is None

    def arguments(self, term: Any) -> tuple[tuple[str, float], ...]:
        """The resolved values of `args` from a spec term."""
        return tuple((name, float(getattr(term, name))) for name in self.args)
