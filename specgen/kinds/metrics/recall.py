"""`recall`: true positives over actual positives (binary classification, logits > 0)."""

from __future__ import annotations

from specgen.kinds.metrics.base import MetricDef, binary_only

KINDS = (MetricDef("recall", "specgen.runtime.lib.metrics.Recall",
                   (("true_positives", ()), ("false_negatives", ())), binary_only("recall")),)
