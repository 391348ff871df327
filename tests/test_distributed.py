"""`specgen train` under tf.distribute: MirroredStrategy on two logical CPUs and two MultiWorkerMirroredStrategy
workers on loopback train to the same weights as one process with the same global batch; a killed worker
fails the run cleanly and `--resume` on every worker continues it to the same weights.

The reference is the one-process run (TensorFlow's own arithmetic on the whole batch). The spec has
accumulation, two optimizers (sgd with momentum and a cosine schedule, adam with weight decay), clipping
by global norm and EMA, and neither dropout nor batch norm (both differ per replica by design).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from port_helpers import reserved_ports

from specgen.runtime.parity import max_abs_diff

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SPEC = f"""\
specgen: 1
name: dist_mlp
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 16, activation: relu}}
  - {{name: out, op: dense, units: 10}}
collections: {{body: ["hidden/*"], head: ["out/*"]}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  body: {{variables: body, kind: sgd, momentum: 0.9, learning_rate: {{schedule: cosine_decay, initial: 0.05, decay_steps: 100}}}}
  head: {{variables: head, kind: adam, learning_rate: 0.003, weight_decay: 0.001}}
train:
  batch_size: 16
  accumulate: 2
  clip: {{global_norm: 1.0}}
  ema: {{decay: 0.9}}
  metrics: [accuracy]
  seed: 3
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
  eval: {{npz: {DIGITS}, features: {{image: x_test}}, labels: {{label: y_test}}}}
checkpoint: {{dir: run, every_steps: 5, keep: 2}}
"""
STEPS = 60  # every run: the one-process reference is shared
TOLERANCE = 1e-5  # max abs difference of every saved variable (weights, slots, EMA, counters)
# One thread each: two workers share this machine's cores.
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
       "PYTHONPATH": str(ROOT)}


def write_spec(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yaml").write_text(SPEC)
    return folder / "spec.yaml"


def command(spec: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "specgen", "train", str(spec), "--quiet", *args]


def workers(spec: Path, *args: str) -> list[subprocess.Popen[str]]:
    """Two `specgen train --strategy multi_worker` processes, TF_CONFIG on loopback (worker 0 is the chief). TF needs
    the ports up front and binds them only after its imports (seconds): ports of this xdist worker's own block
    outside the ephemeral range (port_helpers.reserved_ports), which no other socket can be handed meanwhile."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in reserved_ports(2)]}
    return [subprocess.Popen(command(spec, "--strategy", "multi_worker", *args), text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={**ENV, "TF_CONFIG": json.dumps(
                                 {"cluster": cluster, "task": {"type": "worker", "index": index}})})
            for index in range(2)]


def finish(processes: list[subprocess.Popen[str]]) -> list[tuple[int, str, str]]:
    """(exit status, stdout, stderr) of each process, once all have ended."""
    outputs = [p.communicate(timeout=300) for p in processes]
    return [(p.returncode, *output) for p, output in zip(processes, outputs, strict=True)]


def checkpoint_values(run: Path) -> dict[str, np.ndarray]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(run / (run / "latest").read_text().strip() / "variables"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def eval_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("eval at step"))


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, np.ndarray], str]:
    spec = write_spec(tmp_path_factory.mktemp("one"))
    result = subprocess.run(command(spec, "--steps", str(STEPS)), capture_output=True, text=True, env=ENV, timeout=300)
    assert result.returncode == 0, result.stderr
    return checkpoint_values(spec.parent / "run"), eval_line(result.stdout)


@pytest.mark.slow
def test_mirrored_on_two_logical_cpus_matches_one_process(
        tmp_path: Path, one_process: tuple[dict[str, np.ndarray], str]) -> None:
    spec = write_spec(tmp_path)
    result = subprocess.run(command(spec, "--steps", str(STEPS), "--strategy", "mirrored", "--set",
                                    "train.distribute.cpu_devices=2"), capture_output=True, text=True, env=ENV,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "mirrored: 2 replicas (2 device(s)); this process is worker 0 (chief)" in result.stdout
    expected, line = one_process
    actual = checkpoint_values(tmp_path / "run")
    assert sorted(actual) == sorted(expected)
    assert int(actual["global_step"]) == STEPS  # one global step, advanced once per update
    worst = max_abs_diff(expected, actual)
    assert worst <= TOLERANCE, f"mirrored differs from one process by {worst}"
    assert eval_line(result.stdout) == line  # the global eval accuracy, summed over replicas


@pytest.mark.slow
def test_two_workers_on_loopback_match_one_process(
        tmp_path: Path, one_process: tuple[dict[str, np.ndarray], str]) -> None:
    spec = write_spec(tmp_path)
    (chief_code, chief_out, chief_err), (code, out, err) = finish(workers(spec, "--steps", str(STEPS)))
    assert (chief_code, code) == (0, 0), chief_err + err
    assert "2 replicas (2 worker(s) x 1 device(s)); this process is worker 0 (chief)" in chief_out
    assert "this process is worker 1\n" in out
    assert f"checkpoint {tmp_path / 'run' / f'ckpt-{STEPS:08d}'} (written by the chief)" in out
    expected, line = one_process
    actual = checkpoint_values(tmp_path / "run")
    worst = max_abs_diff(expected, actual)
    assert worst <= TOLERANCE, f"two workers differ from one process by {worst}"
    assert eval_line(chief_out) == eval_line(out) == line
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoint", "ckpt-00000055", "ckpt-00000060",
                                                                     "code", "latest", "provenance.json",
                                                                     "spec.resolved.yaml", "tensorboard"]


def latest_step(run: Path) -> int:
    pointer = run / "latest"
    return int(pointer.read_text().strip().split("-")[1]) if pointer.is_file() else 0


@pytest.mark.slow
@pytest.mark.parametrize("victim", [0, 1], ids=["chief killed", "worker 1 killed"])
def test_killed_worker_fails_the_run_and_resume_matches_an_uninterrupted_run(
        tmp_path: Path, victim: int, one_process: tuple[dict[str, np.ndarray], str]) -> None:
    spec = write_spec(tmp_path / "killed")
    run = spec.parent / "run"
    processes = workers(spec, "--steps", str(STEPS))
    deadline = time.monotonic() + 240
    while latest_step(run) < 5 and all(p.poll() is None for p in processes) and time.monotonic() < deadline:
        time.sleep(0.01)
    processes[victim].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    survivor = processes[1 - victim]
    _, err = survivor.communicate(timeout=150)
    waited = time.monotonic() - killed_at
    processes[victim].wait()
    saved = latest_step(run)
    assert 5 <= saved < STEPS, f"the run was not killed mid-way (latest checkpoint at step {saved})"
    assert survivor.returncode == 1 and waited < 120, (survivor.returncode, waited)
    errors = [line for line in err.splitlines() if line.startswith("specgen:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith(f"specgen: error: worker {1 - victim} of 2 stopped: ")
    assert errors[0].endswith(f"the newest checkpoint is {run / f'ckpt-{saved:08d}'}. Relaunch every worker with --resume")
    # Nothing half-written under a checkpoint's name: a save that the kill cut short left only a `.*.tmp`
    # (removed, and named, by the relaunched chief).
    assert all((p / "meta.json").is_file() for p in run.glob("ckpt-*"))

    results = finish(workers(spec, "--resume", "--steps", str(STEPS - saved)))
    assert [code for code, _, _ in results] == [0, 0], [e for _, _, e in results]
    assert all(f"resumed from {run / f'ckpt-{saved:08d}'} at step {saved}" in out for _, out, _ in results)
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]
    expected, actual = one_process[0], checkpoint_values(run)
    assert int(actual["global_step"]) == STEPS
    worst = max_abs_diff(expected, actual)
    assert worst <= TOLERANCE, f"the resumed two-worker run differs from an uninterrupted one by {worst}"


def test_a_global_batch_that_does_not_divide_is_refused_at_the_spec(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    result = subprocess.run(command(spec, "--steps", "1", "--strategy", "mirrored", "--set",
                                    "train.distribute.cpu_devices=3"), capture_output=True, text=True, env=ENV,
                            timeout=300)
    assert result.returncode == 1
    assert f"{spec}:15:15: error: train.batch_size 16 is the global batch and must split evenly among the 3 replicas " \
           "of the mirrored strategy; use 15 or 18" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.slow
def test_sync_batch_norm_on_two_logical_cpus_matches_one_process(tmp_path: Path) -> None:
    """Synchronized moments are all-reduced (gradients through them too): the one-process statistics, whether
    asked for by the layer (`sync: true`, Keras' `synchronized=True`) or for every batch norm of the spec."""
    text = SPEC.replace("  - {name: hidden, op: dense, units: 16, activation: relu}\n",
                        "  - {name: hidden, op: dense, units: 16}\n  - {name: bn, op: batch_norm, momentum: 0.9}\n"
                        "  - {name: act, op: relu}\n").replace('body: ["hidden/*"]', 'body: ["hidden/*", "bn/gamma", "bn/beta"]')
    runs = {}
    cases = {"one process": (text, "default", []),
             "layer sync": (text.replace("momentum: 0.9}", "momentum: 0.9, sync: true}"), "mirrored", []),
             "spec-wide sync": (text, "mirrored", ["--set", "train.distribute.sync_batch_norm=true"])}
    for case, (spec_text, strategy, extra) in cases.items():
        folder = tmp_path / case.replace(" ", "_")
        folder.mkdir()
        (folder / "spec.yaml").write_text(spec_text)
        result = subprocess.run(command(folder / "spec.yaml", "--steps", "10", "--strategy", strategy, "--set",
                                        "train.distribute.cpu_devices=2", *extra),
                                capture_output=True, text=True, env=ENV, timeout=300)
        assert result.returncode == 0, result.stderr
        runs[case] = checkpoint_values(folder / "run")
    assert "bn/moving_variance" in runs["layer sync"]
    for case in ("layer sync", "spec-wide sync"):
        worst = max_abs_diff(runs["one process"], runs[case])
        assert worst <= TOLERANCE, f"{case}: synchronized batch norm differs from one process by {worst}"


PRUNE = """prune:
  variables: ["hidden/kernel", "out/kernel"]
  schedule: {kind: polynomial_decay, initial_sparsity: 0.0, final_sparsity: 0.6, begin_step: 4, end_step: 24, frequency: 4}
"""


@pytest.mark.slow
@pytest.mark.parametrize("case", ["pruning masks", "target network"])
def test_state_of_earlier_issues_is_mirrored_too(tmp_path: Path, case: str) -> None:
    """Pruning masks (recomputed every 4 updates) and chain_dqn's target network train as in one process."""
    if case == "pruning masks":
        spec, steps = write_spec(tmp_path), "30"
        spec.write_text(SPEC.replace("checkpoint:", PRUNE + "checkpoint:"))
    else:
        spec, steps = ROOT / "examples" / "specs" / "chain_dqn.yaml", "20"
    runs = {}
    for strategy in ("default", "mirrored"):
        run = tmp_path / f"run-{strategy}"
        result = subprocess.run(command(spec, "--steps", steps, "--strategy", strategy, "--set", f"checkpoint.dir={run}",
                                        "--set", "train.distribute.cpu_devices=2"),
                                capture_output=True, text=True, env=ENV, timeout=300)
        assert result.returncode == 0, result.stderr
        runs[strategy] = checkpoint_values(run)
    if case == "pruning masks":  # 60% of each kernel pruned from step 24 on, on every replica alike
        mask = runs["mirrored"]["pruning/hidden/kernel"]
        assert abs(float(np.mean(mask == 0)) - 0.6) < 0.01
        assert np.all(runs["mirrored"]["hidden/kernel"][mask == 0] == 0)
    else:
        assert "target_qnet/hidden/kernel" in runs["mirrored"]
    worst = max_abs_diff(runs["default"], runs["mirrored"])
    assert worst <= TOLERANCE, f"{case}: mirrored differs from one process by {worst}"
