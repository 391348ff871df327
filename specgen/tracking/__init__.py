"""Experiment tracking besides TensorBoard (docs/tracking.md): MLflow, when `train.tracking.mlflow` or `--track` asks.

The training loop calls `Tracker.scalars` where it writes TensorBoard scalars and `finish` when it stops; `start`
opens the MLflow run (or a tracker that does nothing, which costs no import). MLflow is imported only then: specgen
validate and build never import it, and a run without tracking neither. A tracker that fails (down, refusing,
full) warns once on stderr and is off for the rest of the command: checkpoints, TensorBoard and the run folder never
depend on it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from specgen.diagnostics import Diagnostic, SpecError
from specgen.spec.tracking import uri_problem
from specgen.tracking.base import RUN_FILE, Target, Tracker, shown_uri

if TYPE_CHECKING:
    from specgen.spec.load import LoadedSpec

DEFAULT_ALIAS = "candidate"  # docs/tracking.md: a new export is a candidate; promoting it is a person's decision
TRACKERS = ("mlflow",)
__all__ = ["RUN_FILE", "Target", "Tracker", "shown_uri"]  # with the functions below: what the commands use


def parse_track(text: str) -> str:
    """`--track mlflow:URI` -> URI, or one line naming the flag."""
    name, colon, uri = text.partition(":")
    if not colon or name not in TRACKERS:
        raise _flag_error(text, f"expected TRACKER:URI with a tracker of {', '.join(TRACKERS)} "
                                "(e.g. --track mlflow:http://localhost:5000 or --track mlflow:sqlite:///mlflow.db)")
    problem = uri_problem(uri) if uri else "the URI is empty"
    if problem is not None:
        raise _flag_error(text, problem)
    return uri


def _flag_error(text: str, message: str) -> SpecError:
    return SpecError([Diagnostic(f"--track {text}", None, message)])


def target(loaded: LoadedSpec, track: str | None) -> Target | None:
    """The spec's `train.tracking.mlflow` with `--track`'s URI in place of its own; None when neither asks."""
    train = loaded.spec.train
    configured = train.tracking.mlflow if train is not None and train.tracking is not None else None
    if track is None and configured is None:
        return None
    experiment = configured.experiment if configured is not None and configured.experiment else loaded.spec.name
    return Target(track if track is not None else configured.uri if configured else "", experiment)


def check_target(loaded: LoadedSpec, track: str | None) -> None:
    """Refuse, before any training, a tracking store that MLflow would refuse at once whatever happens: its file
    store (`file:`), read-only since MLflow 3 unless MLFLOW_ALLOW_FILE_STORE=true is set."""
    where = target(loaded, track)
    if where is None or not where.uri.lower().startswith("file:") or \
            os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() in ("true", "1"):
        return
    message = ("MLflow 3 keeps its file store (file:) read-only unless MLFLOW_ALLOW_FILE_STORE=true is set; "
               "use sqlite:///PATH (a local database) or an `mlflow server`")
    if track is not None:
        raise _flag_error(f"mlflow:{track}", message)
    raise SpecError([loaded.diagnostic(("train", "tracking", "mlflow", "uri"), message)])


def start(loaded: LoadedSpec, track: str | None, folder: Path, overrides: list[str], resumed: bool,
          chief: bool) -> Tracker:
    """The run's tracker: an MLflow run (new, or the one `folder` records when resumed), or one that does nothing
    (tracking not asked for, or a worker that is not the chief: only the chief logs, as only it writes the run
    folder)."""
    where = target(loaded, track)
    if where is None or not chief:
        return Tracker()
    from specgen.tracking.mlflow import open_run  # imports MLflow: only now

    return open_run(where, loaded, folder, overrides, resumed)


def run_folder_of(checkpoint: Path) -> Path | None:
    """The run folder of `export --checkpoint` (the run folder itself or one of its ckpt-* folders) when it records
    an MLflow run, else None. Only found here: its fields are checked where it is read (base.read_record), so a
    damaged one (not JSON, a field missing, a folder) is one line naming it, not a run that seems untracked."""
    for folder in (checkpoint, checkpoint.parent):
        if (folder / RUN_FILE).exists():
            return folder
    return None


def check_alias(alias: str) -> None:
    """MLflow's rules for an alias (mlflow/utils/validation.py), checked before the export's work: letters,
    digits, `_` and `-`; `latest` and `v<digits>` are reserved (they name versions)."""
    if not re.fullmatch(r"[\w\-]{1,255}", alias):
        problem = "an alias has 1 to 255 letters, digits, '_' or '-'"
    elif alias.lower() == "latest" or re.fullmatch(r"[vV]\d+", alias):
        problem = "MLflow reserves 'latest' and 'v<number>' (they name versions); pick another, e.g. 'candidate'"
    else:
        return
    raise SpecError([Diagnostic(f"--alias {alias}", None, problem)])


def check_model_name(name: str) -> None:
    """MLflow's rules for a registered model's name: not empty, no '/' or ':', no control characters."""
    if not name.strip() or any(c in name for c in "/:") or re.search(r"[\x00-\x1f\x7f]", name) or name in (".", ".."):
        raise SpecError([Diagnostic(f"--register {name}", None, "a registered model's name is not empty and has no "
                                    "'/', ':' or control characters (MLflow's rule)")])
