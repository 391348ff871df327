"""Resolved loss terms (the `loss` section, one mapping or a list): what the total loss adds up."""

from __future__ import annotations

from dataclasses import dataclass

REGULARIZERS = ("l2", "l1")


@dataclass(frozen=True)
class LossTermIR:
    name: str  # unique; TensorBoard logs it as `loss/<name>`
    kind: str  # a specgen.runtime.lib.losses function name
    weight: float  # the term's factor in the total
    output: str | None = None  # the output a data term reads (None for regularizers)
    field: str | None = None  # the spec key that names it ('logits' or 'predictions')
    labels: str | None = None  # a data label, or an output when `labels_from_output`
    labels_from_output: bool = False  # a computed target: read under tf.stop_gradient
    delta: float | None = None  # huber only
    paths: tuple[str, ...] = ()  # the weights a regularizer sums over, in variable order

    @property
    def regularizer(self) -> bool:
        return self.kind in REGULARIZERS

    @property
    def data_labels(self) -> bool:
        """Whether the labels come from the data section (the primary term is the first such)."""
        return self.labels is not None and not self.labels_from_output


def primary(terms: tuple[LossTermIR, ...]) -> LossTermIR | None:
    """The term metrics read: the first one with data labels."""
    return next((t for t in terms if t.data_labels), None)
