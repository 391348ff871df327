"""`precision`: true positives over predicted positives (binary classification, logits > 0)."""

from __future__ import annotations

from specgen.kinds.metrics.base import MetricDef, binary_only

KINDS = (MetricDef("precision", "specgen.runtime.lib.metrics.Precision",
                   (("true_positives", ()), ("false_positives", ())), binary_only("precision")),)
