"""levenberg_marquardt refuses, at train start and before the run folder's first write, a Jacobian whose iteration
would need more than its documented bound (kinds/optimizers/levenberg_marquardt.MAX_BYTES): one line with the sizes
and what to do, the same on every machine. It used to start and die of memory (a SIGSEGV under a memory cap)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from specgen.kinds.optimizers.levenberg_marquardt import MAX_BYTES, size_problem, solve_bytes

ROOT = Path(__file__).resolve().parents[1]
SPEC = """\
specgen: 1
name: lm_big
inputs:
  x: {{shape: [4], dtype: float32}}
outputs:
  y: out
layers:
  - {{name: hidden, op: dense, input: x, units: {units}, activation: tanh}}
  - {{name: out, op: dense, units: 2}}
loss: {{kind: mean_squared_error, predictions: y, labels: t}}
optimizers:
  fit: {{kind: levenberg_marquardt}}
train: {{batch_size: full, epochs: 1, seed: 0}}
data:
  train: {{npz: d.npz, features: {{x: x}}, labels: {{t: y}}}}
checkpoint: {{dir: run}}
"""


def test_the_estimate_counts_the_jacobian_its_float64_copies_and_the_svd() -> None:
    assert solve_bytes(200, 49) == 200 * 49 * 20 + 8 * 49 * 249  # the docs' sine fit: 0.3 MB
    assert size_problem("fit", 200, 1, 49) is None
    assert solve_bytes(10, 1000) == 10 * 1000 * 20 + 8 * 10 * 1010  # fewer rows than weights: k = rows
    # The bound is a number, not the machine's memory: just under it trains, just over it is refused.
    assert solve_bytes(40_000, 952) <= MAX_BYTES < solve_bytes(40_000, 953)
    assert size_problem("fit", 20_000, 2, 952) is None
    assert size_problem("fit", 20_000, 2, 953) is not None


def train(folder: Path, units: int, examples: int) -> subprocess.CompletedProcess[str]:
    folder.mkdir()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((examples, 4)).astype(np.float32)
    np.savez(folder / "d.npz", x=x, y=np.sin(x[:, :2]).astype(np.float32))
    (folder / "big.yaml").write_text(SPEC.format(units=units))
    validated = subprocess.run([sys.executable, "-m", "specgen", "validate", str(folder / "big.yaml")],
                               capture_output=True, text=True, timeout=120, cwd=folder)
    assert validated.returncode == 0, validated.stderr  # the data's size is not known to validate
    return subprocess.run([sys.executable, "-m", "specgen", "train", "big.yaml", "--quiet"], capture_output=True,
                          text=True, timeout=300, cwd=folder,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)})


def test_a_jacobian_past_the_bound_is_refused_before_the_run_folder_is_written(tmp_path: Path) -> None:
    # 20,000 examples x 2 outputs by 4·1000 + 1000 + 1000·2 + 2 = 7,002 weights: 2.8e8 entries, about 7.7 GiB.
    result = train(tmp_path / "big", 1000, 20_000)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("big.yaml")]
    assert errors == [
        "big.yaml:12:15: error: levenberg_marquardt optimizer 'fit': its Jacobian is 40,000 residuals (20,000 "
        "examples x 2 outputs) by 7,002 weights, 280,080,000 entries; with its float64 copies and SVD an iteration "
        "needs about 7.7 GiB, past the 1 GiB bound for this optimizer: train on fewer examples (batch_size: full "
        "solves on all of them), use fewer weights, or choose a gradient optimizer (adam)"], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "big" / "run").exists()


def test_a_small_fit_still_trains(tmp_path: Path) -> None:
    result = train(tmp_path / "small", 8, 100)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "small" / "run" / "latest").is_file()
