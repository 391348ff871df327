"""`accuracy`: the share of examples whose predicted class (or 0/1 for binary logits) is the label's."""

from __future__ import annotations

from specgen.kinds.metrics.base import MetricDef

# The label forms accuracy can read: specgen/runtime/lib/metrics.py `_predicted_and_true` compares the
# arg-max for a softmax (integer or one-hot labels) and logit > 0 against label > 0.5 for sigmoid logits.
# A regression loss (huber included) has neither classes nor logits: its predictions are values, and
# "logit > 0" would count every positive prediction as a hit.
READS = ("sparse", "onehot", "binary")


def _refuse(kind: str | None, target: str | None) -> str | None:
    if target not in READS:
        return f"metric 'accuracy' needs a classification loss; the loss is {kind!r}"
    return None


KINDS = (MetricDef("accuracy", "specgen.runtime.lib.metrics.Accuracy", refuse=_refuse),)
