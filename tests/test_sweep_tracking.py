"""`specgen sweep --track mlflow:URI` end to end: real trials (`specgen train` processes), a real Optuna study, a real
MLflow store read back with MLflow's own client; never a mock.

- two trials at once into a new SQLite store: the sweep makes (migrates) the store and the experiment once, before
  any trial starts, so both trials are MLflow runs and nothing warns (they used to race MLflow's migrations);
- a tracker that is down: the sweep warns once, and each trial's own warning, which used to stay in its log, is
  printed by the sweep and noted in the summary.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("optuna")
pytest.importorskip("mlflow")
pytestmark = pytest.mark.slow

from mlflow import MlflowClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SPEC = f"""\
specgen: 1
name: tracked_sweep
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 16, activation: relu}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: adam, learning_rate: 0.003}}
train: {{batch_size: 256, epochs: 1, metrics: [accuracy], seed: 1}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
  eval: {{npz: {DIGITS}, features: {{image: x_test}}, labels: {{label: y_test}}}}
sweep:
  metric: eval/accuracy
  direction: maximize
  trials: 2
  sampler: grid
  space:
    layers[hidden].units: {{choice: [8, 16]}}
"""


def sweep(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # as a user runs it: MLflow's settings are specgen's defaults
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and k != "TF_CPP_MIN_LOG_LEVEL"}
    (cwd / "spec.yaml").write_text(SPEC)
    return subprocess.run([sys.executable, "-m", "specgen", "sweep", "spec.yaml", "-o", "out", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def test_parallel_trials_into_a_new_sqlite_store_are_both_tracked(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'ml.db'}"
    result = sweep(tmp_path, "--parallel", "2", "--track", f"mlflow:{store}")
    assert (result.returncode, result.stderr) == (0, ""), result.stdout + result.stderr
    for n in (0, 1):
        assert "warning" not in (tmp_path / "out" / f"trial-{n:04d}.log").read_text()
    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("tracked_sweep")
    assert experiment is not None and experiment.artifact_location == (tmp_path / "mlartifacts").as_uri()
    runs = client.search_runs([experiment.experiment_id])
    found = sorted((r.info.run_name, r.info.status, r.data.params["layers.hidden.units"]) for r in runs)
    trials = {f"trial-{n:04d}": line.split("=")[-1] for n, line in
              ((int(x.split()[1]), x) for x in result.stdout.splitlines() if " started: " in x)}
    assert found == sorted((name, "FINISHED", units) for name, units in trials.items())
    assert sorted(units for _, _, units in found) == ["16", "8"]
    assert "not tracked" not in (tmp_path / "out" / "summary.txt").read_text()


def test_a_tracker_that_is_down_shows_in_the_sweeps_output_and_summary(tmp_path: Path) -> None:
    # Bound but not listening, for the whole test: a connection is refused, and no other test's server can take
    # the port meanwhile (a closed port was taken once under `-n 3`, and the trial reached that server instead).
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{held.getsockname()[1]}"
        result = sweep(tmp_path, "--trials", "1", "--track", f"mlflow:{dead}")
    assert result.returncode == 0, result.stdout + result.stderr
    failed = f"MLflow tracking at {dead} failed ([Errno 111] Connection refused)"
    assert result.stderr.splitlines() == [f"specgen sweep: warning: {failed}; the trials try it again, each on its own"]
    assert f"trial 0 warning: {failed}; it went on without it (log: out/trial-0000.log)" in result.stdout.splitlines()
    summary = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert summary[2].rstrip().endswith("not tracked: MLflow failed"), summary
    assert "not tracked in MLflow: trial(s) 0 (the tracker failed; see each trial's log)" in summary
    assert summary[4] == "1 trial(s): 1 finished"
