"""Issue 17's sweep: `kind: levenberg_marquardt` against scipy's MINPACK on a 2-32-1 tanh network.

The fit (tests/lm_fits.py `surface`): 150 points uniform in [-2, 2]² (numpy seed 0), y = sin(x1)·cos(x2) plus
noise of standard deviation 0.05; a dense(32, tanh) then dense(1), 129 weights. For each of --seeds initial
weights (the spec's `train.seed`), both start from the same weights: specgen's, read from the trainer.

Comparison rule: one iteration is one Jacobian evaluation in both (specgen's `optimizers/fit/iterations`,
scipy's `njev`). scipy bounds function evaluations (`max_nfev`), not Jacobians, so it runs with the smallest
max_nfev that gives --iterations Jacobians (or fewer, where lmder stops on its own tolerances first), and
specgen runs as many iterations as scipy evaluated Jacobians. scipy.optimize.least_squares(method="lm") gets the
float64 numpy residuals and the analytic Jacobian (lmder, factor 100, scaling from the Jacobian's column norms).
The MSE is the mean squared residual in float64 of the weights each ends with.

    python bench/lm_vs_scipy.py                   # 6 seeds, 100 iterations: about 1 minute on 2 cores
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from lm_fits import Fit, Trainer, float32_model, mse, scipy_at, surface, write_fit


def data(fit: Fit) -> tuple[np.ndarray, np.ndarray]:
    """The fit's data as the trainer reads it (float32), in float64."""
    x, y = fit.data(np.random.default_rng(0))
    return x.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64)


def sweep(units: int, points: int, seeds: int, iterations: int, folder: Path) -> list[tuple[int, float, float]]:
    """Per seed: (Jacobians, scipy's MSE, specgen's MSE); prints a row each."""
    fit = surface(units, points)
    x, y = data(fit)
    print(f"{fit.name}: {points} points, {len(fit.paths)} variables, {4 * units + 1} weights; {iterations} "
          "iterations (Jacobians) each")
    print(f"{'seed':>4} {'njev':>5} {'nfev':>5} {'scipy MSE':>10} {'specgen MSE':>11} {'ratio':>6}   "
          f"{'scipy, start·(1+1e-15)':>22} {'scipy, f32 model':>16} {'specgen s':>9}")
    rows = []
    for seed in range(seeds):
        trainer = Trainer(write_fit(folder / f"seed{seed}", fit, "{kind: levenberg_marquardt}", seed=seed), fit)
        start = trainer.params()
        ref = scipy_at(fit, start, x, y, iterations)
        theirs = 2 * ref.cost / len(y)
        begin = time.perf_counter()
        ours = mse(fit, trainer.train(ref.njev), x, y)
        seconds = time.perf_counter() - begin
        rows.append((ref.njev, theirs, ours))
        # How far lmder itself lands from a start one part in 1e15 away, and with specgen's float32 rounding.
        nudged = 2 * scipy_at(fit, start * (1 + 1e-15), x, y, ref.njev).cost / len(y) / theirs
        rounded = 2 * scipy_at(float32_model(fit), start, x, y, ref.njev).cost / len(y) / theirs
        print(f"{seed:>4} {ref.njev:>5} {ref.nfev:>5} {theirs:>10.6f} {ours:>11.6f} {ours / theirs:>6.3f}   "
              f"{nudged:>22.3f} {rounded:>16.3f} {seconds:>9.1f}")
    ratios = np.array([ours / theirs for _, theirs, ours in rows])
    print(f"worst ratio {ratios.max():.3f}, geometric mean {np.exp(np.log(ratios).mean()):.3f} (specgen MSE / scipy "
          "MSE; the goal: at most 1.05 on every seed); the last two columns: scipy's MSE there over scipy's, the "
          "spread of lmder itself")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--units", type=int, default=32)
    parser.add_argument("--points", type=int, default=150)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=100)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        sweep(args.units, args.points, args.seeds, args.iterations, Path(folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
