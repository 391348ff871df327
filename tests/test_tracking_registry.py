"""`specgen export --register` against real MLflow stores (docs/tracking.md, export and the model registry): real
`specgen train` / `specgen export` processes, a local SQLite store, read back with MLflow's own client.

- every export of a run gets an artifact folder of its own (`export/`, then `export-2/`, ...): a registered version
  keeps its files when the run is exported again (another precision);
- a damaged run-folder mlflow.json: one line naming it, exit 1, before anything is exported (a warning, and the
  export not logged, without --register);
- a store that refuses the registration (read-only SQLite): specgen's one line, complete, none of MLflow's logging.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("mlflow")
pytestmark = pytest.mark.slow

from mlflow import MlflowClient  # noqa: E402
from mlflow.artifacts import download_artifacts  # noqa: E402
from test_tracking_mlflow import specgen, write_spec  # noqa: E402

from specgen.tracking.export import artifact_folder  # noqa: E402

RUN = "runs/tracked_mlp"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """One tiny tracked run (the folder, its store's URI, its MLflow run id), trained once for the module."""
    folder = tmp_path_factory.mktemp("registry")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    result = specgen("train", write_spec(folder), "--epochs", "1", "--quiet", "--track", f"mlflow:{uri}", cwd=folder)
    assert result.returncode == 0, result.stderr
    return folder, uri, json.loads((folder / RUN / "mlflow.json").read_text())["run_id"]


def version_files(uri: str, name: str, version: str, into: Path) -> dict[str, bytes]:
    """What a registered version holds: the files at its source, as the registry gives them (not the run's)."""
    source = MlflowClient(uri).get_model_version_download_uri(name, version)
    found = Path(download_artifacts(artifact_uri=source, dst_path=str(into)))
    return {p.name: p.read_bytes() for p in sorted(found.iterdir())}


def test_each_export_has_its_own_folder_and_versions_never_change(trained: tuple[Path, str, str]) -> None:
    folder, uri, run_id = trained
    first = specgen("export", "spec.yaml", "--checkpoint", RUN, "-o", "v1", "--register", "shared", cwd=folder)
    assert first.returncode == 0, first.stderr
    assert (f"tracking: logged model.onnx, export.json, report.html under export/ of MLflow run {run_id} at {uri}\n"
            "registered shared version 1 with alias 'candidate'\n") in first.stdout
    held = version_files(uri, "shared", "1", folder / "before")
    second = specgen("export", "spec.yaml", "--checkpoint", RUN, "-o", "v2", "--precision", "int8", "--force",
                     "--register", "shared", cwd=folder)
    assert second.returncode == 0, second.stderr
    assert (f"tracking: logged model.onnx, export.json, model.int8.onnx, report.html under export-2/ of MLflow run "
            f"{run_id} at {uri}\nregistered shared version 2 with alias 'candidate'\n") in second.stdout
    client = MlflowClient(uri)
    artifacts = client.get_run(run_id).info.artifact_uri
    assert [client.get_model_version("shared", v).source for v in ("1", "2")] == [f"{artifacts}/export",
                                                                                   f"{artifacts}/export-2"]
    one = version_files(uri, "shared", "1", folder / "after1")
    assert one == held and sorted(one) == ["export.json", "model.onnx", "report.html"]  # untouched by the second
    assert one["export.json"] == (folder / "v1" / "export.json").read_bytes()
    assert json.loads(one["export.json"])["precision"] == {"precision": "fp32"}
    two = version_files(uri, "shared", "2", folder / "after2")
    assert sorted(two) == ["export.json", "model.int8.onnx", "model.onnx", "report.html"]
    assert two["model.int8.onnx"] == (folder / "v2" / "model.int8.onnx").read_bytes()
    assert json.loads(two["export.json"])["precision"]["precision"] == "int8"
    assert sorted(a.path for a in client.list_artifacts(run_id)) == ["export", "export-2", "spec.resolved.yaml"]


FORM = 'specgen train writes {"uri": URI, "experiment": NAME, "run_id": ID} there'


@pytest.mark.parametrize(("text", "problem"), [
    ('{"run_id": ', f" is not JSON (Expecting value: line 2 column 1 (char 12)); {FORM}"),
    ('{"run_id": "0123", "experiment": "e"}', f" has no 'uri', a non-empty string; {FORM}"),
    ('{"uri": "sqlite:///m.db", "run_id": 7}', f" has 7 as 'run_id', a non-empty string; {FORM}"),
    ('["sqlite:///m.db"]', f" holds list, not an object; {FORM}"),
    ('{"uri": "htp://h:5000", "run_id": "0123"}', ": 'uri': unknown scheme 'htp:'; did you mean 'http'?; expected "
     "http(s)://HOST:PORT (an `mlflow server`), sqlite:///PATH, postgresql://..., mysql://..., file:PATH or databricks"),
])
def test_register_with_a_damaged_mlflow_json_is_refused_first(tmp_path: Path, text: str, problem: str) -> None:
    spec = write_spec(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "mlflow.json").write_text(text + "\n")
    result = specgen("export", spec.name, "--checkpoint", "run/ckpt-00000022", "-o", "out", "--register", "m",
                     cwd=tmp_path)
    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (1, [
        f"--register m: error: the MLflow run to register is unknown: run/mlflow.json{problem}", "1 error found"], "")
    assert not (tmp_path / "out").exists()


def test_damaged_mlflow_json_without_register_warns_and_exports(trained: tuple[Path, str, str],
                                                                tmp_path: Path) -> None:
    folder, _, _ = trained
    shutil.copytree(folder / RUN, tmp_path / "run")
    (tmp_path / "run" / "mlflow.json").write_text("{}\n")
    result = specgen("export", write_spec(tmp_path).name, "--checkpoint", "run", "-o", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [f"specgen export: warning: run/mlflow.json has no 'uri', a non-empty "
                                          f"string; {FORM}; the export is not logged to MLflow"]
    assert (tmp_path / "out" / "model.onnx").is_file() and "tracking:" not in result.stdout


def test_read_only_store_is_one_complete_line(trained: tuple[Path, str, str], tmp_path: Path) -> None:
    """SQLite's own read-only mode (chmod does not stop root): the artifacts (files beside the store) are logged,
    the registration is refused; MLflow's ERROR logger (two tracebacks) stays quiet."""
    folder, stored, run_id = trained
    shutil.copy(folder / "mlflow.db", tmp_path / "mlflow.db")
    shutil.copytree(folder / RUN, tmp_path / "run")
    uri = f"sqlite:///file:{tmp_path / 'mlflow.db'}?mode=ro&uri=true"
    record = json.loads((tmp_path / "run" / "mlflow.json").read_text())
    (tmp_path / "run" / "mlflow.json").write_text(json.dumps(record | {"uri": uri}))
    taken = artifact_folder({a.path for a in MlflowClient(stored).list_artifacts(run_id)})  # others' exports
    result = specgen("export", write_spec(tmp_path).name, "--checkpoint", "run", "-o", "out", "--register", "m",
                     cwd=tmp_path)
    assert (result.returncode, result.stderr.splitlines()) == (1, [
        f"--register m: error: not registered at {uri} (MlflowException: (sqlite3.OperationalError) attempt to "
        "write a readonly database); the export in out is written", "1 error found"])
    assert f"report.html under {taken}/ of MLflow run {run_id} at {uri}\n" in result.stdout
    assert (tmp_path / "out" / "model.onnx").is_file()
