"""`mean_loss`: the mean of each batch's mean loss, weighted by batch size (any loss).

It reads the loss value and the batch's row count only, never labels, so it is allowed beside a loss whose
terms all read computed targets (no term with data labels): there it is the mean of that loss.
"""

from __future__ import annotations

from specgen.kinds.metrics.base import MetricDef

KINDS = (MetricDef("mean_loss", "specgen.runtime.lib.metrics.MeanLoss", labels=False),)
