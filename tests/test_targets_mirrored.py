"""A hard target update (`targets.<t>.every_steps`) under `--strategy mirrored` on two logical CPUs: the copies are
bitwise the online weights after every N-th update and untouched in between, as in one process.

The copy used to sit in a tf.cond, whose branch may not hold the replicas' synchronization point (an assign):
training died at the first update with a merge_call RuntimeError (runtime/lib/target_networks.hard).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EVERY = 4
STEPS = 10  # copies after updates 4 and 8; 9 and 10 must still hold update 8's weights
SPEC = f"""\
specgen: 1
name: hard_mirrored
inputs:
  x: {{shape: [6], dtype: float32}}
outputs:
  y: net
  yt: tnet
blocks:
  mlp:
    inputs: [s]
    outputs: {{q: out}}
    layers:
      - {{name: hidden, op: dense, input: s, units: 5, activation: tanh}}
      - {{name: out, op: dense, units: 1}}
layers:
  - {{name: net, block: mlp, input: x}}
  - {{name: tnet, block: mlp, input: x}}
loss: {{kind: mean_squared_error, predictions: y, labels: t}}
optimizers:
  a: {{variables: "net/*", kind: sgd, momentum: 0.9, learning_rate: 0.05}}
targets:
  tt: {{online: "net/*", target: "tnet/*", every_steps: {EVERY}}}
train: {{batch_size: 8, epochs: 4, seed: 0}}
data:
  train: {{npz: d.npz, features: {{x: x}}, labels: {{t: y}}}}
checkpoint: {{dir: run, every_steps: 1, keep: 20}}
"""
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
ONLINE = ("net/hidden/kernel", "net/hidden/bias", "net/out/kernel", "net/out/bias")


def train(folder: Path, *args: str) -> dict[int, dict[str, np.ndarray]]:
    """Every step's checkpointed weights (step -> path -> value) of a fresh run with `args`."""
    import tensorflow as tf

    folder.mkdir()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 6)).astype(np.float32)
    np.savez(folder / "d.npz", x=x, y=np.sin(x[:, :1] + x[:, 1:2]).astype(np.float32))
    (folder / "spec.yaml").write_text(SPEC)
    result = subprocess.run([sys.executable, "-m", "specgen", "train", str(folder / "spec.yaml"), "--quiet",
                             "--steps", str(STEPS), *args], capture_output=True, text=True, env=ENV, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    steps = {}
    for ckpt in sorted((folder / "run").glob("ckpt-*")):
        reader = tf.train.load_checkpoint(str(ckpt / "variables"))
        steps[int(ckpt.name.removeprefix("ckpt-"))] = {
            p: reader.get_tensor(p) for p in (*ONLINE, *(f"t{p}" for p in ONLINE))}
    assert sorted(steps) == list(range(1, STEPS + 1))
    return steps


def assert_hard_updates(steps: dict[int, dict[str, np.ndarray]]) -> None:
    for step in range(1, STEPS + 1):
        now = steps[step]
        for path in ONLINE:
            online, copy = now[path], now[f"t{path}"]
            if step > 1:  # the online weights move every update, so "equal" below is not trivially true
                assert not np.array_equal(online, steps[step - 1][path]), (step, path)
            if step % EVERY == 0:
                assert np.array_equal(copy.view(np.uint32), online.view(np.uint32)), (step, path)
            else:
                assert not np.array_equal(copy, online), (step, path)
                if step > 1:
                    assert np.array_equal(copy.view(np.uint32), steps[step - 1][f"t{path}"].view(np.uint32)), \
                        (step, path)


@pytest.mark.slow
def test_hard_targets_under_mirrored_copy_every_n_updates_as_in_one_process(tmp_path: Path) -> None:
    mirrored = train(tmp_path / "mirrored", "--strategy", "mirrored", "--set", "train.distribute.cpu_devices=2")
    assert_hard_updates(mirrored)
    one = train(tmp_path / "one")
    assert_hard_updates(one)
    # The copies hold what each run's online weights were at updates 4 and 8: replicas average the same gradient
    # that one process computes on the whole batch, so the two runs agree to float32 reduction order.
    worst = max(float(np.max(np.abs(one[s][p] - mirrored[s][p]))) for s in one for p in one[s])
    assert worst <= 1e-5, worst
