"""`accuracy`: the share of examples whose predicted class (or 0/1 for binary logits) is the label's."""

from __future__ import annotations

from specgen.kinds.metrics.base import MetricDef


def _refuse(kind: str | None, target: str | None) -> str | None:
    # Huber is a regression loss too, but accuracy was never refused with it (an oversight kept
    # here: this change moves code and changes no behaviour).
    if kind is None or (target == "regression" and kind != "huber"):
        return f"metric 'accuracy' needs a classification loss; the loss is {kind!r}"
    return None


KINDS = (MetricDef("accuracy", "specgen.runtime.lib.metrics.Accuracy", refuse=_refuse),)
