"""Moments of initializers and activations, for the initialization-scale lint (lints.py).

Pure Python (no numpy, no TensorFlow): `specgen validate` runs this. A value's distribution is
summarized by its mean and second moment E[x^2]; activations are applied to a Gaussian with
that mean and variance, relu-like ones in closed form, the others by Simpson's rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from specgen.ir.model import Init

Moments = tuple[float, float]  # (mean, second moment E[x^2])

# Var(truncated_normal) / stddev^2 for TensorFlow's truncation at two standard deviations;
# Keras divides the glorot/he normal stddev by its square root, 0.87962566103423978.
TRUNCATED_VARIANCE = 0.7737413035499232


def fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) as Keras' compute_fans takes them from a kernel shape."""
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def init_moments(init: Init | None, shape: tuple[int, ...]) -> Moments:
    """The mean and E[w^2] of one weight drawn from `init` for a variable of `shape`."""
    if init is None:
        return 0.0, 0.0
    args = dict(init.args)
    fan_in, fan_out = fans(shape)
    if init.kind == "zeros":
        return 0.0, 0.0
    if init.kind == "ones":
        return 1.0, 1.0
    if init.kind == "constant":
        return args["value"], args["value"] * args["value"]
    if init.kind in ("random_normal", "truncated_normal"):
        mean, std = args.get("mean", 0.0), args.get("stddev", 0.05)
        factor = TRUNCATED_VARIANCE if init.kind == "truncated_normal" else 1.0
        return mean, factor * std * std + mean * mean
    if init.kind == "random_uniform":
        low, high = args.get("minval", -0.05), args.get("maxval", 0.05)
        mean = (low + high) / 2
        return mean, (high - low) * (high - low) / 12 + mean * mean
    if init.kind == "orthogonal":  # orthonormal columns (or rows) of the longer side: E[w^2] = gain^2 / max side
        rows, cols = math.prod(shape[:-1]) if len(shape) > 1 else 1, shape[-1] if shape else 1
        return 0.0, args.get("gain", 1.0) ** 2 / max(rows, cols, 1)
    if init.kind == "unit_forget_bias":  # an LSTM bias: `value` everywhere but the forget gate's ones
        value = args.get("value", 0.0)
        return (3 * value + 1) / 4, (3 * value * value + 1) / 4
    # The variance-scaling kinds: the normal ones divide by the truncation factor, so both
    # the uniform and the normal variant have exactly this variance.
    variance = {"glorot_uniform": 2.0 / max(fan_in + fan_out, 1), "glorot_normal": 2.0 / max(fan_in + fan_out, 1),
                "he_normal": 2.0 / max(fan_in, 1), "he_uniform": 2.0 / max(fan_in, 1)}[init.kind]
    return 0.0, variance


def describe_init(init: Init | None) -> str:
    if init is None:
        return "no initializer"
    args = ", ".join(f"{k} {v:g}" for k, v in init.args)
    return f"{init.kind} ({args})" if args else init.kind


# --- activations ------------------------------------------------------------------------------


def _phi(z: float) -> float:
    return math.exp(-z * z / 2) / math.sqrt(2 * math.pi)


def _cdf(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def _relu(mean: float, std: float) -> Moments:
    """E[relu(x)] and E[relu(x)^2] for x ~ N(mean, std^2), in closed form."""
    if std <= 0:
        m = max(mean, 0.0)
        return m, m * m
    a = mean / std
    return mean * _cdf(a) + std * _phi(a), (mean * mean + std * std) * _cdf(a) + mean * std * _phi(a)


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def _softplus(x: float) -> float:
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805

FUNCTIONS: dict[str, Callable[[float, float], float]] = {  # (x, the op's parameter) -> f(x)
    "relu_max": lambda x, p: min(max(x, 0.0), p),  # relu with max_value p (relu6: p = 6)
    "elu": lambda x, p: x if x > 0 else p * math.expm1(x),
    "selu": lambda x, p: SELU_SCALE * (x if x > 0 else SELU_ALPHA * math.expm1(x)),
    "gelu": lambda x, p: x * _cdf(x),
    "sigmoid": lambda x, p: _sigmoid(x),
    "tanh": lambda x, p: math.tanh(x),
    "softplus": lambda x, p: _softplus(x),
    "swish": lambda x, p: x * _sigmoid(x),
    "hard_sigmoid": lambda x, p: min(max(x / 6 + 0.5, 0.0), 1.0),
    "hard_swish": lambda x, p: x * min(max(x / 6 + 0.5, 0.0), 1.0),
}
ALIASES = {"silu": "swish", "hard_silu": "hard_swish"}
STEPS = 320  # Simpson intervals over +-8 standard deviations: errors below 1e-4 even at relu6's kinks


@lru_cache(maxsize=4096)
def _quadrature(name: str, param: float, mean: float, std: float) -> Moments:
    f, h = FUNCTIONS[name], 16.0 / STEPS
    first = second = 0.0
    for i in range(STEPS + 1):
        z = -8.0 + i * h
        weight = (1 if i in (0, STEPS) else 4 if i % 2 else 2) * _phi(z)
        y = f(mean + std * z, param)
        first, second = first + weight * y, second + weight * y * y
    return first * h / 3, second * h / 3


def activation(name: str, moments: Moments, params: dict[str, float] | None = None) -> Moments | None:
    """The moments of `name`(x) for a Gaussian x with `moments`; None where no scale is meaningful (softmax)."""
    name = ALIASES.get(name, name)
    params = params or {}
    mean, std = mean_std(moments)
    if name == "relu" and params.get("max_value") is None:
        return _relu(mean, std)
    if name in ("relu", "relu6"):
        top = 6.0 if name == "relu6" else float(params["max_value"])
        return _quadrature("relu_max", top, _rounded(mean), _rounded(std))
    if name == "leaky_relu":  # relu(x) - alpha * relu(-x), whose product is 0
        alpha = float(params.get("alpha", 0.2))
        (m1, q1), (m2, q2) = _relu(mean, std), _relu(-mean, std)
        return m1 - alpha * m2, q1 + alpha * alpha * q2
    if name in FUNCTIONS:
        return _quadrature(name, float(params.get("alpha", 1.0)), _rounded(mean), _rounded(std))
    return None


# Past this the scale is lost anyway (float32 overflows at 3.4e38); clamping keeps mean + std * z and
# its square finite in float64, so an overflowed layer propagates large finite moments, never nan.
LARGE = 1e30


def mean_std(moments: Moments) -> tuple[float, float]:
    """The mean and standard deviation of `moments`, each clamped to +-LARGE (nan, inf included)."""
    mean, square = moments
    std = math.sqrt(max(square - mean * mean, 0.0)) if math.isfinite(square - mean * mean) else LARGE
    mean = mean if math.isfinite(mean) else LARGE
    return max(-LARGE, min(mean, LARGE)), min(std, LARGE)


# Where each saturating activation's slope falls below a tenth of its peak: a unit whose input lies
# beyond passes almost no gradient. tanh: 1 - tanh(x)^2 < 0.1; sigmoid: s(1 - s) < 0.025, the same
# point twice as far out (tanh(x) = 2 sigmoid(2x) - 1); hard_sigmoid (relu6(x + 3) / 6): flat beyond 3.
TANH_EDGE = math.atanh(math.sqrt(0.9))  # 1.818
SATURATION = {"tanh": (TANH_EDGE, "where tanh's slope is under a tenth of its peak"),
              "sigmoid": (2 * TANH_EDGE, "where sigmoid's slope is under a tenth of its peak"),
              "hard_sigmoid": (3.0, "where hard_sigmoid is flat")}


def saturated(name: str, moments: Moments) -> tuple[float, float, str] | None:
    """(threshold, share of units beyond it, what happens there) of a saturating activation on a
    Gaussian with `moments`; None for an activation that does not saturate on both sides."""
    found = SATURATION.get(ALIASES.get(name, name))
    if found is None:
        return None
    (threshold, words), (mean, std) = found, mean_std(moments)
    if std == 0:
        return threshold, float(abs(mean) > threshold), words
    return threshold, 1.0 - (_cdf((threshold - mean) / std) - _cdf((-threshold - mean) / std)), words


def _rounded(value: float) -> float:
    """Four significant digits, so that layers at nearly the same scale share one quadrature."""
    return float(f"{value:.4g}")

