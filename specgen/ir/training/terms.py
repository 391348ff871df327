"""Resolved loss terms (the `loss` section, one mapping or a list): what the total loss adds up."""

from __future__ import annotations

from dataclasses import dataclass

from specgen.kinds.losses import REGISTRY as LOSSES


@dataclass(frozen=True)
class LossTermIR:
    name: str  # unique; TensorBoard logs it as `loss/<name>`
    kind: str  # a specgen.runtime.lib.losses function name
    weight: float  # the term's factor in the total
    output: str | None = None  # the output a data term reads (None for regularizers)
    field: str | None = None  # the spec key that names it ('logits' or 'predictions')
    labels: str | None = None  # a data label, or an output when `labels_from_output`
    labels_from_output: bool = False  # a computed target: read under tf.stop_gradient
    args: tuple[tuple[str, float], ...] = ()  # the kind's own keys its runtime function takes (huber: delta)
    paths: tuple[str, ...] = ()  # the weights a regularizer sums over, in variable order

    @property
    def regularizer(self) -> bool:
        return LOSSES[self.kind].regularizer

    @property
    def target(self) -> str | None:
        """The label form of a data term (specgen/kinds/losses/base.py's Target); None for a regularizer."""
        return LOSSES[self.kind].target

    @property
    def delta(self) -> float | None:
        """Huber's delta (None for other kinds)."""
        return dict(self.args).get("delta")

    @property
    def data_labels(self) -> bool:
        """Whether the labels come from the data section (the primary term is the first such)."""
        return self.labels is not None and not self.labels_from_output


def primary(terms: tuple[LossTermIR, ...]) -> LossTermIR | None:
    """The term metrics read: the first one with data labels."""
    return next((t for t in terms if t.data_labels), None)
