"""The fits of issue 12's Levenberg-Marquardt checks, shared by tests/test_levenberg_marquardt.py and
bench/levenberg_marquardt.py: data, a spec for them, and the model's residuals and Jacobian in float64 numpy.

The numpy functions are the reference model for scipy.optimize.least_squares; parameters are flattened in
the order (and the row-major layout) the generated trainer's variables have. `surface` adds issue 17's
2-input tanh network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

Array = np.ndarray


@dataclass(frozen=True)
class Fit:
    name: str
    layers: str  # the spec's `layers:` entries, one YAML flow mapping a line
    paths: tuple[str, ...]  # trained variables, in the trainer's order
    data: Callable[[np.random.Generator], tuple[Array, Array]]  # x [n, inputs], y [n]
    residuals: Callable[[Array, Array, Array], Array]  # (params, x [n, inputs], y [n]) -> [n]
    jacobian: Callable[[Array, Array, Array], Array]  # -> [n, params]


def _elu(z: Array) -> tuple[Array, Array]:
    """Keras' elu with alpha 1 and its derivative: e^z - 1 below 0, z above."""
    return np.where(z > 0, z, np.expm1(np.minimum(z, 0))), np.where(z > 0, 1.0, np.exp(np.minimum(z, 0)))


def _decay_data(rng: np.random.Generator) -> tuple[Array, Array]:
    x = np.linspace(0.0, 4.0, 60)[:, None]
    return x, 2.0 * np.exp(-1.3 * x[:, 0]) + 0.5 + 0.02 * rng.standard_normal(60)


def _decay_residuals(p: Array, x: Array, y: Array) -> Array:
    w, a, d = p
    return a * _elu(w * x[:, 0])[0] + d - y


def _decay_jacobian(p: Array, x: Array, y: Array) -> Array:
    w, a, _ = p
    value, slope = _elu(w * x[:, 0])
    return np.stack([a * slope * x[:, 0], value, np.ones_like(value)], axis=1)


# y = a·e^(w·x) + c for x >= 0, w < 0: elu(w·x) is e^(w·x) - 1 there, and the output layer's bias absorbs the -a.
DECAY = Fit(
    "exponential_decay",
    "  - {name: decay, op: dense, input: x, units: 1, activation: elu, use_bias: false,"
    " kernel_init: {kind: constant, value: -0.5}}\n"
    "  - {name: out, op: dense, units: 1}\n",
    ("decay/kernel", "out/kernel", "out/bias"), _decay_data, _decay_residuals, _decay_jacobian)


def _sigmoid(z: Array) -> Array:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _logistic_data(rng: np.random.Generator) -> tuple[Array, Array]:
    x = np.linspace(-4.0, 4.0, 80)[:, None]
    return x, _sigmoid(1.5 * x[:, 0] - 0.5) + 0.03 * rng.standard_normal(80)


def _logistic_residuals(p: Array, x: Array, y: Array) -> Array:
    return _sigmoid(p[0] * x[:, 0] + p[1]) - y


def _logistic_jacobian(p: Array, x: Array, y: Array) -> Array:
    s = _sigmoid(p[0] * x[:, 0] + p[1])
    return np.stack([s * (1 - s) * x[:, 0], s * (1 - s)], axis=1)


LOGISTIC = Fit("logistic", "  - {name: out, op: dense, input: x, units: 1, activation: sigmoid}\n",
               ("out/kernel", "out/bias"), _logistic_data, _logistic_residuals, _logistic_jacobian)

HIDDEN = 16


def _sine_data(rng: np.random.Generator) -> tuple[Array, Array]:
    x = np.linspace(-3.0, 3.0, 200)[:, None]
    return x, np.sin(x[:, 0]) + 0.1 * rng.standard_normal(200)


def _hidden(p: Array, x: Array) -> Array:
    return np.tanh(x * p[:HIDDEN] + p[HIDDEN:2 * HIDDEN])


def _sine_residuals(p: Array, x: Array, y: Array) -> Array:
    return _hidden(p, x) @ p[2 * HIDDEN:3 * HIDDEN] + p[3 * HIDDEN] - y


def _sine_jacobian(p: Array, x: Array, y: Array) -> Array:
    h = _hidden(p, x)
    through = (1 - h**2) * p[2 * HIDDEN:3 * HIDDEN]
    return np.hstack([through * x, through, h, np.ones((len(x), 1))])


SINE = Fit("tanh_sine",
           f"  - {{name: hidden, op: dense, input: x, units: {HIDDEN}, activation: tanh}}\n"
           "  - {name: out, op: dense, units: 1}\n",
           ("hidden/kernel", "hidden/bias", "out/kernel", "out/bias"), _sine_data, _sine_residuals, _sine_jacobian)


def _surface_data(rng: np.random.Generator, count: int) -> tuple[Array, Array]:
    """`count` points uniform in [-2, 2]², y = sin(x1)·cos(x2) plus noise of standard deviation 0.05."""
    x = rng.uniform(-2.0, 2.0, (count, 2))
    return x, np.sin(x[:, 0]) * np.cos(x[:, 1]) + 0.05 * rng.standard_normal(count)


def surface(units: int, count: int = 150) -> Fit:
    """A 2-`units`-1 tanh network fitting a noisy sin(x1)·cos(x2) (issue 17's sweep: 32 units, 150 points,
    2·32 + 32 + 32 + 1 = 129 weights)."""

    def hidden(p: Array, x: Array) -> Array:
        return np.tanh(x @ p[:2 * units].reshape(2, units) + p[2 * units:3 * units])

    def residuals(p: Array, x: Array, y: Array) -> Array:
        return hidden(p, x) @ p[3 * units:4 * units] + p[4 * units] - y

    def jacobian(p: Array, x: Array, y: Array) -> Array:
        h = hidden(p, x)
        through = (1 - h**2) * p[3 * units:4 * units]
        return np.hstack([through * x[:, :1], through * x[:, 1:], through, h, np.ones((len(x), 1))])

    return Fit(f"tanh_surface_{units}",
               f"  - {{name: hidden, op: dense, input: x, units: {units}, activation: tanh}}\n"
               "  - {name: out, op: dense, units: 1}\n",
               ("hidden/kernel", "hidden/bias", "out/kernel", "out/bias"),
               lambda rng: _surface_data(rng, count), residuals, jacobian)


def float32_model(fit: Fit) -> Fit:
    """The fit with its weights, residuals and Jacobian rounded to float32, as specgen's model computes them."""
    def rounded(f: Any) -> Any:
        return lambda p, x, y: f(p.astype(np.float32).astype(np.float64), x, y).astype(np.float32).astype(np.float64)

    return Fit(fit.name, fit.layers, fit.paths, fit.data, rounded(fit.residuals), rounded(fit.jacobian))


def scipy_at(fit: Fit, start: np.ndarray, x: np.ndarray, y: np.ndarray, iterations: int) -> Any:
    """lmder from `start` through `iterations` whole iterations (Jacobians), ending on the try it kept: run
    with one evaluation less than the smallest max_nfev that makes it compute Jacobian `iterations + 1`
    (bisection: njev never falls as max_nfev grows); or lmder's own stop when it comes first."""
    from scipy.optimize import least_squares  # the tests skip without scipy

    def run(max_nfev: int) -> Any:
        return least_squares(fit.residuals, start, jac=fit.jacobian, method="lm", args=(x, y), max_nfev=max_nfev)

    low, high = iterations + 1, 4 * iterations + 8
    if run(high).njev <= iterations:
        return run(high)  # converged before (status 1-4), or ran out: compare at its count
    while low < high:
        middle = (low + high) // 2
        low, high = (middle + 1, high) if run(middle).njev <= iterations else (low, middle)
    return run(low - 1)


def write_fit(folder: Path, fit: Fit, optimizer: str, seed: int = 0) -> Path:
    """The fit's data (noise drawn with numpy seed 0) and a full-batch spec training it with `optimizer`
    (a YAML flow mapping); the model's initial weights come from `seed`."""
    folder.mkdir(parents=True, exist_ok=True)
    x, y = fit.data(np.random.default_rng(0))
    np.savez(folder / "data.npz", x=x.astype(np.float32), y=y[:, None].astype(np.float32))
    spec = folder / "spec.yaml"
    spec.write_text(
        f"specgen: 1\nname: {fit.name}\ninputs:\n  x: {{shape: [{x.shape[1]}], dtype: float32}}\noutputs:\n  y: out\n"
        f"layers:\n{fit.layers}"
        "loss: {kind: mean_squared_error, predictions: y, labels: target}\n"
        f"optimizers:\n  fit: {optimizer}\n"
        f"train: {{batch_size: full, epochs: 1, seed: {seed}}}\n"
        "data:\n  train: {npz: data.npz, features: {x: x}, labels: {target: y}}\n"
        "checkpoint: {dir: run, every_steps: 100000}\n")
    return spec


def mse(fit: Fit, params: Array, x: Array, y: Array) -> float:
    """The mean_squared_error loss of `params` in float64."""
    return float(np.mean(fit.residuals(params, x, y) ** 2))


class Trainer:
    """A `specgen train` session on a fit's spec (the real generated code and data path), driven epoch by epoch."""

    def __init__(self, spec: Path, fit: Fit):
        from specgen.pipeline import build
        from specgen.runtime.commands.resume import Options
        from specgen.runtime.commands.session import Session
        from specgen.spec.load import load_spec

        self.fit = fit
        self.session = Session(build(load_spec(spec)), Options(fresh=True, quiet=True))
        self.session.start()
        self.epochs = 0

    def params(self) -> Array:
        variables = self.session.model.variables_by_path()
        return np.concatenate([variables[p].numpy().astype(np.float64).ravel() for p in self.fit.paths])

    def train(self, epochs: int) -> Array:
        """`epochs` more full-batch updates (one each); the weights after them, float64."""
        if epochs:
            self.session.updates(epochs)
            self.epochs += epochs
        return self.params()

    def state(self, key: str) -> float:
        return float(self.session.trainer.state_by_path()[key].numpy())
