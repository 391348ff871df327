"""`mean_loss`: the mean of each batch's mean loss, weighted by batch size (any loss)."""

from __future__ import annotations

from specgen.kinds.metrics.base import MetricDef

KINDS = (MetricDef("mean_loss", "specgen.runtime.lib.metrics.MeanLoss"),)
