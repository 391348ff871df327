"""MLflow tracking end to end (docs/tracking.md): real `specgen train` and `specgen export` processes, a real
tracking store, read back with MLflow's own MlflowClient; never a mock.

- a local SQLite store named by the spec's `train.tracking.mlflow`: params (exact values), every TensorBoard scalar
  as a metric at its step (the same numbers as the run's event files), `--resume` continuing the same MLflow run;
- a real `mlflow server` (REST) named by `--track` (a SQLite store where full mlflow is missing): metrics, the
  export's artifacts (model.onnx byte for byte, export.json, the HTML report) and a registered version's alias;
- a tracker that is down: the run exits 0 with exactly one warning line, its checkpoints and TensorBoard intact;
- bad input (an unknown key, a bad `--track`, a reserved alias): one positioned line, exit 1, nothing trained.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from port_helpers import reserved_ports

pytest.importorskip("mlflow")
pytestmark = pytest.mark.slow

from mlflow import MlflowClient  # noqa: E402

from specgen.pictures.events import FileReading, Scalars, read_scalars  # noqa: E402
from specgen.spec.tracking import SQLITE_FORM  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SPEC = f"""\
specgen: 1
name: tracked_mlp
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 16, activation: relu}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: adam, learning_rate: 0.003}}
train:
  batch_size: 64
  metrics: [accuracy]
  seed: 1
@TRACKING@data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
  eval: {{npz: {DIGITS}, features: {{image: x_test}}, labels: {{label: y_test}}}}
"""


def write_spec(folder: Path, tracking: str = "") -> Path:
    spec = folder / "spec.yaml"
    spec.write_text(SPEC.replace("@TRACKING@", tracking))
    return spec


def specgen(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    # as a user runs it: MLflow's settings are specgen's defaults, TensorFlow's start-up lines filtered (native_logs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run([sys.executable, "-m", "specgen", *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def dead() -> Iterator[str]:
    """A URL where nothing listens, for the test's whole run: its port is held by a socket bound but not listening,
    so a connection is refused, and nothing else can take the port meanwhile (a closed one could be reused)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"


class Server:
    """`mlflow server` started at once and waited for only when a test needs it. Its port is chosen in advance and
    bound seconds later (after MLflow's imports), so it is one of this xdist worker's own ports outside the ephemeral
    range (port_helpers.reserved_ports): no other test's socket can be handed it meanwhile."""

    def __init__(self, folder: Path):
        [self.port] = reserved_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (folder / "server.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
             "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1"], cwd=folder, stdout=self.log, stderr=subprocess.STDOUT)

    def ready(self) -> str:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "mlflow server exited; see server.log"
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self.url
            except OSError:
                time.sleep(0.3)
        raise AssertionError("mlflow server did not answer /health in 90 s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server | None]:
    if importlib.util.find_spec("flask") is None:  # mlflow-skinny (the tracking extra) has no `mlflow server`
        yield None
        return
    started = Server(tmp_path_factory.mktemp("mlflow-server"))
    yield started
    started.stop()


def tensorboard_scalars(run: Path) -> dict[str, dict[int, float]]:
    """`train/loss` -> {step: value}, read from the run folder's event files as `specgen curves` reads them."""
    found: dict[str, dict[int, float]] = {}
    for stage in ("train", "eval"):
        scalars = Scalars()
        for path in sorted((run / "tensorboard" / stage).glob("events.out.tfevents.*")):
            list(read_scalars(path, scalars, FileReading(path)))
        found |= {f"{stage}/{tag}": points for tag, points in scalars.points.items()}
    return found


def logged_metrics(client: MlflowClient, run_id: str) -> dict[str, dict[int, float]]:
    keys = client.get_run(run_id).data.metrics
    return {key: {m.step: m.value for m in client.get_metric_history(run_id, key)} for key in keys}


def check_export(client: MlflowClient, run_id: str, name: str, alias: str) -> None:
    listed = sorted(a.path for a in client.list_artifacts(run_id, "export"))
    assert listed == ["export/export.json", "export/model.onnx", "export/report.html"]
    version = client.get_model_version_by_alias(name, alias)
    assert (str(version.version), version.run_id, version.aliases) == ("1", run_id, [alias])
    assert version.source.endswith("/export")


def test_sqlite_store_params_metrics_resume(tmp_path: Path, server: Server | None) -> None:
    """`server` is asked for only to start it booting while this test trains."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = write_spec(tmp_path, f"  tracking:\n    mlflow: {{uri: '{uri}', experiment: digits}}\n")
    first = specgen("train", spec, "--epochs", "1", "--quiet", "--set", "checkpoint.dir=run", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    record = json.loads((tmp_path / "run" / "mlflow.json").read_text())
    assert (record["uri"], record["experiment"]) == (uri, "digits")
    assert f"tracking: MLflow run {record['run_id']} in experiment 'digits' at {uri}" in first.stdout
    again = specgen("train", spec, "--resume", "--epochs", "1", "--quiet", "--set", "checkpoint.dir=run",
                    "--set", "optimizers.all.learning_rate=0.001", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "run" / "mlflow.json").read_text())["run_id"] == record["run_id"]  # the same run
    client = MlflowClient(uri)
    run = client.get_run(record["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    params = run.data.params
    assert {k: params[k] for k in ("train.batch_size", "optimizers.all.learning_rate", "layers.hidden.units",
                                   "inputs.image.shape", "train.seed", "checkpoint.dir", "name")} == {
        "train.batch_size": "64", "optimizers.all.learning_rate": "0.003", "layers.hidden.units": "16",
        "inputs.image.shape": "[8, 8, 1]", "train.seed": "1", "checkpoint.dir": "run", "name": "tracked_mlp"}
    assert not any(k.startswith("train.tracking") for k in params)  # where it is logged is no param (nor a password)
    assert run.data.tags["specgen.resumed.optimizers.all.learning_rate"] == "0.001"  # MLflow params never change
    board = tensorboard_scalars(tmp_path / "run")
    assert board["eval/accuracy"].keys() == {22, 44} and board["train/loss"].keys() == {20, 22, 40, 44}
    assert logged_metrics(client, record["run_id"]) == board  # every scalar, same steps, same float32 values
    assert [a.path for a in client.list_artifacts(record["run_id"])] == ["spec.resolved.yaml"]
    assert (tmp_path / "mlartifacts").is_dir() and not (tmp_path / "mlruns").exists()  # beside the database


def test_server_over_rest_export_and_register(tmp_path: Path, server: Server | None) -> None:
    """Through a real `mlflow server` (HTTP, proxied artifacts); where full mlflow is missing (mlflow-skinny has no
    server), the same checks on a local SQLite store, so the export and the registry are tested either way."""
    spec = write_spec(tmp_path)
    url = server.ready() if server is not None else f"sqlite:///{tmp_path / 'mlflow.db'}"
    trained = specgen("train", spec, "--epochs", "1", "--quiet", "--track", f"mlflow:{url}", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    run_id = json.loads((tmp_path / "runs" / "tracked_mlp" / "mlflow.json").read_text())["run_id"]
    shown = f"{url}/#/experiments/1/runs/{run_id}" if server is not None else url
    assert f"tracking: MLflow run {run_id} in experiment 'tracked_mlp' at {shown}\n" in trained.stdout
    client = MlflowClient(url)
    assert client.get_experiment_by_name("tracked_mlp").experiment_id == "1"  # the experiment: the spec's name
    assert logged_metrics(client, run_id) == tensorboard_scalars(tmp_path / "runs" / "tracked_mlp")
    assert client.get_run(run_id).data.params["optimizers.all.learning_rate"] == "0.003"
    exported = specgen("export", spec, "--checkpoint", "runs/tracked_mlp/ckpt-00000022", "-o", "out",
                       "--register", "digits", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert "registered digits version 1 with alias 'candidate'\n" in exported.stdout
    check_export(client, run_id, "digits", "candidate")
    local = client.download_artifacts(run_id, "export/model.onnx", str(tmp_path / "downloaded"))
    assert Path(local).read_bytes() == (tmp_path / "out" / "model.onnx").read_bytes()
    page = Path(client.download_artifacts(run_id, "export/report.html", str(tmp_path / "downloaded"))).read_text()
    assert "<title>tracked_mlp: specgen report</title>" in page and 'id="curves"' in page


def test_tracker_down_warns_once_and_trains(tmp_path: Path, dead: str) -> None:
    spec = write_spec(tmp_path)
    started = time.monotonic()
    result = specgen("train", spec, "--epochs", "1", "--quiet", "--track", f"mlflow:{dead}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 60  # MLflow's own retries would take about 4 minutes
    assert result.stderr.splitlines() == [f"specgen train: warning: MLflow tracking at {dead} failed ([Errno 111] "
                                          "Connection refused); going on without it"]
    run = tmp_path / "runs" / "tracked_mlp"
    assert (run / "ckpt-00000022").is_dir() and tensorboard_scalars(run)["eval/accuracy"].keys() == {22}
    assert not (run / "mlflow.json").exists()
    refused = specgen("export", spec, "--checkpoint", "runs/tracked_mlp", "-o", "out", "--register", "m", cwd=tmp_path)
    assert (refused.returncode, refused.stderr.splitlines()) == (1, [
        "--register m: error: runs/tracked_mlp has no mlflow.json: only a run trained with MLflow tracking (--track "
        "mlflow:URI or train.tracking.mlflow) can be registered", "1 error found"])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("tracking", "args", "line"), [
    ("  tracking:\n    mlflow: {uri: 'sqlite:///x.db', experimnt: e}\n", ["train"],
     "spec.yaml:17:37: error: unknown key 'experimnt'; did you mean 'experiment'?"),
    ("  tracking:\n    mlflow: {uri: 'htp://host:5000'}\n", ["train"],
     "spec.yaml:17:19: error: uri: unknown scheme 'htp:'; did you mean 'http'?; expected http(s)://HOST:PORT (an "
     "`mlflow server`), sqlite:///PATH, postgresql://..., mysql://..., file:PATH or databricks"),
    ("", ["train", "--track", "http://host:5000"],
     "--track http://host:5000: error: expected TRACKER:URI with a tracker of mlflow (e.g. --track "
     "mlflow:http://localhost:5000 or --track mlflow:sqlite:///mlflow.db)"),
    ("", ["train", "--track", "mlflow:"], "--track mlflow:: error: the URI is empty"),
    # SQLAlchemy opens these as an in-memory database: the run was "tracked" and gone at exit, artifacts one folder up
    ("", ["train", "--track", "mlflow:sqlite:///"],
     "--track mlflow:sqlite:///: error: got 'sqlite:///', an in-memory database, which is lost when specgen exits (the "
     "run and its metrics with it); expected " + SQLITE_FORM),
    ("  tracking:\n    mlflow: {uri: 'sqlite:///%3Amemory%3A'}\n", ["validate"],  # SQLAlchemy decodes it to :memory:
     "spec.yaml:17:19: error: uri: got 'sqlite:///%3Amemory%3A', an in-memory database, which is lost when specgen "
     "exits (the run and its metrics with it); expected " + SQLITE_FORM),
    ("  tracking:\n    mlflow: {uri: 'sqlite:///:memory:'}\n", ["validate"],
     "spec.yaml:17:19: error: uri: got 'sqlite:///:memory:', an in-memory database, which is lost when specgen exits "
     "(the run and its metrics with it); expected " + SQLITE_FORM),
    ("  tracking:\n    mlflow: {uri: 'sqlite://relative.db'}\n", ["train"],  # was a warning once training started
     "spec.yaml:17:19: error: uri: got 'sqlite://relative.db', which names a host (SQLite has none); expected "
     + SQLITE_FORM),
    ("  tracking:\n    mlflow: {uri: 'file:./mlruns'}\n", ["train"],
     "spec.yaml:17:19: error: MLflow 3 keeps its file store (file:) read-only unless MLFLOW_ALLOW_FILE_STORE=true is "
     "set; use sqlite:///PATH (a local database) or an `mlflow server`"),
    ("", ["export", "--checkpoint", "runs/x", "-o", "out", "--register", "m", "--alias", "v2"],
     "--alias v2: error: MLflow reserves 'latest' and 'v<number>' (they name versions); pick another, e.g. 'candidate'"),
])
def test_bad_input_is_one_line_before_training(tmp_path: Path, tracking: str, args: list[str], line: str) -> None:
    spec = write_spec(tmp_path, tracking)
    result = specgen(args[0], spec.name, *args[1:], cwd=tmp_path)
    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (1, [line, "1 error found"], "")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()


def test_track_with_emit_tfjob_is_a_usage_error(tmp_path: Path) -> None:
    """The manifest's workers run `specgen train SPEC`, which takes no --track: a command-line mistake, exit 2."""
    spec = write_spec(tmp_path, "")
    result = specgen("train", spec.name, "--emit", "tfjob", "--image", "x", "--track", "mlflow:http://h:1", cwd=tmp_path)
    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (2, [
        "specgen train: error: --track mlflow:http://h:1: --emit tfjob writes the workers' command, which takes no "
        "--track: put train.tracking.mlflow in the spec (docs/tracking.md)"], "")
    assert not (tmp_path / "runs").exists()


def test_alias_without_register_is_a_usage_error(tmp_path: Path) -> None:
    """A command-line mistake: exit 2 as argparse's own (docs/cli.md), before the spec is read."""
    spec = write_spec(tmp_path, "")
    result = specgen("export", spec.name, "-o", "out", "--alias", "prod", cwd=tmp_path)
    assert (result.returncode, result.stderr.splitlines(), result.stdout) == (2, [
        "specgen export: error: --alias prod: --alias names the alias of --register's version; expected --register "
        "NAME with it"], "")
    assert not (tmp_path / "out").exists()


def test_validate_imports_no_mlflow(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "  tracking:\n    mlflow: {uri: 'http://localhost:5000'}\n")
    code = ("import sys; from specgen.cli import main; code = main(['validate', sys.argv[1]]); "
            "assert 'mlflow' not in sys.modules, 'validate imported mlflow'; sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", code, str(spec)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_params_keep_mlflow_limits_and_hide_passwords(tmp_path: Path) -> None:
    from specgen.tracking import shown_uri
    from specgen.tracking.params import mlflow_key, resolved_params, text

    spec = write_spec(tmp_path, "  tracking:\n    mlflow: {uri: 'https://me:secret@host'}\n")
    params = resolved_params(spec, ["layers[hidden].units=24"])
    assert params["layers.hidden.units"] == "24" and params["layers.out.use_bias"] == "true"
    assert params["train.metrics"] == "[accuracy]" and params["inputs.image.shape"] == "[8, 8, 1]"
    cut = text(list(range(2000)))  # longer than MLflow's 6000 characters as YAML
    assert len(cut) == 6000 and cut.endswith(" ... (cut from 10890 characters: spec.resolved.yaml has it whole)")
    assert not any("tracking" in key or "secret" in value for key, value in params.items())
    long = mlflow_key("a." * 200)
    assert len(long) == 250 and long != mlflow_key("a." * 201)  # cut, with a digest: two long keys never meet
    assert mlflow_key("layers[head/fc].kernel_init.kind") == "layers.head/fc.kernel_init.kind"
    assert shown_uri("https://me:secret@host:5000/x") == "https://***@host:5000/x"


class Recorded:
    """An MlflowClient whose method calls are listed by name (every request to the tracker is one), then made."""

    def __init__(self, client: object):
        self.client = client
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> object:
        method = getattr(self.client, name)

        def call(*args: object, **kwargs: object) -> object:
            self.calls.append(name)
            return method(*args, **kwargs)
        return call


def test_tracker_lost_mid_run_warns_once(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                         dead: str) -> None:
    """A tracker that goes away after the run started: the first failed write warns, later ones cost nothing."""
    from specgen.tracking import Target
    from specgen.tracking.mlflow import HTTP_DEFAULTS, MlflowRun, client

    for name, value in HTTP_DEFAULTS.items():  # specgen's settings, undone after the test (client() sets them)
        monkeypatch.setenv(name, value)
    run = MlflowRun(Target(dead, "e"), "train")
    recorded = Recorded(client(dead))
    run.client, run.run_id = recorded, "0" * 32  # as after a start whose server has since gone away
    run.scalars("train", 20, {"loss": 1.5})
    assert run.dead and recorded.calls == ["log_batch"]
    # "cost nothing" as no request at all once the run is dead, not as a wall-clock bound that any pause of this
    # process also fails (each request would cost MLflow's retries again: seconds)
    run.scalars("eval", 22, {"accuracy": 0.5})
    run.finish("FINISHED")
    assert recorded.calls == ["log_batch"]
    assert capsys.readouterr().err.splitlines() == [f"specgen train: warning: MLflow tracking at {dead} failed "
                                                    "([Errno 111] Connection refused); going on without it"]


def test_two_processes_opening_a_new_sqlite_store_at_once_both_succeed(tmp_path: Path) -> None:
    """Opening a new SQLite store runs MLflow's migrations; two processes doing it at the same moment broke each
    other (`duplicate column name`, `_alembic_tmp_... already exists`) and one went untracked. specgen's client()
    holds a lock on the database's folder while MLflow opens it. Two plain `specgen train` runs started together
    meet this; the processes here start MLflow's client at one instant, without TensorFlow's start to spread them."""
    uri = f"sqlite:///{tmp_path / 'ml.db'}"
    at = time.time() + 8  # both imported MLflow by then
    code = ("import sys, time; from specgen.tracking.mlflow import client, reason; import mlflow\n"
            "while time.time() < float(sys.argv[2]): time.sleep(0.005)\n"
            "try: client(sys.argv[1]).search_experiments(); print('ok')\n"
            "except Exception as exc: print(reason(exc))\n")
    processes = [subprocess.Popen([sys.executable, "-c", code, uri, str(at)], stdout=subprocess.PIPE, text=True)
                 for _ in range(2)]
    assert [p.communicate(timeout=120)[0] for p in processes] == ["ok\n", "ok\n"]
    assert [e.name for e in MlflowClient(uri).search_experiments()] == ["Default"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ml.db"]  # the lock added no file
