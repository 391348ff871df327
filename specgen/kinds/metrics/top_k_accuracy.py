"""`top_k_accuracy`: the share of examples whose label is among the `k` largest logits.

Keras' SparseTopKCategoricalAccuracy for integer labels and TopKCategoricalAccuracy for one-hot labels
(their arg-max), both `tf.math.in_top_k`: classes tied with the k-th largest logit all count as in the
top k. Written `top_k_accuracy` (k 5, Keras' default) or `{kind: top_k_accuracy, k: 3}`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specgen.fields.base import PositiveInt, SpecModel
from specgen.kinds.metrics.base import MetricDef


class TopKAccuracy(SpecModel):
    kind: Literal["top_k_accuracy"]
    k: PositiveInt = Field(5, description="How many of the largest logits may hold the label (Keras' default 5).")


def _refuse(kind: str | None, target: str | None) -> str | None:
    if target in ("sparse", "onehot"):  # the label forms of a softmax over classes (specgen/kinds/losses/)
        return None
    return (f"metric 'top_k_accuracy' ranks classes and needs a loss over softmax classes (integer or one-hot "
            f"labels); the loss is {kind!r}")


KINDS = (MetricDef("top_k_accuracy", "specgen.runtime.lib.metrics.TopKAccuracy", refuse=_refuse, spec=TopKAccuracy,
                   ranks_key="k"),)
