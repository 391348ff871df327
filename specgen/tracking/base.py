"""What the tracking package and its MLflow module share: the tracker that does nothing, where a run is tracked,
the run folder's record of its MLflow run, and a URI as messages print it. A module of its own so that
specgen/tracking/mlflow.py imports it without importing the package's face (which imports mlflow.py lazily).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RUN_FILE = "mlflow.json"  # in the run folder: the MLflow run that --resume continues and export attaches to
# How the one warning of a failed tracker begins (after `specgen train: `); a sweep finds it in a trial's log
FAILED = "warning: MLflow tracking at "
GOING_ON = "; going on without it"


class Tracker:
    """Tracking that is off: every call does nothing (the run without `train.tracking` or `--track`)."""

    def scalars(self, stage: str, step: int, values: dict[str, float]) -> None:
        """`values` as TensorBoard's `stage` writer gets them at `step`."""

    def finish(self, status: str) -> None:
        """FINISHED, KILLED (Ctrl-C) or FAILED."""


@dataclass(frozen=True)
class Target:
    """Where a run is tracked: the tracking URI and the experiment's name."""

    uri: str
    experiment: str


def shown_uri(uri: str) -> str:
    """A URI as messages print it: a password in it (https://user:secret@host) is never printed."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1***@", uri)
