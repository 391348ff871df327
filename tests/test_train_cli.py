"""`specgen train` end to end: crash and resume, learning-rate overrides, data errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli_completed

from specgen.cli import main
from specgen.runtime.parity import max_abs_diff

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SPEC = f"""\
specgen: 1
name: crash_mlp
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 32, activation: relu}}
  - {{name: drop, op: dropout, rate: 0.2}}
  - {{name: out, op: dense, units: 10}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
optimizers:
  all: {{variables: ["*"], kind: adam, learning_rate: 0.003}}
train: {{batch_size: 16, accumulate: 2, ema: {{decay: 0.9}}, metrics: [accuracy], seed: 3}}
data:
  train: {{npz: {DIGITS}, features: {{image: x_train}}, labels: {{label: y_train}}}}
  eval: {{npz: {DIGITS}, features: {{image: x_test}}, labels: {{label: y_test}}}}
checkpoint: {{dir: run, every_steps: 4, keep: 2}}
"""
TOTAL = 40


def write_spec(folder: Path, text: str = SPEC) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "spec.yaml"
    spec.write_text(text)
    return spec


def specgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specgen", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


def checkpoint_values(run: Path) -> dict[str, np.ndarray]:
    import tensorflow as tf

    latest = run / (run / "latest").read_text().strip() / "variables"
    reader = tf.train.load_checkpoint(str(latest))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def scalar_tags(folder: Path) -> set[str]:
    """Tags of the scalars in a TensorBoard event folder (one writer per stage)."""
    import tensorflow as tf

    tags = set()
    for events in folder.glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            tags |= {value.tag for value in event.summary.value}
    return tags


def latest_step(run: Path) -> int:
    pointer = run / "latest"
    return int(pointer.read_text().strip().split("-")[1]) if pointer.is_file() else 0


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2], ids=["in-graph chunks", "accumulate 2"])
def test_sigkill_mid_run_then_resume_matches_an_uninterrupted_run(tmp_path: Path, accumulate: int) -> None:
    text = SPEC.replace("accumulate: 2", f"accumulate: {accumulate}")
    straight = write_spec(tmp_path / "straight", text)
    result = specgen("train", str(straight), "--steps", str(TOTAL), "--quiet")
    assert result.returncode == 0, result.stderr

    crashed = write_spec(tmp_path / "crashed", text)
    run = tmp_path / "crashed" / "run"
    process = subprocess.Popen([sys.executable, "-m", "specgen", "train", str(crashed), "--steps", str(TOTAL),
                                "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while latest_step(run) < 12 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    saved = latest_step(run)
    assert 12 <= saved < TOTAL, f"the run was not killed mid-way (latest checkpoint at step {saved})"

    resumed = specgen("train", str(crashed), "--resume", "--steps", str(TOTAL - saved), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {run / f'ckpt-{saved:08d}'} at step {saved}" in resumed.stdout

    assert len(list(run.glob("ckpt-*"))) == 2  # checkpoint.keep: 2
    assert scalar_tags(run / "tensorboard" / "train") >= {"loss", "accuracy"}
    assert scalar_tags(run / "tensorboard" / "eval") == {"accuracy"}
    expected, actual = checkpoint_values(tmp_path / "straight" / "run"), checkpoint_values(run)
    assert sorted(expected) == sorted(actual)
    assert int(actual["global_step"]) == TOTAL
    worst = max_abs_diff(expected, actual)  # not Python's max over keys: it drops a NaN that is not first
    assert worst <= 1e-6, f"resumed run differs by {worst}"


@pytest.mark.slow
def test_learning_rate_override_on_resume_is_used_and_saved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, SPEC.replace("accumulate: 2, ", ""))
    run = tmp_path / "run"
    assert run_cli_completed(["train", str(spec), "--steps", "4", "--quiet"], capsys, tmp_path).returncode == 0
    before = checkpoint_values(run)
    assert before["optimizers/all/learning_rate"] == np.float32(0.003)
    # A learning rate of 0 makes the next updates leave every weight exactly where it was.
    result = run_cli_completed(["train", str(spec), "--resume", "--steps", "2", "--quiet",
                                "--set", "optimizers.all.learning_rate=0"], capsys, tmp_path)
    assert result.returncode == 0, result.stderr
    after = checkpoint_values(run)
    assert after["optimizers/all/learning_rate"] == 0.0
    assert int(after["global_step"]) == 6
    for path in ("hidden/kernel", "hidden/bias", "out/kernel", "out/bias"):
        np.testing.assert_array_equal(after[path], before[path])
    assert not np.array_equal(after["optimizers/all/m/out/kernel"], before["optimizers/all/m/out/kernel"])
    # Without --set, the next resume keeps the rate the checkpoint holds.
    assert run_cli_completed(["train", str(spec), "--resume", "--steps", "1", "--quiet"], capsys, tmp_path).returncode == 0
    assert checkpoint_values(run)["optimizers/all/learning_rate"] == 0.0


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(args)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.err


def test_missing_array_is_named_before_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, SPEC.replace("image: x_train", "image: x_trian"))
    code, err = run_cli(["train", str(spec)], capsys)
    assert code == 1
    assert f"data.train ({DIGITS}): array 'x_trian' not found; did you mean 'x_train'?" in err
    assert err.startswith(f"{spec}:15:")
    assert not (tmp_path / "run").exists() or not (tmp_path / "run" / "latest").exists()


def test_wrong_shape_names_both_shapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path, SPEC.replace("shape: [8, 8, 1]", "shape: [64]").replace("  - {name: flat, op: flatten}\n", ""))
    code, err = run_cli(["train", str(spec)], capsys)
    assert code == 1
    assert "'image' has shape [N, 8, 8, 1] but the spec declares [N, 64]" in err


def test_bad_override_is_reported_against_the_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    code, err = run_cli(["train", str(spec), "--set", "train.batch_size=zero"], capsys)
    assert code == 1
    assert "--set train.batch_size=zero: error: batch_size: expected a positive integer or 'full', received 'zero' (str)" in err


def test_resume_needs_a_checkpoint_and_a_new_run_needs_an_empty_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write_spec(tmp_path)
    code, err = run_cli(["train", str(spec), "--resume", "--steps", "1"], capsys)
    assert code == 1 and "--resume: no checkpoint in this run folder" in err
    run = tmp_path / "run"
    (run / "ckpt-00000004").mkdir(parents=True)
    (run / "ckpt-00000004" / "meta.json").write_text('{"step": 4}')
    (run / "latest").write_text("ckpt-00000004\n")
    code, err = run_cli(["train", str(spec), "--steps", "1"], capsys)
    assert code == 1 and "already holds ckpt-00000004; pass --resume" in err


@pytest.mark.slow
def test_fine_tuning_restores_a_frozen_backbone_and_trains_the_head(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    source = write_spec(tmp_path / "source", SPEC.replace("accumulate: 2, ", ""))
    assert run_cli_completed(["train", str(source), "--steps", "4", "--quiet"], capsys, tmp_path).returncode == 0
    pretrained = checkpoint_values(tmp_path / "source" / "run")
    tuned_text = (SPEC.replace("accumulate: 2, ", "")
                  .replace('all: {variables: ["*"], kind: adam, learning_rate: 0.003}',
                           'head: {variables: ["out/*"], kind: adam, learning_rate: 0.003}')
                  .replace("checkpoint: {dir: run, every_steps: 4, keep: 2}",
                           "frozen: [\"hidden/*\"]\ncheckpoint:\n  dir: run\n  restore:\n"
                           f"    - {{from: {tmp_path / 'source' / 'run'}, exclude: [\"out/*\"]}}"))
    tuned = write_spec(tmp_path / "tuned", tuned_text)
    result = run_cli_completed(["train", str(tuned), "--steps", "3"], capsys, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "restore: restored 2, initialized 2, unused" in result.stdout
    assert "mismatched 0; initialized: out/kernel, out/bias\n" in result.stdout  # what starts fresh, by name
    after = checkpoint_values(tmp_path / "tuned" / "run")
    for path in ("hidden/kernel", "hidden/bias"):  # restored, frozen: bitwise the pretrained values
        np.testing.assert_array_equal(after[path], pretrained[path])
    assert not np.array_equal(after["out/kernel"], pretrained["out/kernel"])
    assert np.count_nonzero(after["out/kernel"]) > 0
