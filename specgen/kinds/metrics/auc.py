"""`auc`: ROC AUC from confusion counts at 200 thresholds (binary classification), Keras' AUC with from_logits.

A score counts at a threshold when `sigmoid(logit) > threshold` exactly; Keras' evenly-spaced fast path
buckets it as ceil(score * 199) - 1 in float32, which can differ for a score equal to a threshold (training.md).
"""

from __future__ import annotations

from specgen.kinds.metrics.base import MetricDef, binary_only

THRESHOLDS = 200  # specgen/runtime/lib/metrics.py's AUC_THRESHOLDS: the accumulators' length
STATE = tuple((name, (THRESHOLDS,)) for name in ("true_positives", "false_positives", "true_negatives",
                                                   "false_negatives"))

KINDS = (MetricDef("auc", "specgen.runtime.lib.metrics.Auc", STATE, binary_only("auc")),)
