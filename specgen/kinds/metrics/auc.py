"""`auc`: ROC AUC from confusion counts at 200 thresholds, as Keras' AUC (binary classification)."""

from __future__ import annotations

from specgen.kinds.metrics.base import MetricDef, binary_only

THRESHOLDS = 200  # specgen/runtime/lib/metrics.py's AUC_THRESHOLDS: the accumulators' length
STATE = tuple((name, (THRESHOLDS,)) for name in ("true_positives", "false_positives", "true_negatives",
                                                   "false_negatives"))

KINDS = (MetricDef("auc", "specgen.runtime.lib.metrics.Auc", STATE, binary_only("auc")),)
