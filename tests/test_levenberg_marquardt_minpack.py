"""Issue 17: `kind: levenberg_marquardt` does what MINPACK's lmder does (scipy's least_squares(method="lm")).

The rules, against values computed by hand from lmder/lmpar (Moré 1978); the iterates, in float64, against
lmder's own, iteration by iteration; and the generated float32 trainer against scipy on issue 17's 2-input tanh
network (bench/lm_vs_scipy.py runs the full sweep). Fits: tests/lm_fits.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from lm_fits import DECAY, LOGISTIC, Fit, Trainer, mse, scipy_at, surface, write_fit

pytest.importorskip("scipy.optimize")
tf = pytest.importorskip("tensorflow")
from specgen.runtime.lib import levenberg_marquardt as lm  # noqa: E402


def f64(*values: float) -> tf.Tensor:
    return tf.constant(values, tf.float64)


@pytest.mark.parametrize(("ratio", "actred", "dirder", "blown_up", "pnorm", "par", "expected"), [
    (0.1, 0.01, -0.2, False, 0.8, 2.0, (0.5, 4.0)),  # poor step, loss fell: Δ = 0.5·min(Δ, 10‖Dp‖), λ doubles
    (0.1, 0.01, -0.2, False, 0.05, 2.0, (0.25, 4.0)),  # ... a short step: 0.5·10·0.05
    (-0.5, -0.1, -0.2, False, 0.8, 2.0, (0.4, 5.0)),  # loss grew: μ = 0.5·dirder / (dirder + 0.5·actred) = 0.4
    (-0.5, -10.0, -0.2, False, 0.8, 2.0, (0.1, 20.0)),  # μ = 0.1 / 5.2 below 0.1: clamped to 0.1
    (-0.5, -1.0, -0.2, True, 0.8, 2.0, (0.1, 20.0)),  # ‖r‖ grew tenfold: μ = 0.1
    (0.9, 0.9, -0.2, False, 0.8, 2.0, (1.6, 1.0)),  # very good: Δ = 2‖Dp‖, λ halves
    (0.5, 0.5, -0.2, False, 0.8, 2.0, (1.0, 2.0)),  # good enough: both stay
    (0.5, 0.5, -0.2, False, 0.8, 0.0, (1.6, 0.0)),  # good enough with λ = 0 (a Gauss-Newton step): Δ = 2‖Dp‖
])
def test_step_bound_and_damping_follow_lmders_rule(ratio: float, actred: float, dirder: float, blown_up: bool,
                                                   pnorm: float, par: float, expected: tuple[float, float]) -> None:
    delta, damping = lm.update_bound(f64(1.0)[0], f64(par)[0], f64(pnorm)[0], f64(ratio)[0], f64(actred)[0],
                                     f64(dirder)[0], tf.constant(blown_up))
    # 1e-15: a product or quotient of two or three float64 numbers, each rounded once.
    assert delta.numpy() == pytest.approx(expected[0], rel=1e-15)
    assert damping.numpy() == pytest.approx(expected[1], rel=1e-15)


def lmpar(s: tuple[float, ...], c: tuple[float, ...], delta: float, full_rank: bool = True
          ) -> tuple[float, list[float]]:
    par, z = tf.function(lm.lmpar)(f64(*s), f64(*c), f64(delta)[0], f64(0.0)[0], tf.constant(full_rank))
    return float(par), z.numpy().tolist()


def test_lmpar_takes_the_gauss_newton_step_within_1_1_times_the_bound() -> None:
    # z = -c/s = [-1, -1], ‖z‖ = 1.414 <= 1.1·1.3.
    assert lmpar((2.0, 1.0), (2.0, 1.0), 1.3) == (0.0, [-1.0, -1.0])


def test_lmpar_newton_search_by_hand() -> None:
    # Equal singular values: ‖z(λ)‖ = 5 / (1 + λ), and lmpar's lower bound parl = (‖z₀‖ - Δ)/Δ / (Σz₀²/s² / ‖z₀‖²)
    # = 4 is the exact answer: the first evaluation lands on ‖z‖ = Δ.
    par, z = lmpar((1.0, 1.0), (3.0, 4.0), 1.0)
    assert par == pytest.approx(4.0, rel=1e-15) and z == pytest.approx([-0.6, -0.8], rel=1e-15)
    # s = [2, 1], c = [2, 1], Δ = 1: parl = (√2 - 1) / (1.25 / 2); z(parl) has ‖z‖ = 1.048, within 10% of Δ: kept.
    parl = (math.sqrt(2) - 1) / 0.625
    par, z = lmpar((2.0, 1.0), (2.0, 1.0), 1.0)
    assert par == pytest.approx(parl, rel=1e-14)
    assert z == pytest.approx([-4 / (4 + parl), -1 / (1 + parl)], rel=1e-14)
    # Rank-deficient (s₂ = 0): parl = 0, paru = ‖s·c‖/Δ = 3, start λ = ‖s·c‖/‖z₀‖ = 1: ‖z‖ = 1.5; Newton's
    # correction (0.5/1) / ((2.25/2)/2.25) = 1 and parl = 1 give λ = 2, ‖z‖ = 1.
    par, z = lmpar((1.0, 0.0), (3.0, 4.0), 1.0, full_rank=False)
    assert par == pytest.approx(2.0, rel=1e-15) and z == pytest.approx([-1.0, 0.0], abs=1e-15)


def float64_iterates(fit: Fit, start: np.ndarray, x: np.ndarray, y: np.ndarray, count: int) -> list[np.ndarray]:
    """`count` iterations of `lm.step` on a float64 TensorFlow copy of the fit's model (decay or logistic)."""
    p = tf.Variable(start, dtype=tf.float64)
    xs, ys = tf.constant(x[:, 0]), tf.constant(y)

    def residuals() -> tf.Tensor:
        if fit is DECAY:
            return p[1] * tf.nn.elu(p[0] * xs) + p[2] - ys
        return tf.sigmoid(p[0] * xs + p[1]) - ys

    damping, bound, scale = (tf.Variable(tf.zeros([], tf.float64)), tf.Variable(tf.zeros([], tf.float64)),
                             tf.Variable(tf.zeros_like(p)))
    done = tf.Variable(0)

    @tf.function
    def iterate() -> tf.Tensor:
        outcome = lm.step([p], residuals, damping, bound, [scale], tf.equal(done, 0), max_tries=100)
        done.assign_add(1)
        return outcome

    out = []
    for _ in range(count):
        assert int(iterate()) == lm.ACCEPTED
        out.append(p.numpy().copy())
    return out


@pytest.mark.parametrize("fit", [DECAY, LOGISTIC], ids=lambda f: f.name)
def test_float64_iterates_are_lmders(fit: Fit) -> None:
    x, y = fit.data(np.random.default_rng(0))
    start = np.array([-0.5, 1.0, 0.0]) if fit is DECAY else np.array([0.3, 0.1])
    converged = scipy_at(fit, start, x, y, 100).njev  # lmder stops on its tolerances after this many
    ours = float64_iterates(fit, start, x, y, converged)
    for k in range(1, converged + 1):
        theirs = scipy_at(fit, start, x, y, k).x
        # 1e-12: QR (lmder) and SVD (here) of the same scaled 60x3 or 80x2 Jacobian (condition 9.4 and 1.5) agree
        # to a few float64 roundings times that, over 6 iterations; measured: 2.6e-15 and 1.5e-15.
        np.testing.assert_allclose(ours[k - 1], theirs, rtol=1e-12, atol=1e-14, err_msg=f"iteration {k}")


def test_trainer_matches_scipy_on_the_2_input_tanh_net(tmp_path: Path) -> None:
    # Issue 17's net with its 33 weights (8 tanh units), 150 points, 2 seeds, 40 iterations each.
    fit = surface(8)
    x, y = (v.astype(np.float32).astype(np.float64) for v in fit.data(np.random.default_rng(0)))
    for seed in (0, 1):
        trainer = Trainer(write_fit(tmp_path / f"seed{seed}", fit, "{kind: levenberg_marquardt}", seed=seed), fit)
        start = trainer.params()
        reference = scipy_at(fit, start, x, y, 40)
        theirs, ours = 2 * reference.cost / len(y), mse(fit, trainer.train(40), x, y)
        # Measured: 1.000 and 0.997 of scipy's MSE (bench/RESULTS.md: within 0.4% on 6 seeds at 100 iterations).
        # 5%, issue 17's goal: lmder itself, fed this fit rounded to float32 as specgen's model computes it, lands
        # 2% away on seed 1, and another CPU's float32 last bits move specgen as much. The fixed-factor rule this
        # replaced ended at 0.926 and 0.839 of scipy's MSE here: not lmder's iterates.
        assert abs(ours / theirs - 1) <= 0.05, (seed, ours, theirs)
