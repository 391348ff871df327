"""What `specgen export --checkpoint RUN` adds to RUN's MLflow run (docs/tracking.md).

The files of the export (model.onnx, a precision variant when made, export.json) and the HTML report of the spec
and run (`specgen report --html --run RUN`'s page: no TensorFlow; it needs matplotlib for the curves and is left
out, saying so, without it) go under an artifact folder of their own: `export/` for the run's first export,
`export-2/`, `export-3/`, ... for the next ones. `--register NAME` makes that folder a version of the registered
model NAME and points `--alias` (default `candidate`) at it: MLflow's aliases, not its deprecated stages.

A folder per export, because a registered version's source is a folder of the run's artifacts, and MLflow neither
copies nor locks it: when every export went to `export/`, a second export of the run (another precision, another
checkpoint) changed what version 1 held, and files of the first (`model.int8.onnx`) stayed beside the second's.
Numbered, not named by a content hash, so the first export keeps the `export/` folder that docs, tests and
pipelines already read. Two exports of one run at the same moment may pick the same number (MLflow has no
create-if-absent for artifacts); exports of one run are made one after another.

Logging the files is best effort (one warning when the tracker fails, the export stands); a registration that was
asked for and failed is an error, after the export was written.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from specgen.diagnostics import Diagnostic, SpecError
from specgen.paths import shown
from specgen.spec.load import LoadedSpec
from specgen.tracking.base import Record, Target, shown_uri
from specgen.tracking.mlflow import MlflowRun, client, reason

ARTIFACTS = "export"


@dataclass(frozen=True)
class Registration:
    name: str
    alias: str


def artifact_folder(taken: set[str]) -> str:
    """The export's own artifact folder: `export` for the run's first, then the first free `export-N` (N >= 2)."""
    if ARTIFACTS not in taken:
        return ARTIFACTS
    number = 2
    while f"{ARTIFACTS}-{number}" in taken:
        number += 1
    return f"{ARTIFACTS}-{number}"


def _free_folder(run: MlflowRun) -> str:
    """A folder no earlier export of the run used (MlflowRun.call: a failure is one warning)."""
    return artifact_folder({info.path for info in run.client.list_artifacts(run.run_id)})


def _log_artifact(run: MlflowRun, file: Path, folder: str) -> None:
    """One file into the export's folder (called through MlflowRun.call: a failure is one warning)."""
    run.client.log_artifact(run.run_id, str(file), folder)


def log_export(loaded: LoadedSpec, record: Record, out: Path, report: dict[str, Any],
               registration: Registration | None, report_page: Callable[[], str | None]) -> str | None:
    """Log the export in `out` to the MLflow run that `record` (the run folder's mlflow.json) names, in a folder of
    its own; register that folder when asked. The version registered (as text), or None. `report_page`: the HTML
    report's page (None where it cannot be made), asked for only while the tracker answers: the command makes it,
    from the IR it built."""
    target = Target(record.uri, record.experiment)
    run = MlflowRun(target, "export")
    run.client = run.call(lambda: client(target.uri))
    run.run_id = record.run_id
    folder = run.call(partial(_free_folder, run)) or ARTIFACTS
    files = [out / "model.onnx", out / "export.json"]
    variant = report.get("precision", {}).get("file")
    if isinstance(variant, str) and (out / variant).is_file():
        files.append(out / variant)
    for file in files:
        run.call(partial(_log_artifact, run, file, folder))
    page = report_page() if not run.dead else None
    if page is not None:
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "report.html"
            path.write_text(page, encoding="utf-8")
            run.call(partial(_log_artifact, run, path, folder))
    if not run.dead:
        print(f"tracking: logged {', '.join(f.name for f in files)}{', report.html' if page else ''} under {folder}/ "
              f"of MLflow run {run.run_id} at {shown_uri(target.uri)}")
    if registration is None:
        return None
    if run.dead:
        raise _not_registered(registration, target, out, "the tracker failed above")
    try:
        return _register(run, registration, loaded, report, folder)
    except Exception as exc:  # the export is written; the registration that was asked for is not
        raise _not_registered(registration, target, out, reason(exc)) from None


def _register(run: MlflowRun, registration: Registration, loaded: LoadedSpec, report: dict[str, Any],
              folder: str) -> str:
    from mlflow.exceptions import MlflowException

    mlflow = run.client
    try:
        mlflow.create_registered_model(registration.name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    source = f"{mlflow.get_run(run.run_id).info.artifact_uri}/{folder}"
    tags = {"specgen.spec": loaded.spec.name, "specgen.checkpoint": str(report.get("checkpoint")),
            "specgen.parity_max_abs_diff": str(report.get("parity_max_abs_diff"))}
    version = mlflow.create_model_version(registration.name, source, run_id=run.run_id, tags=tags)
    mlflow.set_registered_model_alias(registration.name, registration.alias, version.version)
    print(f"registered {registration.name} version {version.version} with alias {registration.alias!r}")
    return str(version.version)


def _not_registered(registration: Registration, target: Target, out: Path, why: str) -> SpecError:
    return SpecError([Diagnostic(f"--register {registration.name}", None, f"not registered at "
                                 f"{shown_uri(target.uri)} ({why}); the export in {shown(out)} is written")])
