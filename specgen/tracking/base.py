"""What the tracking package and its MLflow module share: the tracker that does nothing, where a run is tracked,
the run folder's record of its MLflow run, and a URI as messages print it. A module of its own so that
specgen/tracking/mlflow.py imports it without importing the package's face (which imports mlflow.py lazily).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from specgen.errors import SpecgenError
from specgen.paths import shown

RUN_FILE = "mlflow.json"  # in the run folder: the MLflow run that --resume continues and export attaches to
RECORD_FORM = 'specgen train writes {"uri": URI, "experiment": NAME, "run_id": ID} there'
# How the one warning of a failed tracker begins (after `specgen train: `); a sweep finds it in a trial's log
FAILED = "warning: MLflow tracking at "
GOING_ON = "; going on without it"


class Tracker:
    """Tracking that is off: every call does nothing (the run without `train.tracking` or `--track`)."""

    def scalars(self, stage: str, step: int, values: dict[str, float]) -> None:
        """`values` as TensorBoard's `stage` writer gets them at `step`."""

    def finish(self, status: str) -> None:
        """FINISHED, KILLED (Ctrl-C or SIGTERM: runtime/interrupt.py) or FAILED."""


@dataclass(frozen=True)
class Target:
    """Where a run is tracked: the tracking URI and the experiment's name."""

    uri: str
    experiment: str


@dataclass(frozen=True)
class Record:
    """A run folder's mlflow.json: the MLflow run of `specgen train` that --resume continues and export attaches to."""

    uri: str
    experiment: str
    run_id: str


class RecordError(SpecgenError, ValueError):
    """A run folder's mlflow.json that is there but unusable; its text is one line naming the file."""


def read_record(folder: Path) -> Record | None:
    """`folder`'s mlflow.json, None when there is none; RecordError when it is damaged (not JSON, a field missing
    or of the wrong type), checked here so that no caller meets a KeyError or a silently ignored record."""
    path = folder / RUN_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"{shown(path)} cannot be read ({exc.strerror if isinstance(exc, OSError) else exc})") from None
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"{shown(path)} is not JSON ({exc}); {RECORD_FORM}") from None
    if not isinstance(found, dict):
        raise RecordError(f"{shown(path)} holds {type(found).__name__}, not an object; {RECORD_FORM}")
    from specgen.spec.tracking import uri_problem

    for key in ("uri", "run_id"):
        value = found.get(key)
        if not isinstance(value, str) or not value.strip():
            got = "has no" if key not in found else f"has {json.dumps(value)[:40]} as"
            raise RecordError(f"{shown(path)} {got} {key!r}, a non-empty string; {RECORD_FORM}")
    problem = uri_problem(found["uri"])
    if problem is not None:
        raise RecordError(f"{shown(path)}: 'uri': {problem}")
    experiment = found.get("experiment", "")
    if not isinstance(experiment, str):
        raise RecordError(f"{shown(path)} has {json.dumps(experiment)[:40]} as 'experiment', a string; {RECORD_FORM}")
    return Record(found["uri"], experiment, found["run_id"])


def shown_uri(uri: str) -> str:
    """A URI as messages print it: a password in it (https://user:secret@host) is never printed."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1***@", uri)
