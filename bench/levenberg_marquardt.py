"""Levenberg-Marquardt (`kind: levenberg_marquardt`) against scipy's MINPACK and against Adam, on the fits of
tests/lm_fits.py: an exponential decay with offset and a logistic curve (well posed), and a 1-16-1 tanh network
fitting a noisy sine.

Every run is a real `specgen train` session (the generated trainer, the npz data path, full batch); the loss is
the mean squared residual in float64 of the weights a run ends with, and each comparison starts from the same
weights (the spec's seed). scipy.optimize.least_squares(method="lm") gets the float64 numpy residuals and an
analytic Jacobian (so it runs lmder and counts Jacobians in `njev`).

  well posed   epochs (= LM iterations = Jacobian evaluations) until the loss is within 1% and within 1e-6
               of scipy's converged loss, and the time (from the first call: tracing included); Adam at three
               learning rates, up to --adam-epochs, its loss read every 10 epochs
  tanh net     both run 30, 60 and 120 whole iterations (Jacobians; scipy stopped on the try it kept in
               its last one: lm_fits.scipy_at); the relative gap, for --seeds initial weights; then Adam's
               loss after --adam-epochs epochs and the epochs it needed to reach LM's loss at 30 iterations

bench/lm_vs_scipy.py is issue 17's sweep on a 2-input tanh network.

    python bench/levenberg_marquardt.py               # about 25 s on 2 cores
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from lm_fits import DECAY, LOGISTIC, SINE, Fit, Trainer, mse, scipy_at, write_fit

RATES = (0.01, 0.05, 0.1)
CHUNK = 10  # Adam epochs between loss reads


def data(fit: Fit) -> tuple[np.ndarray, np.ndarray]:
    x, y = fit.data(np.random.default_rng(0))
    return x.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64)


def first_within(trainer: Trainer, x: np.ndarray, y: np.ndarray, targets: tuple[float, ...], cap: int,
                 chunk: int) -> tuple[list[int | None], list[float], float]:
    """Epochs (and seconds) until the loss first reaches each target, reading it every `chunk` epochs."""
    hits: list[int | None] = [None] * len(targets)
    seconds: list[float] = [float("nan")] * len(targets)
    begin, loss = time.perf_counter(), float("inf")
    while trainer.epochs < cap and None in hits:
        loss = mse(trainer.fit, trainer.train(chunk), x, y)
        for i, target in enumerate(targets):
            if hits[i] is None and loss <= target:
                hits[i], seconds[i] = trainer.epochs, time.perf_counter() - begin
    return hits, seconds, loss


def shown(hit: int | None, seconds: float, cap: int) -> str:
    return f"{hit:>5} ({seconds:5.2f} s)" if hit is not None else f"> {cap:<4} (  -    )"


def well_posed(fit: Fit, folder: Path, cap: int) -> None:
    x, y = data(fit)
    lm = Trainer(write_fit(folder / fit.name / "lm", fit, "{kind: levenberg_marquardt}"), fit)
    start = lm.params()
    begin = time.perf_counter()
    ref = least_squares(fit.residuals, start, jac=fit.jacobian, method="lm", args=(x, y))
    scipy_seconds, best = time.perf_counter() - begin, 2 * ref.cost / len(y)
    print(f"\n{fit.name}: {len(y)} examples, {len(start)} parameters; scipy lm: loss {best:.9g} after {ref.njev} "
          f"Jacobians, {ref.nfev} evaluations, {scipy_seconds * 1000:.1f} ms")
    targets = (best * 1.01, best * (1 + 1e-6))
    print(f"  {'optimizer':<22} {'epochs to 1%':>16} {'epochs to 1e-6':>16}  loss at the end (rel. to scipy)")
    hits, seconds, loss = first_within(lm, x, y, targets, 100, 1)
    print(f"  {'levenberg_marquardt':<22} {shown(hits[0], seconds[0], 100):>16} {shown(hits[1], seconds[1], 100):>16}"
          f"  {(loss - best) / best:+.1e} after {lm.epochs}")
    begin = time.perf_counter()
    lm.train(20)  # traced already: the cost of one iteration alone
    print(f"  (one LM iteration once traced: {(time.perf_counter() - begin) / 20 * 1000:.1f} ms; the times above "
          "include tracing the step, about 0.5-2 s)")
    for rate in RATES:
        adam = Trainer(write_fit(folder / fit.name / f"adam{rate}", fit, f"{{kind: adam, learning_rate: {rate}}}"), fit)
        assert np.array_equal(adam.params(), start)
        hits, seconds, loss = first_within(adam, x, y, targets, cap, CHUNK)
        print(f"  {f'adam lr {rate}':<22} {shown(hits[0], seconds[0], cap):>16} {shown(hits[1], seconds[1], cap):>16}"
              f"  {(loss - best) / best:+.1e} after {adam.epochs}")


def tanh_net(folder: Path, seeds: int, cap: int) -> None:
    x, y = data(SINE)
    print(f"\n{SINE.name}: {len(y)} examples, 49 parameters; loss at equal Jacobian evaluations "
          "(ours vs scipy lm, relative gap)")
    first: dict[int, float] = {}
    for seed in range(seeds):
        lm = Trainer(write_fit(folder / f"sine{seed}", SINE, "{kind: levenberg_marquardt}", seed=seed), SINE)
        start, cells, begin = lm.params(), [], time.perf_counter()
        for iterations in (30, 60, 120):
            ref = scipy_at(SINE, start, x, y, iterations)
            theirs, ours = 2 * ref.cost / len(y), mse(SINE, lm.train(ref.njev - lm.epochs), x, y)
            first.setdefault(seed, ours)
            cells.append(f"{ref.njev:>3}: {ours:.5f} vs {theirs:.5f} ({ours / theirs - 1:+.1%})")
        print(f"  seed {seed}  " + "  ".join(cells) + f"  [{time.perf_counter() - begin:.1f} s incl. scipy]")
    for rate in RATES:
        adam = Trainer(write_fit(folder / f"sine_adam{rate}", SINE, f"{{kind: adam, learning_rate: {rate}}}"), SINE)
        hits, seconds, loss = first_within(adam, x, y, (first[0],), cap, CHUNK)
        print(f"  adam lr {rate} (seed 0): loss {loss:.5f} after {adam.epochs} epochs; LM's loss after 30 "
              f"iterations ({first[0]:.5f}) reached at {shown(hits[0], seconds[0], cap).strip()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adam-epochs", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=4, help="initial weights of the tanh net (seeds 0..N-1)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        for fit in (DECAY, LOGISTIC):
            well_posed(fit, Path(folder), args.adam_epochs)
        tanh_net(Path(folder), args.seeds, args.adam_epochs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
