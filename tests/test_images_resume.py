"""Exact resume on an image folder: `kill -9` mid-run, then `--resume`, ends with weights bitwise equal to an
uninterrupted run's, with augmentation (flip, padded crop, contrast, mixup) and dropout drawing on both sides of
the kill. The images source's position (the seeded file order, the next file, the decoded examples waiting in the
shuffle buffer) is saved with each checkpoint, and the augmentation draws count the batches that iterator gave."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_distributed import command, latest_step

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
# 112 images (8x8 PNG digits, 10 class folders), batches of 16: 7 updates an epoch, so the run crosses epochs
# on both sides of the kill; a buffer of 32 keeps decoded examples in the saved iterator.
SPEC = """\
specgen: 1
name: folder_resume
inputs: {image: {shape: [8, 8, 1]}}
outputs: {logits: out}
layers:
  - {name: scale, op: rescale, input: image, scale: 0.00392156862745098}
  - {name: flat, op: flatten}
  - {name: hidden, op: dense, units: 16, activation: relu}
  - {name: drop, op: dropout, rate: 0.2}
  - {name: out, op: dense, units: 10}
loss: {kind: sparse_softmax_cross_entropy, logits: logits, labels: label}
optimizers:
  all: {variables: ["*"], kind: adam, learning_rate: 0.003}
train: {batch_size: 16, seed: 7, shuffle_buffer: 32}
data:
  train:
    images: digits
    image_size: [8, 8]
    augment:
      - {random_flip: horizontal}
      - {random_crop: {size: [8, 8], pad: 1}}
      - {random_contrast: 0.2}
      - {mixup: 0.2}
checkpoint: {dir: run, every_steps: 3, keep: 2}
"""
EXAMPLES = 112
TOTAL = 21  # three epochs; the kill lands after the first checkpoint (step 3), up to 18 updates before the end


def write_spec(folder: Path) -> Path:
    """The first EXAMPLES training digits as grayscale PNG files in one folder per class, and the spec."""
    digits = np.load(DIGITS)
    pixels = np.round(digits["x_train"][:EXAMPLES, ..., 0] * 255).astype(np.uint8)
    for n, (image, label) in enumerate(zip(pixels, digits["y_train"][:EXAMPLES], strict=True)):
        (folder / "digits" / str(int(label))).mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(folder / "digits" / str(int(label)) / f"{n:04d}.png")
    (folder / "spec.yaml").write_text(SPEC)
    return folder / "spec.yaml"


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}


def saved_variables(run: Path) -> dict[str, bytes]:
    """The final checkpoint's variables files: SaveV2 writes each tensor's bytes in name order into the data file
    and its name, shape, offset and checksum into the index, so equal files are bitwise equal variables."""
    return {p.name: p.read_bytes() for p in sorted((run / f"ckpt-{TOTAL:08d}").glob("variables.*"))}


def assert_same_variables(expected: Path, actual: Path) -> None:
    """Bitwise equal variables; on a difference, TensorFlow reads them to name the variables that differ."""
    if saved_variables(expected) == saved_variables(actual):  # the usual case needs no TensorFlow import here
        return
    import tensorflow as tf

    want, got = (tf.train.load_checkpoint(str(run / f"ckpt-{TOTAL:08d}" / "variables")) for run in (expected, actual))
    assert sorted(want.get_variable_to_shape_map()) == sorted(got.get_variable_to_shape_map())
    for name in want.get_variable_to_shape_map():
        np.testing.assert_array_equal(got.get_tensor(name), want.get_tensor(name), err_msg=name)
    raise AssertionError(f"{actual} and {expected}: the variables files differ, their tensors do not")


@pytest.mark.slow
def test_sigkill_on_an_image_folder_then_resume_is_bitwise_an_uninterrupted_run(tmp_path: Path) -> None:
    # Both sides in fresh processes (as tests/test_tfrecord_resume.py, for the same reason: a worker's earlier
    # tests must not change the reference); the uninterrupted run goes alongside the one that is killed.
    straight, crashed = write_spec(tmp_path / "straight"), write_spec(tmp_path / "crashed")
    reference = subprocess.Popen(command(straight, "--steps", str(TOTAL)), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=environment())
    run = tmp_path / "crashed" / "run"
    process = subprocess.Popen(command(crashed, "--steps", str(TOTAL)), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=environment())
    deadline = time.monotonic() + 240
    while latest_step(run) < 3 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # polls for the first checkpoint, then kills: not a wait for a fixed time
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    saved = latest_step(run)
    assert 3 <= saved < TOTAL, f"the run was not killed mid-way (latest checkpoint at step {saved})"

    resumed = subprocess.run(command(crashed, "--resume", "--steps", str(TOTAL - saved)), capture_output=True,
                             text=True, timeout=300, env=environment())
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {run / f'ckpt-{saved:08d}'} at step {saved}" in resumed.stdout
    _, errors = reference.communicate(timeout=300)
    assert reference.returncode == 0, errors
    assert_same_variables(tmp_path / "straight" / "run", run)  # bitwise: the resume contract of docs/training.md
