"""mixed_float16 under `--strategy mirrored` makes the loss-scale decisions of one process (the dist checker's finding 1),
and a kept `--set train.distribute.cpu_devices` that does nothing without a strategy says so on the resume line.

Each replica's loss is the mean over its slice. Its backward pass used to start from the full loss scale, the replicas'
gradients then averaged (MEAN): the same sum in exact arithmetic, but every float16 gradient inside a replica's
backward pass was R times one process's, so a replica overflowed at an R times smaller scale. Here (one batch norm, one
sgd optimizer, the digits MLP, the checker's bisect_1c) one process made both updates at scale 32768 and the mirrored
run skipped its first and halved the scale. Now each replica starts from scale / R and the gradients are summed
(runtime/lib/optimizers.py global_gradients), so the float16 magnitudes and the decisions are one process's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "data" / "digits.npz"
SPEC = f"""\
specgen: 1
name: f16_mirrored
inputs: {{image: {{shape: [8, 8, 1]}}}}
outputs: {{logits: out}}
layers:
  - {{name: flat, op: flatten}}
  - {{name: hidden, op: dense, units: 16, activation: relu}}
  - {{name: bn, op: batch_norm}}
  - {{name: out, op: dense, units: 10}}
optimizers:
  all: {{kind: sgd, momentum: 0.9, learning_rate: 0.05}}
loss: {{kind: sparse_softmax_cross_entropy, logits: logits, labels: label}}
train:
  batch_size: 16
  seed: 3
  precision: mixed_float16
  distribute: {{sync_batch_norm: true}}
data:
  train: {{npz: {DIGITS.as_posix()}, features: {{image: x_train}}, labels: {{label: y_train}}}}
checkpoint: {{dir: run, every_steps: 100}}
"""
STEPS = 3
# One process, then the same spec on two logical CPUs (split first: the mirrored run must come before TensorFlow's
# runtime starts, so all runs are in one fresh interpreter; the default strategy ignores the split). Sync batch norm:
# the forward pass is one process's on each replica's rows, so the backward magnitudes are comparable by construction.
# Last, a plain --resume of the mirrored run (one more step): it keeps the run's --set cpu_devices=2, not --strategy.
SCRIPT = """\
import contextlib, io, json, sys
from pathlib import Path
import tensorflow as tf
from specgen.cli import main
base, spec, steps = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
out = {}
for label, extra in (("mirrored", ["--strategy", "mirrored", "--set", "train.distribute.cpu_devices=2"]), ("one", [])):
    (base / label).mkdir()
    (base / label / "spec.yaml").write_text(spec)
    assert main(["train", str(base / label / "spec.yaml"), "--quiet", "--steps", steps, *extra]) == 0
    run = base / label / "run"
    reader = tf.train.load_checkpoint(str(run / (run / "latest").read_text().strip() / "variables"))
    out[label] = [float(reader.get_tensor(k)) for k in ("loss_scale/skipped_updates", "loss_scale/scale", "global_step")]
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    assert main(["train", str(base / "mirrored" / "spec.yaml"), "--quiet", "--steps", "1", "--resume",
                 "--set", "train.distribute.sync_batch_norm=true"]) == 0
out["resumed"] = printed.getvalue().splitlines()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_mirrored_mixed_float16_skips_what_one_process_skips(tmp_path: Path) -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), SPEC, str(STEPS)], capture_output=True,
                            text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads(result.stdout.strip().splitlines()[-1])
    # One process: every update made at the initial scale, the figures the mirrored run must match (before the fix
    # it read [1.0, 16384.0, 3.0]: its first update skipped, the scale halved).
    assert runs["one"] == [0.0, 32768.0, float(STEPS)]
    assert runs["mirrored"] == runs["one"]
    # The resume runs on one device: the kept --set says it does nothing there, and so does a new one of that kind.
    idle = "no effect without --strategy mirrored or multi_worker"
    first = runs["resumed"][0]
    assert first.endswith(f"ckpt-00000003 at step 3 with --set train.distribute.cpu_devices=2 (kept from the run; "
                          f"{idle}), --set train.distribute.sync_batch_norm=true ({idle})"), first
    assert not any(line.startswith("mirrored:") for line in runs["resumed"]), runs["resumed"]
